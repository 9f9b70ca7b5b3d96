//! `ctxlock.Lock`, and the members it shares with the `SharableLock` views.
//!
//! Every acquire runs the same three steps: parse the arguments (no clock), check the
//! token and try the CAS with the GIL held; only if the CAS fails does it go to the
//! `#[cold]` contended path, which reads the clock and releases the GIL while it waits.
//! `with lock:` uses the CAS directly and creates no `Unlock` object.

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;

use crate::core::acquire;
use crate::core::cancel::CancelToken;
use crate::core::deadline::Timeout;
use crate::core::lock::{Lock, LockView};
use crate::core::raw::RawLock;

use super::args;
use super::blocking::{self, thread_ident};
use super::errors::to_pyerr;
use super::kind::{DynKind, Kind};
use super::unlock::PyUnlock;

/// Self-deadlock detection: a hold taken by `async with` in a task is tagged with the
/// thread of the task's event loop, from `__aenter__` until its `__aexit__`.
///
/// The rule: a blocking acquire raises `RuntimeError` instead of waiting exactly when
/// its wait could never end: it has no deadline and no token, it runs on a thread whose
/// event loop has a task holding the lock by `async with`, and it has to wait. That
/// hold ends only with the task's `__aexit__`, which runs on this loop, which this wait
/// blocks. Nothing else is a provable deadlock, so nothing else raises: a wait with a
/// deadline or a token ends (with `LockTimeout` or `Cancelled`), and a hold owned by an
/// `Unlock` may be released from any thread (the task may have handed it to one).
pub(crate) struct TaskOwner;

impl TaskOwner {
    /// Tag a hold just taken by `async with`.
    pub(crate) fn set(kind: &(impl DynKind + ?Sized)) {
        kind.tag_hold(thread_ident());
    }

    /// Untag a hold that `__aexit__` (on the loop's thread) released.
    pub(crate) fn clear(kind: &(impl DynKind + ?Sized)) {
        kind.untag_hold(thread_ident());
    }

    fn check(kind: &(impl DynKind + ?Sized)) -> PyResult<()> {
        if kind.has_tagged_hold(thread_ident()) {
            return Err(PyRuntimeError::new_err(
                "deadlock: a blocking acquire with no deadline and no token on an event \
                 loop's thread, while a task of that loop holds the lock by `async with`; \
                 use `await lock.acquire_async()` in the event loop",
            ));
        }
        Ok(())
    }
}

/// `acquire(cancel, *, deadline, blocking)` up to the hold; the caller wraps it. The
/// rules are the core driver's (`core/acquire.rs`); this parses and waits with the GIL
/// released.
#[inline]
pub(crate) fn lock<K: Kind>(
    py: Python<'_>,
    kind: &K,
    cancel: Option<&Bound<'_, PyAny>>,
    deadline: Option<&Bound<'_, PyAny>>,
    blocking: bool,
) -> PyResult<()> {
    if cancel.is_none() && deadline.is_none() && blocking {
        // The plain `acquire()`: nothing to parse or check.
        return lock_plain(py, kind);
    }
    let timeout = args::timeout(deadline, "deadline")?;
    let token = args::token(cancel)?.map(|t| &t.get().token);
    if !blocking && deadline.is_some_and(|d| !d.is_none()) {
        return Err(PyValueError::new_err(
            "deadline cannot be given with blocking=False",
        ));
    }
    match acquire::try_first(kind, token, timeout, blocking) {
        Ok(true) => Ok(()),
        Ok(false) => lock_contended(py, kind, token, timeout),
        Err(e) => Err(to_pyerr::<PyErr>(py, e)),
    }
}

/// The wait of an acquire that may wait (the driver's rule 4).
#[cold]
fn lock_contended<K: Kind>(
    py: Python<'_>,
    kind: &K,
    token: Option<&CancelToken>,
    timeout: Timeout,
) -> PyResult<()> {
    if token.is_none() && timeout.is_never() {
        TaskOwner::check(kind)?;
    }
    blocking::lock(py, kind, token, timeout.deadline()).map_err(|e| to_pyerr(py, e))
}

/// The plain `acquire()`: the CAS, else the contended path with no deadline and no token.
#[inline]
fn lock_plain<K: Kind>(py: Python<'_>, kind: &K) -> PyResult<()> {
    if RawLock::try_lock(kind) {
        return Ok(());
    }
    lock_contended(py, kind, None, Timeout::NEVER)
}

