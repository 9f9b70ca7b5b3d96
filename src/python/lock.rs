//! `ctxlock.Lock`, and the members every lock class shares (`lock_methods!`).

use pyo3::prelude::*;

use crate::core::lock::{Lock, LockView};

use super::unlock::PyUnlock;

/// The members `Lock`, `LockView` and `NamedLock` share, generated for each class (a
/// `#[pymethods]` block cannot be inherited, and a Python base class would make the views
/// subclassable), and their hand-written `acquire`, `__enter__`, `__exit__`, `__aenter__`
/// and `__aexit__` entry points (`vectorcall.rs`). Each class
/// has its own `__reduce__`: a named lock of a shared scope pickles, the others do not.
macro_rules! lock_methods {
    ($class:ident($kind:ty) { $($extra:tt)* }) => {
        impl $crate::python::vectorcall::FastAcquire for $class {
            type Kind = $kind;

            #[inline]
            fn kind(&self) -> &$kind {
                $class::kind(self)
            }

            #[inline]
            fn acquired<'py>(lock: &Bound<'py, Self>, held: $crate::python::kind::Held) -> PyResult<Bound<'py, PyAny>> {
                let owner = Self::owner($crate::python::refcount::clone_ref(lock));
                Ok($crate::python::freelist::new_object(lock.py(), || PyUnlock::new(owner, held))?.into_any())
            }

            #[inline]
            fn enter_async_free<'py>(lock: &Bound<'py, Self>) -> Option<PyResult<Bound<'py, PyAny>>> {
                $crate::python::asyncio::enter_free(lock.py(), lock.get().kind())
            }

            #[inline]
            fn exit_async<'py>(lock: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
                $crate::python::asyncio::exit(lock.py(), lock.get().kind())
            }

            fn generated() -> &'static $crate::python::vectorcall::Generated {
                static GENERATED: $crate::python::vectorcall::Generated =
                    $crate::python::vectorcall::Generated::new();
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
            ///     BackendError: a named lock's manager is closed (or its scope failed).
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
                $crate::python::acquire::lock(slf.py(), slf.get().kind(), cancel, deadline, blocking)?;
                let held = $crate::python::acquire::taken_up(slf.py(), $crate::python::kind::Kind::take_up(slf.get().kind(), false))?;
                Ok(PyUnlock::new(Self::owner(slf.clone().unbind()), held))
            }

            /// Acquire without waiting; ``None`` if the lock is taken.
            fn try_acquire(slf: &Bound<'_, Self>) -> PyResult<Option<PyUnlock>> {
                use $crate::python::vectorcall::FastAcquire;
                $crate::python::acquire::try_once(slf.py(), slf.get().kind())?
                    .map(|held| Ok(PyUnlock::new(Self::owner(slf.clone().unbind()), held)))
                    .transpose()
            }

            /// True while the lock is held (in this view's mode, for a ``SharableLock`` view).
            ///
            /// A named lock of a closed manager, or of a manager made before ``fork()`` (in the
            /// child), raises ``BackendError``.
            fn locked(&self, py: Python<'_>) -> PyResult<bool> {
                $crate::python::acquire::answered(py, self.kind(), |k| {
                    $crate::python::kind::Kind::is_locked(k)
                })
            }

            /// A snapshot: ``locked``, ``holders`` (in this view's mode) and ``waiting`` (on the lock).
            ///
            /// See ``LockStatistics``. Both views of a ``SharableLock`` report the same
            /// ``waiting``: the lock has one queue. Nothing is waited for or changed. A named lock
            /// of a closed manager, or of a manager made before ``fork()`` (in the child), raises
            /// ``BackendError``.
            fn statistics(&self, py: Python<'_>) -> PyResult<$crate::python::stats::PyLockStatistics> {
                $crate::python::acquire::answered(py, self.kind(), |k| {
                    $crate::python::kind::Kind::statistics(k)
                })
                .map(Into::into)
            }

            fn __enter__(&self, py: Python<'_>) -> PyResult<()> {
                $crate::python::acquire::enter(py, self.kind())
            }

            fn __exit__(
                &self,
                _exc_type: &Bound<'_, PyAny>,
                _exc: &Bound<'_, PyAny>,
                _tb: &Bound<'_, PyAny>,
            ) -> PyResult<()> {
                $crate::python::acquire::exit(self.kind())
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
            // `**extra` is left out of the signature users see: it is there only for
            // the error.
            #[pyo3(
                signature = (cancel = None, *, deadline = None, **extra),
                text_signature = "($self, cancel=None, *, deadline=None)"
            )]
            fn acquire_async<'py>(
                slf: &Bound<'py, Self>,
                cancel: Option<&Bound<'py, PyAny>>,
                deadline: Option<&Bound<'py, PyAny>>,
                // Taken only to refuse it with a hint (`timeout=` is threading's name).
                extra: Option<&Bound<'py, pyo3::types::PyDict>>,
            ) -> PyResult<Bound<'py, PyAny>> {
                use $crate::python::vectorcall::FastAcquire;
                if let Some(extra) = extra.filter(|e| !e.is_empty()) {
                    return Err($crate::python::args::unexpected_keywords::<Self>("acquire_async", extra));
                }
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
    fn new(#[pyo3(from_py_with = crate::python::args::fair)] fair: bool) -> Self {
        PyLock { lock: if fair { Lock::fair() } else { Lock::new() } }
    }

    /// Whether the lock hands over in strict FIFO order.
    #[getter]
    fn fair(&self) -> bool {
        self.lock.is_fair()
    }

    fn __reduce__(slf: &Bound<'_, Self>) -> PyResult<()> {
        Err(super::errors::not_picklable(slf.as_any()))
    }

    fn __repr__(&self) -> String {
        let state = if self.lock.is_locked() { "locked" } else { "unlocked" };
        format!("<ctxlock.Lock {state} fair={} waiting={}>", if self.lock.is_fair() { "True" } else { "False" }, self.lock.queued())
    }
});
