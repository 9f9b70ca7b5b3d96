//! `ctxlock.SharableLock` and its two views, `rw.shared` and `rw.exclusive`.

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;

use crate::core::lock::{LockView, SharableLock};
use crate::core::waiter::Mode;

use super::lock::lock_methods;
use super::unlock::PyUnlock;

/// A phase-fair readers-writer lock; `rw.shared` and `rw.exclusive` are its two views.
#[pyclass(name = "SharableLock", module = "ctxlock", frozen)]
pub(crate) struct PySharableLock {
    shared: Py<PyLockView>,
    exclusive: Py<PyLockView>,
}

#[pymethods]
impl PySharableLock {
    #[new]
    fn new(py: Python<'_>) -> PyResult<Self> {
        let rw = SharableLock::new();
        Ok(PySharableLock {
            shared: Py::new(
                py,
                PyLockView {
                    view: rw.shared().clone(),
                },
            )?,
            exclusive: Py::new(
                py,
                PyLockView {
                    view: rw.exclusive().clone(),
                },
            )?,
        })
    }

    #[getter]
    fn shared(&self, py: Python<'_>) -> Py<PyLockView> {
        self.shared.clone_ref(py)
    }

    #[getter]
    fn exclusive(&self, py: Python<'_>) -> Py<PyLockView> {
        self.exclusive.clone_ref(py)
    }

    fn __reduce__(&self) -> PyResult<()> {
        Err(PyTypeError::new_err("cannot pickle 'SharableLock' object"))
    }

    fn __repr__(&self) -> String {
        let v = &self.exclusive.get().view;
        let state = if v.is_locked() {
            "locked exclusive".to_string()
        } else if v.readers() > 0 {
            format!("shared by {}", v.readers())
        } else {
            "unlocked".to_string()
        };
        format!("<ctxlock.SharableLock {state} waiting={}>", v.queued())
    }
}

/// One mode of a `SharableLock` (`rw.shared` or `rw.exclusive`), with the members of `Lock`.
#[pyclass(name = "LockView", module = "ctxlock", frozen)]
pub(crate) struct PyLockView {
    view: LockView,
}

impl PyLockView {
    #[inline]
    pub(crate) fn view(&self) -> &LockView {
        &self.view
    }
}

impl From<Py<PyLockView>> for super::unlock::Owner {
    fn from(view: Py<PyLockView>) -> Self {
        super::unlock::Owner::View(view)
    }
}

lock_methods!(PyLockView {
    #[getter]
    fn shared(&self) -> bool {
        self.view.mode() == Mode::Shared
    }

    fn __repr__(&self) -> String {
        let mode = if self.view.mode() == Mode::Shared { "shared" } else { "exclusive" };
        let state = if self.view.is_locked() { "locked" } else { "unlocked" };
        format!("<ctxlock.LockView {mode} {state}>")
    }
});