/// `__enter__`: the plain acquire, kept as a scoped hold (`LockView::scope_hold`), which
/// only an `__exit__`/`__aexit__` releases.
#[inline]
pub(crate) fn enter<K: Kind>(py: Python<'_>, kind: &K) -> PyResult<()> {
    lock_plain(py, kind)?;
    kind.scope_hold();
    Ok(())
}

/// `__exit__`/`__aexit__`: release a hold taken by `with`/`async with`, never one that
/// belongs to an `Unlock`.
#[inline]
pub(crate) fn exit<K: Kind>(kind: &K) -> PyResult<()> {
    if kind.unlock_scoped() {
        return Ok(());
    }
    Err(PyRuntimeError::new_err(
        "release of a lock that is not held by a with statement",
    ))
}

/// The members `Lock` and `LockView` share, generated for both classes (a `#[pymethods]`
/// block cannot be inherited, and a Python base class would make the views subclassable),
/// and their hand-written `acquire` entry point (`vectorcall.rs`).
macro_rules! lock_methods {
    ($class:ident($kind:ty) { $($extra:tt)* }) => {
        impl $crate::python::vectorcall::FastAcquire for $class {
            type Kind = $kind;

            #[inline]
            fn kind(&self) -> &$kind {
                $class::kind(self)
            }

            fn generated() -> &'static std::sync::OnceLock<pyo3::ffi::PyCFunctionFastWithKeywords> {
                static GENERATED: std::sync::OnceLock<pyo3::ffi::PyCFunctionFastWithKeywords> =
                    std::sync::OnceLock::new();
                &GENERATED
            }
        }

        #[pymethods]
        impl $class {
            $($extra)*

            /// Acquire, waiting with the GIL released, and return the ``Unlock`` that releases.
            ///
            /// ``deadline`` is in seconds from now: ``None`` waits without limit, ``0`` tries
            /// once. ``blocking=False`` tries once and raises ``WouldBlock``. A ``cancel`` token
            /// that is already cancelled raises at once, even if the lock is free.
            ///
            /// Cancellation: a waiter that times out, is cancelled or is interrupted by a signal
            /// leaves the queue and does not hold the lock. If the lock was handed to it at that
            /// very moment, a timeout keeps it (the acquire succeeds) and a cancellation or
            /// signal passes it to the next waiter. Either way the lock is never leaked.
            ///
            /// Raises:
            ///     LockTimeout: the deadline (``deadline=`` or the token's) passed.
            ///     Cancelled: the token was cancelled; ``.reason`` is its reason.
            ///     WouldBlock: ``blocking=False`` and the lock is taken.
            ///     KeyboardInterrupt: (or whatever a signal handler raises) while waiting.
            ///     ValueError: ``deadline`` is negative or NaN, or given with ``blocking=False``.
            ///     TypeError: ``deadline`` is not a number or ``cancel`` is not a ``CancelToken``.
            ///     RuntimeError: the wait could never end: no deadline and no token, on an event
            ///         loop's thread while a task of that loop holds the lock by ``async with``
            ///         (only its ``__aexit__``, on this blocked loop, could release it), and the
            ///         acquire would have to wait. A hold owned by an ``Unlock`` never raises
            ///         this (the ``Unlock`` may be called from another thread); nor does a wait
            ///         with a deadline or a token (it ends with ``LockTimeout``/``Cancelled``).
            #[pyo3(signature = (cancel = None, *, deadline = None, blocking = true))]
            fn acquire(
                slf: &Bound<'_, Self>,
                cancel: Option<&Bound<'_, PyAny>>,
                deadline: Option<&Bound<'_, PyAny>>,
                #[pyo3(from_py_with = $crate::python::args::truthy)] blocking: bool,
            ) -> PyResult<PyUnlock> {
                use $crate::python::vectorcall::FastAcquire;
                $crate::python::lock::lock(slf.py(), slf.get().kind(), cancel, deadline, blocking)?;
                Ok(PyUnlock::new(Self::owner(slf.clone().unbind())))
            }

            /// Acquire without waiting; ``None`` if the lock is taken.
            fn try_acquire(slf: &Bound<'_, Self>) -> Option<PyUnlock> {
                use $crate::python::vectorcall::FastAcquire;
                $crate::core::raw::RawLock::try_lock(slf.get().kind())
                    .then(|| PyUnlock::new(Self::owner(slf.clone().unbind())))
            }

            /// True while the lock is held (in this view's mode, for a ``SharableLock`` view).
            fn locked(&self) -> bool {
                $crate::python::kind::Kind::is_locked(self.kind())
            }

            fn __enter__(&self, py: Python<'_>) -> PyResult<()> {
                $crate::python::lock::enter(py, self.kind())
            }

            fn __exit__(
                &self,
                _exc_type: &Bound<'_, PyAny>,
                _exc: &Bound<'_, PyAny>,
                _tb: &Bound<'_, PyAny>,
            ) -> PyResult<()> {
                $crate::python::lock::exit(self.kind())
            }

            /// ``await`` to acquire from an asyncio task; the same queue as threads use.
            ///
            /// Returns a coroutine (``asyncio.create_task``, ``TaskGroup.create_task`` and anyio
            /// accept it) that acquires only when awaited; closing it unawaited is harmless.
            /// Raises ``RuntimeError`` when awaited with no running asyncio event loop (trio).
            ///
            /// Completes without touching the event loop when the lock is free. Waiting tasks are
            /// served in FIFO order. ``task.cancel()``, ``asyncio.timeout()``, the token and the
            /// deadline each end the wait (CancelledError, TimeoutError, ``Cancelled``,
            /// ``LockTimeout``), and in every race the lock is never leaked or held twice.
            #[pyo3(signature = (cancel = None, *, deadline = None))]
            fn acquire_async<'py>(
                slf: &Bound<'py, Self>,
                cancel: Option<&Bound<'py, PyAny>>,
                deadline: Option<&Bound<'py, PyAny>>,
            ) -> PyResult<Bound<'py, PyAny>> {
                use $crate::python::vectorcall::FastAcquire;
                $crate::python::asyncio::acquire(slf.py(), Self::owner(slf.clone().unbind()), cancel, deadline)
            }

            fn __aenter__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
                use $crate::python::vectorcall::FastAcquire;
                $crate::python::asyncio::enter(slf.py(), slf.get().kind(), || Self::owner(slf.clone().unbind()))
            }

            fn __aexit__<'py>(
                &self,
                py: Python<'py>,
                _exc_type: &Bound<'py, PyAny>,
                _exc: &Bound<'py, PyAny>,
                _tb: &Bound<'py, PyAny>,
            ) -> PyResult<Bound<'py, PyAny>> {
                $crate::python::asyncio::exit(py, self.kind())
            }

            fn _queue_task(
                slf: &Bound<'_, Self>,
                loop_: Py<PyAny>,
                fut: Py<PyAny>,
            ) -> $crate::python::asyncio::Waiting {
                use $crate::python::vectorcall::FastAcquire;
                $crate::python::asyncio::Waiting::queue(Self::owner(slf.clone().unbind()), loop_, fut)
            }

            fn __reduce__(slf: &Bound<'_, Self>) -> PyResult<()> {
                Err($crate::python::errors::not_picklable(slf.as_any()))
            }
        }
    };
}
pub(crate) use lock_methods;

