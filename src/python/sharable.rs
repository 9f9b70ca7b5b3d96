//! `ctxlock.SharableLock` and its two views, `rw.shared` and `rw.exclusive`.

use pyo3::prelude::*;

use crate::core::lock::{LockView, SharableLock};
use crate::core::waiter::Mode;

use super::lock::lock_methods;
use super::unlock::PyUnlock;

/// A phase-fair readers-writer lock: Go's ``SharableLock`` on one slot.
///
/// Shared holders form a reader group that holds the exclusive slot together; the last
/// one out gives it back. While an exclusive acquirer waits, new shared acquirers queue
/// (writers are not starved). When an exclusive holder unlocks, every shared acquirer
/// that was waiting then gets in before the next exclusive one (readers are not starved).
/// An exclusive waiter that gives up lets the readers it held back in at once (if
/// another exclusive waiter is still queued, they stay behind it and get in right after).
#[pyclass(name = "SharableLock", module = "ctxlock", frozen, weakref)]
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

    /// The shared view: its holders form the reader group (Go's ``SharedLock``).
    #[getter]
    fn shared(&self, py: Python<'_>) -> Py<PyLockView> {
        self.shared.clone_ref(py)
    }

    /// The exclusive view: one holder, nobody else (Go's ``ExclusiveLock``).
    #[getter]
    fn exclusive(&self, py: Python<'_>) -> Py<PyLockView> {
        self.exclusive.clone_ref(py)
    }

    /// A snapshot of the whole lock: ``locked`` in either mode, ``holders`` (one writer or
    /// the readers) and ``waiting`` (both modes share one queue).
    fn statistics(&self) -> crate::python::stats::PyLockStatistics {
        let v = &self.exclusive.get().view;
        crate::core::stats::Statistics::of_both(v.statistics(), self.shared.get().view.statistics())
            .into()
    }

    fn __reduce__(slf: &Bound<'_, Self>) -> PyResult<()> {
        Err(super::errors::not_picklable(slf.as_any()))
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

/// One mode of a ``SharableLock``: ``rw.shared`` or ``rw.exclusive``.
///
/// It has the members of ``Lock`` with the same guarantees and errors, in its own mode.
#[pyclass(name = "LockView", module = "ctxlock", frozen, weakref)]
pub(crate) struct PyLockView {
    view: LockView,
}

impl PyLockView {
    #[inline]
    pub(crate) fn kind(&self) -> &LockView {
        &self.view
    }
}

lock_methods!(PyLockView(LockView) {
    /// True for ``rw.shared``, False for ``rw.exclusive``.
    #[getter]
    fn shared(&self) -> bool {
        self.view.mode() == Mode::Shared
    }

    fn __reduce__(slf: &Bound<'_, Self>) -> PyResult<()> {
        Err(super::errors::not_picklable(slf.as_any()))
    }

    fn __repr__(&self) -> String {
        let mode = if self.view.mode() == Mode::Shared { "shared" } else { "exclusive" };
        let state = if self.view.is_locked() { "locked" } else { "unlocked" };
        format!("<ctxlock.LockView {mode} {state} waiting={}>", self.view.queued())
    }
});
