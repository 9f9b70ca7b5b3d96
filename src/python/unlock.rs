//! `ctxlock.Unlock`: the once-only release handed out by every acquire.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use pyo3::exceptions::{PyResourceWarning, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::PyString;

use crate::core::cancel::Registration;
use crate::core::lock::LockView;
use crate::core::unlock::Unlock;
use crate::core::waiter::Mode;

use super::cancel::PyCancelToken;
use super::lock::TaskOwner;

/// Garbage collection of a still-holding `Unlock` releases the lock and warns: a lock
/// that nobody can reach any more must not stay held forever (that would hang every
/// later acquire silently), and the warning points at the bug, like an unclosed file's.
/// The once-only release of one acquire: call it to unlock; later calls do nothing.
#[pyclass(name = "Unlock", module = "ctxlock", frozen, freelist = 64)]
pub(crate) struct PyUnlock {
    inner: Unlock,
    /// Set when an asyncio task holds the lock exclusively through this Unlock
    /// (self-deadlock detection, see `lock.rs`).
    task_owner: bool,
    /// Whether `on_cancel` holds a registration (checked before taking its mutex).
    has_registration: AtomicBool,
    on_cancel: Mutex<Option<Registration>>,
}

impl PyUnlock {
    pub(crate) fn new(view: &LockView, task_owner: bool) -> PyUnlock {
        if task_owner {
            TaskOwner::set(view);
        }
        PyUnlock {
            inner: Unlock::new(view.clone()),
            task_owner,
            has_registration: AtomicBool::new(false),
            on_cancel: Mutex::new(None),
        }
    }

    pub(crate) fn release(&self) -> bool {
        if self.task_owner && !self.inner.released() {
            TaskOwner::clear(self.inner.view());
        }
        if !self.inner.unlock() {
            return false;
        }
        // ORDERING: Acquire pairs with the Release store in `unlock_on_cancel`, so a set
        // flag means the registration is in the mutex.
        if self.has_registration.load(Ordering::Acquire) {
            let taken = self
                .on_cancel
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take();
            if let Some(r) = taken {
                r.unregister();
            }
        }
        true
    }
}

#[pymethods]
impl PyUnlock {
    fn __call__(&self) {
        self.release();
    }

    #[getter]
    fn released(&self) -> bool {
        self.inner.released()
    }

    fn unlock_on_cancel(slf: &Bound<'_, Self>, token: &Bound<'_, PyAny>) -> PyResult<()> {
        let token = token
            .cast::<PyCancelToken>()
            .map_err(|_| PyTypeError::new_err("unlock_on_cancel() needs a CancelToken"))?;
        let me: Py<PyUnlock> = slf.clone().unbind();
        let registration = token.get().token.on_cancel(move |_| {
            // `get` needs no GIL: the class is frozen and its state is atomic.
            me.get().release();
        });
        if let Some(r) = registration {
            let this = slf.get();
            let old = this
                .on_cancel
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .replace(r);
            // ORDERING: Release pairs with the Acquire load in `release`.
            this.has_registration.store(true, Ordering::Release);
            if let Some(old) = old {
                old.unregister();
            }
            if this.inner.released() {
                // Released while we registered: do not keep the token's callback around.
                let taken = this
                    .on_cancel
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .take();
                if let Some(r) = taken {
                    r.unregister();
                }
            }
        }
        Ok(())
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, _exc: &Bound<'_, pyo3::types::PyTuple>) {
        self.release();
    }

    fn __reduce__(&self) -> PyResult<()> {
        Err(PyTypeError::new_err("cannot pickle 'Unlock' object"))
    }

    fn __repr__(&self) -> String {
        let mode = match self.inner.mode() {
            Mode::Exclusive => "exclusive",
            Mode::Shared => "shared",
        };
        let state = if self.inner.released() {
            "released"
        } else {
            "holding"
        };
        format!("<ctxlock.Unlock {mode} {state}>")
    }
}

impl Drop for PyUnlock {
    fn drop(&mut self) {
        if self.inner.released() || !self.release() {
            return;
        }
        // Dropped by Python's deallocator, so attached; try_attach guards the odd case.
        Python::try_attach(|py| {
            let category = py.get_type::<PyResourceWarning>();
            let message = c"ctxlock: an Unlock was garbage-collected while holding its lock; the lock was released";
            if let Err(e) = PyErr::warn(py, &category, message, 1) {
                e.write_unraisable(py, Some(PyString::new(py, "Unlock.__del__").as_any()));
            }
        });
    }
}