/// An exclusive lock with deadlines and cancellation: Go's channel of capacity one.
///
/// Fairness: by default a lock just released may be re-taken by a running thread
/// (barging, which keeps throughput high under the GIL), but a thread that has waited
/// about 1 ms is handed the lock directly by the next unlock, so no waiter waits without
/// bound. ``fair=True`` hands the lock over in strict FIFO order every time. Asyncio
/// waiters are always served in FIFO order by hand-off.
#[pyclass(name = "Lock", module = "ctxlock", frozen, weakref)]
pub(crate) struct PyLock {
    lock: Lock,
}

impl PyLock {
    #[inline]
    pub(crate) fn kind(&self) -> &LockView {
        &self.lock
    }
}

lock_methods!(PyLock(LockView) {
    #[new]
    #[pyo3(signature = (*, fair = false))]
    fn new(fair: bool) -> Self {
        PyLock { lock: if fair { Lock::fair() } else { Lock::new() } }
    }

    /// Whether the lock hands over in strict FIFO order.
    #[getter]
    fn fair(&self) -> bool {
        self.lock.is_fair()
    }

    fn __repr__(&self) -> String {
        let state = if self.lock.is_locked() { "locked" } else { "unlocked" };
        format!("<ctxlock.Lock {state} fair={} waiting={}>", if self.lock.is_fair() { "True" } else { "False" }, self.lock.queued())
    }
});
