//! `ctxlock.Unlock`: the once-only release handed out by every acquire.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use pyo3::exceptions::{PyResourceWarning, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::PyString;

use crate::core::cancel::Registration;
use crate::core::lock::LockView;
use crate::core::waiter::Mode;

use super::cancel::PyCancelToken;
use super::dealloc::{exception_set_aside, finalizing};
use super::lock::PyLock;
use super::sharable::PyLockView;

/// The lock object an `Unlock` belongs to. Holding the Python object (a plain
/// reference-count increment under the GIL) instead of cloning the core's `Arc` keeps two
/// atomic read-modify-writes off every acquire/unlock pair; the object keeps the slot alive.
pub(crate) enum Owner {
    Lock(Py<PyLock>),
    View(Py<PyLockView>),
}

impl Owner {
    #[inline]
    pub(crate) fn view(&self) -> &LockView {
        // `get` needs no GIL: both classes are frozen.
        match self {
            Owner::Lock(l) => l.get().kind(),
            Owner::View(v) => v.get().kind(),
        }
    }

    /// The owner of a hold taken through `lock`, which is a `Lock` or a `LockView`.
    pub(crate) fn of(lock: &Bound<'_, PyAny>) -> Owner {
        match lock.cast::<PyLock>() {
            Ok(l) => Owner::Lock(l.clone().unbind()),
            Err(_) => Owner::View(
                lock.cast::<PyLockView>()
                    .expect("BUG: an Unlock for an object that is not a lock")
                    .clone()
                    .unbind(),
            ),
        }
    }
}

/// The once-only release of one acquire (Go's ``UnlockFunc``).
///
/// The first call releases the lock; later calls do nothing. It may be called from any
/// thread or event loop. As a context manager it releases on exit. Only its own
/// ``Unlock`` releases a hold: the lock's ``__exit__``/``__aexit__`` release only holds
/// taken by ``with``/``async with``.
///
/// An ``Unlock`` that is garbage-collected while still holding its lock releases it and
/// emits a ``ResourceWarning``: a lock is never left held by an object nobody can reach.
#[pyclass(name = "Unlock", module = "ctxlock", frozen, freelist = 64, weakref)]
pub(crate) struct PyUnlock {
    /// `unlock()`'s entry point, read by CPython through the type's
    /// `tp_vectorcall_offset` (see `vectorcall.rs`); never read from Rust.
    #[allow(dead_code)]
    vectorcall: pyo3::ffi::vectorcallfunc,
    owner: Owner,
    /// Set by the one call that releases.
    released: AtomicBool,
    /// Whether `on_cancel` holds registrations (checked before taking its mutex).
    has_registration: AtomicBool,
    /// One registration per `unlock_on_cancel` token; dropped on release.
    on_cancel: Mutex<Vec<Registration>>,
}

impl PyUnlock {
    /// Own a hold of `owner`'s lock the caller has just taken; only this `Unlock`
    /// releases it.
    pub(crate) fn new(owner: Owner) -> PyUnlock {
        PyUnlock {
            vectorcall: super::vectorcall::call_unlock,
            owner,
            released: AtomicBool::new(false),
            has_registration: AtomicBool::new(false),
            on_cancel: Mutex::new(Vec::new()),
        }
    }

    /// Where this object's vectorcall entry point is stored.
    pub(crate) fn vectorcall_field(&self) -> *const pyo3::ffi::vectorcallfunc {
        &self.vectorcall
    }

    fn is_released(&self) -> bool {
        // ORDERING: a snapshot; `claim_release` decides.
        self.released.load(Ordering::Relaxed)
    }

    /// True for exactly one caller: the one that must release.
    #[inline]
    fn claim_release(&self) -> bool {
        // With the GIL every caller is attached (Python calls, `__del__`, and the
        // `unlock_on_cancel` callback, which attaches first), so calls are serialized
        // and a load and a store decide as well as a swap would, without its locked
        // instruction. ORDERING: Relaxed: the GIL orders these accesses.
        #[cfg(not(Py_GIL_DISABLED))]
        {
            if self.released.load(Ordering::Relaxed) {
                return false;
            }
            self.released.store(true, Ordering::Relaxed);
            true
        }
        // Without the GIL, callers may race: one atomic swap decides. ORDERING: Relaxed
        // RMWs on one atomic have a single order, so exactly one caller sees `false`;
        // the release itself orders the critical section.
        #[cfg(Py_GIL_DISABLED)]
        {
            !self.released.swap(true, Ordering::Relaxed)
        }
    }

