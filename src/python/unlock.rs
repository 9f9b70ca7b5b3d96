//! `ctxlock.Unlock`: the once-only release handed out by every acquire.

use pyo3::exceptions::PyResourceWarning;
use pyo3::prelude::*;
use pyo3::types::PyString;

use crate::core::unlock::Unlock;
use crate::core::waiter::Mode;

use super::cancel::PyCancelToken;
use super::dealloc::{exception_set_aside, finalizing};
use super::kind::{Held, Lost, OwnedHold, Owner};
use super::vectorcall::{call_unlock, FastCall};

/// The once-only release of one acquire (Go's ``UnlockFunc``).
///
/// The first call releases the lock; later calls do nothing. It may be called from any
/// thread or event loop. As a context manager it releases on exit. Only its own
/// ``Unlock`` releases a hold: the lock's ``__exit__``/``__aexit__`` release only holds
/// taken by ``with``/``async with``.
///
/// An ``Unlock`` that is garbage-collected while still holding its lock releases it and
/// emits a ``ResourceWarning``: a lock is never left held by an object nobody can reach.
#[pyclass(name = "Unlock", module = "ctxlock", frozen, weakref)]
pub(crate) struct PyUnlock {
    /// `unlock()`'s entry point, read by CPython through the type's
    /// `tp_vectorcall_offset` (see `vectorcall.rs`); never read from Rust.
    #[allow(dead_code)]
    vectorcall: pyo3::ffi::vectorcallfunc,
    /// The once-only rule itself (the core's, for every kind of lock).
    unlock: Unlock<OwnedHold>,
    /// The `lost` token, once asked for (so every look gets the same object).
    lost: std::sync::OnceLock<Option<Py<PyCancelToken>>>,
}

/// One is made on every acquire: from a free list (`freelist.rs`).
impl super::freelist::Pooled for PyUnlock {
    fn free_list() -> &'static super::freelist::FreeList {
        static LIST: super::freelist::FreeList =
            super::freelist::FreeList::new(super::freelist::UNLOCK);
        &LIST
    }

    /// A released `Unlock` that never had a registration nor a `lost` token holds only
    /// its lock object (the common `unlock = lock.acquire(); unlock()`); any other goes
    /// through `Drop`, which may release, warn, or drop Python objects.
    fn parts_alone(&self) -> bool {
        self.unlock.is_finished() && self.lost.get().is_none()
    }

    fn take_apart(self) {
        let this = std::mem::ManuallyDrop::new(self);
        // SAFETY: `this` is never used again nor dropped (ManuallyDrop), so each field is
        // read out once and dropped here. `Drop for PyUnlock` does nothing for a released
        // Unlock, which `parts_alone` checked; the `lost` cell is empty, as checked too.
        let unlock = unsafe { std::ptr::read(&this.unlock) };
        let owner = unlock.into_hold().owner;
        // SAFETY: attached (`take_apart`'s contract); the owner's reference, given up.
        unsafe { super::refcount::decref(owner.into_object().into_ptr()) };
    }
}

impl PyUnlock {
    /// Own a hold of `owner`'s lock the caller has just taken; only this `Unlock`
    /// releases it.
    #[inline]
    pub(crate) fn new(owner: Owner, held: Held) -> PyUnlock {
        PyUnlock {
            vectorcall: call_unlock::<PyUnlock>,
            unlock: Unlock::new(OwnedHold::new(owner, held)),
            lost: std::sync::OnceLock::new(),
        }
    }

    /// Release if still held; true if this call released.
    #[inline]
    pub(crate) fn release(&self) -> bool {
        // With the GIL every caller is attached (Python calls, `__del__`, and the
        // `unlock_on_cancel` callback, which attaches first), so calls are serialized.
        #[cfg(not(Py_GIL_DISABLED))]
        {
            self.unlock.unlock_serialized()
        }
        // Without the GIL, callers may race: the core decides, by its atomic swap, or by
        // the release itself for a hold with an id (`Kind::try_take_up`).
        #[cfg(Py_GIL_DISABLED)]
        {
            self.unlock.unlock()
        }
    }
}

/// `unlock()` through the hand-written entry point (`vectorcall.rs`).
// SAFETY: `PyUnlock::new`, the only constructor, stores `call_unlock::<PyUnlock>` in the
// `vectorcall` field, which `vectorcall_field` points at.
unsafe impl FastCall for PyUnlock {
    #[inline]
    fn call(&self) {
        self.release();
    }

    fn vectorcall_field(&self) -> *const pyo3::ffi::vectorcallfunc {
        &self.vectorcall
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
        self.unlock.released()
    }

    /// The fence number of this hold (named locks), or ``None`` (``Lock``, ``SharableLock``).
    ///
    /// Per name, fences never decrease in grant order, and every exclusive hold's fence is
    /// greater than that of every earlier hold of that name, whichever client took it: give
    /// it to the storage the lock protects and let the storage refuse older fences.
    #[getter]
    fn fence(&self) -> Option<u64> {
        self.unlock.fence()
    }

    /// A ``CancelToken`` cancelled if this hold ends without this ``Unlock`` (named locks;
    /// ``None`` for ``Lock`` and ``SharableLock``, which never lose a hold).
    ///
    /// Its reason is a ``BackendError`` saying why (the manager was closed). Releasing by
    /// this ``Unlock`` never cancels it. Pass it as ``cancel=`` to work that must not
    /// outlive the hold. Every look returns the same token.
    #[getter]
    fn lost(&self, py: Python<'_>) -> PyResult<Option<Py<PyCancelToken>>> {
        if let Some(t) = self.lost.get() {
            return Ok(t.as_ref().map(|t| t.clone_ref(py)));
        }
        let hold = self.unlock.hold();
        let token = match hold.owner.kind().lost(hold.held) {
            None => None,
            Some(Lost::Live(token)) => Some(Py::new(py, PyCancelToken::from_core(token))?),
            Some(Lost::Ended) => {
                let token = crate::core::cancel::CancelToken::new(None);
                if !self.unlock.released() || hold.ended_before_release() {
                    // Ended, but not by this Unlock (which, if called since, released
                    // nothing): its manager was closed.
                    token.cancel(super::errors::backend_reason(
                        py,
                        hold.owner
                            .kind()
                            .failure()
                            .as_deref()
                            .unwrap_or("the hold was lost"),
                    )?);
                }
                Some(Py::new(py, PyCancelToken::from_core(token))?)
            }
        };
        let _ = self.lost.set(token);
        Ok(self
            .lost
            .get()
            .and_then(|t| t.as_ref().map(|t| t.clone_ref(py))))
    }

    /// Release when ``token`` is cancelled (at once if it already is).
    fn unlock_on_cancel(slf: &Bound<'_, Self>, token: &Bound<'_, PyAny>) -> PyResult<()> {
        let token = token.cast::<PyCancelToken>().map_err(|_| {
            super::args::wrong_type(token, "unlock_on_cancel() token must be a CancelToken")
        })?;
        let this = slf.get();
        if this.unlock.released() {
            return Ok(());
        }
        // A strong reference does not make a cycle that outlives the token: the
        // registration kept in this `Unlock` holds the token weakly (see `Registration`),
        // so once nothing can cancel the token any more, it goes, with this callback, and
        // an `Unlock` nobody else refers to is then collected (releasing and warning).
        let me: Py<PyUnlock> = slf.clone().unbind();
        let registration = token.get().token.on_cancel(move |_| {
            // Attach: releases are serialized by the GIL (see `release`). Through the
            // exit gate: a deadline may fire on the timer thread as the interpreter
            // exits; once it finalizes, the release is turned away (only a `__del__` in
            // the exiting thread could still wait for the lock, until its deadline).
            super::exit_gate::attach(|_| me.get().release());
        });
        if let Some(r) = registration {
            this.unlock.add_registration(r);
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

    // Mode, state (released by it, lost without it, or holding) and the repr of the lock.
    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let hold = self.unlock.hold();
        let owner = &hold.owner;
        let mode = match owner.kind().mode() {
            Mode::Exclusive => "exclusive",
            Mode::Shared => "shared",
        };
        let state = if self.unlock.released() {
            if hold.ended_before_release() {
                "lost"
            } else {
                "released"
            }
        } else {
            match owner.kind().lost(hold.held) {
                Some(Lost::Ended) => "lost",
                Some(Lost::Live(t)) if t.is_cancelled() => "lost",
                _ => "holding",
            }
        };
        let lock = owner.object().bind(py).repr()?;
        Ok(format!("<ctxlock.Unlock {mode} {state} lock={lock}>"))
    }
}

impl Drop for PyUnlock {
    fn drop(&mut self) {
        if self.unlock.released() {
            // The common case, and on the path of every `unlock = lock.acquire();
            // unlock()` pair: nothing to release, no Python to run.
            return;
        }
        // Run by the deallocator, so attached, but perhaps while an exception is being
        // raised, inside a collection or at shutdown (see `dealloc.rs`). The release runs
        // with the exception set aside, since handing the lock to a task calls Python; the
        // warning too, and not at shutdown. Through the exit gate: the warning runs Python
        // (a `showwarning` that sleeps) in whatever thread dropped this, a daemon thread
        // as the interpreter exits too. If the gate turns it away, or Python cannot be
        // attached to at all, the lock is still released.
        let done = super::exit_gate::attach(|py| {
            exception_set_aside(py, |py| {
                // A hold that ended without this Unlock (its manager closed) was not
                // held by it any more: nothing was released, there is nothing to warn of.
                if self.release() && !self.unlock.hold().ended_before_release() && !finalizing() {
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