    fn registrations(&self) -> std::sync::MutexGuard<'_, Vec<Registration>> {
        // Nothing panics under this mutex; a poisoned one still holds a valid Vec.
        self.on_cancel.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn unregister_all(&self) {
        let taken = std::mem::take(&mut *self.registrations());
        // The callbacks hold `Py` references: drop them attached, so that their counts
        // fall now even when the release came through an entry point without PyO3's
        // attach count (`vectorcall.rs`).
        Python::attach(|_| {
            for r in taken {
                r.unregister();
            }
        });
    }

    pub(crate) fn release(&self) -> bool {
        if !self.claim_release() {
            return false;
        }
        let released = self.owner.view().unlock();
        debug_assert!(released, "BUG: an Unlock did not hold its lock");
        // ORDERING: Acquire pairs with the Release store in `unlock_on_cancel`, so a set
        // flag means the registration is in the mutex.
        if self.has_registration.load(Ordering::Acquire) {
            self.unregister_all();
        }
        true
    }
}

#[pymethods]
impl PyUnlock {
    fn __call__(&self) {
        self.release();
    }

    /// True once this ``Unlock`` has released its lock.
    #[getter]
    fn released(&self) -> bool {
        self.is_released()
    }

    /// Release when ``token`` is cancelled (at once if it already is).
    fn unlock_on_cancel(slf: &Bound<'_, Self>, token: &Bound<'_, PyAny>) -> PyResult<()> {
        let token = token
            .cast::<PyCancelToken>()
            .map_err(|_| PyTypeError::new_err("unlock_on_cancel() needs a CancelToken"))?;
        let this = slf.get();
        if this.is_released() {
            return Ok(());
        }
        let me: Py<PyUnlock> = slf.clone().unbind();
        let registration = token.get().token.on_cancel(move |_| {
            // Attach: releases are serialized by the GIL (see `claim_release`). During
            // interpreter shutdown nothing can wait for the lock any more.
            Python::try_attach(|_| me.get().release());
        });
        if let Some(r) = registration {
            this.registrations().push(r);
            // ORDERING: Release pairs with the Acquire load in `release`.
            this.has_registration.store(true, Ordering::Release);
            if this.is_released() {
                // Released meanwhile (free-threaded): leave no callback behind.
                this.unregister_all();
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

    fn __reduce__(slf: &Bound<'_, Self>) -> PyResult<()> {
        Err(super::errors::not_picklable(slf.as_any()))
    }

    // Mode, state and the repr of the lock it holds.
    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let mode = match self.owner.view().mode() {
            Mode::Exclusive => "exclusive",
            Mode::Shared => "shared",
        };
        let state = if self.is_released() {
            "released"
        } else {
            "holding"
        };
        let lock = match &self.owner {
            Owner::Lock(l) => l.bind(py).repr()?,
            Owner::View(v) => v.bind(py).repr()?,
        };
        Ok(format!("<ctxlock.Unlock {mode} {state} lock={lock}>"))
    }
}

impl Drop for PyUnlock {
    fn drop(&mut self) {
        if self.is_released() {
            // The common case, and on the path of every `unlock = lock.acquire();
            // unlock()` pair: nothing to release, no Python to run.
            return;
        }
        // Run by the deallocator, so attached, but perhaps while an exception is being
        // raised, inside a collection or at shutdown (see `dealloc.rs`). The release runs
        // with the exception set aside, since handing the lock to a task calls Python; the
        // warning too, and not at shutdown. If Python cannot be attached to at all, the
        // lock is still released.
        let done = Python::try_attach(|py| {
            exception_set_aside(py, |py| {
                if self.release() && !finalizing() {
                    warn_forgotten(py);
                }
            })
        });
        if done.is_none() {
            self.release();
        }
    }
}

/// The `ResourceWarning` of an `Unlock` destroyed while holding; with warnings turned
/// into errors (`-W error`), the error goes to `sys.unraisablehook`.
fn warn_forgotten(py: Python<'_>) {
    let category = py.get_type::<PyResourceWarning>();
    let message =
        c"ctxlock: an Unlock was garbage-collected while holding its lock; the lock was released";
    if let Err(e) = PyErr::warn(py, &category, message, 1) {
        e.write_unraisable(py, Some(PyString::new(py, "Unlock.__del__").as_any()));
    }
}
