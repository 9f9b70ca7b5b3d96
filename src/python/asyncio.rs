//! asyncio: the Rust half of `acquire_async` and `async with`.
//!
//! The uncontended path is the same CAS as a thread's and returns an already-finished
//! awaitable ([`Ready`]): no future, no event-loop call. A contended acquire runs the
//! Python shim `ctxlock._asyncio.acquire`, which creates one future and queues a
//! [`Waiting`] in the lock's one wait queue. Its waker, [`Doorbell`], completes that
//! future on the task's own loop (directly on the loop's thread, else through
//! `call_soon_threadsafe`). The future is only a doorbell: who owns the lock is the
//! waiter's status in the core, and the `Waiting` is settled exactly once, by the task
//! (`finish` or `cancel`) or, if the loop can no longer run it, by the doorbell itself,
//! which then passes the lock on. So no path leaks the lock or grants it twice.
//!
//! XX: a release that grants many tasks rings each doorbell separately; batching them
//! into one `call_soon_threadsafe` per loop is left for the benchmark work.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::task::{Wake, Waker};

use pyo3::exceptions::{PyRuntimeError, PyStopIteration};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;

use crate::core::lock::LockView;
use crate::core::task::TaskWait;

use super::args;
use super::blocking::thread_ident;
use super::cancel::PyCancelToken;
use super::errors::LockTimeout;
use super::lock::{token_error, TaskOwner};
use super::unlock::{Owner, PyUnlock};

/// A function of the Python half, `ctxlock._asyncio`, looked up once.
macro_rules! shim_fn {
    ($py:expr, $name:literal) => {{
        static FUNCTION: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
        FUNCTION.import($py, "ctxlock._asyncio", $name)
    }};
}
pub(crate) use shim_fn;

/// `acquire_async(cancel, *, deadline)`.
pub(crate) fn acquire<'py>(
    lock: &Bound<'py, PyAny>,
    view: &LockView,
    cancel: Option<&Bound<'py, PyAny>>,
    deadline: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    let py = lock.py();
    let timeout = args::timeout(deadline, "deadline")?;
    let token = args::token(cancel)?;
    if let Some(t) = token {
        if t.get().token.is_cancelled() {
            return Ready::failed(py, token_error(py, &t.get().token));
        }
    }
    if view.try_lock() {
        let unlock = Bound::new(py, PyUnlock::new(Owner::of(lock), true))?;
        return Ready::finished(py, Some(unlock.into_any().unbind()));
    }
    if timeout.is_now() {
        return Ready::failed(py, LockTimeout::new_err("the lock is taken (deadline=0)"));
    }
    let secs = timeout.duration().map(|d| d.as_secs_f64());
    shim_fn!(py, "acquire")?.call1((lock, token, secs, true))
}

/// `__aenter__`.
pub(crate) fn enter<'py>(lock: &Bound<'py, PyAny>, view: &LockView) -> PyResult<Bound<'py, PyAny>> {
    let py = lock.py();
    if view.try_lock() {
        TaskOwner::set(view);
        return Ready::done(py);
    }
    shim_fn!(py, "acquire")?.call1((lock, py.None(), py.None(), false))
}

/// `__aexit__`.
pub(crate) fn exit<'py>(py: Python<'py>, view: &LockView) -> PyResult<Bound<'py, PyAny>> {
    // `async with` runs on the task's loop thread, the thread its hold was tagged with.
    TaskOwner::clear(view, thread_ident());
    super::lock::exit(view)?;
    Ready::done(py)
}

/// An awaitable that is already finished: `await` returns its value (or raises) at once.
#[pyclass(name = "_Ready", module = "ctxlock", frozen)]
pub(crate) struct Ready {
    result: Mutex<Option<PyResult<Py<PyAny>>>>,
}

impl Ready {
    fn finished(py: Python<'_>, value: Option<Py<PyAny>>) -> PyResult<Bound<'_, PyAny>> {
        let value = value.unwrap_or_else(|| py.None());
        Ok(Bound::new(
            py,
            Ready {
                result: Mutex::new(Some(Ok(value))),
            },
        )?
        .into_any())
    }

    fn failed(py: Python<'_>, err: PyErr) -> PyResult<Bound<'_, PyAny>> {
        Ok(Bound::new(
            py,
            Ready {
                result: Mutex::new(Some(Err(err))),
            },
        )?
        .into_any())
    }

    /// The shared, stateless "finished with None" awaitable of `async with`.
    fn done(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
        static DONE: PyOnceLock<Py<Ready>> = PyOnceLock::new();
        let done = DONE.get_or_try_init(py, || {
            Py::new(
                py,
                Ready {
                    result: Mutex::new(None),
                },
            )
        })?;
        Ok(done.bind(py).clone().into_any())
    }
}

#[pymethods]
impl Ready {
    fn __await__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__(&self) -> PyResult<Option<Py<PyAny>>> {
        let taken = self.result.lock().unwrap_or_else(|e| e.into_inner()).take();
        match taken {
            None => Ok(None),
            Some(Ok(value)) => Err(PyStopIteration::new_err((value,))),
            Some(Err(e)) => Err(e),
        }
    }
}

/// One queued asynchronous acquire, settled exactly once.
struct Settle {
    /// `None`: the lock was acquired at once.
    wait: Option<TaskWait>,
    view: LockView,
    /// The lock object, for the `Unlock` a successful wait returns.
    lock: Py<PyAny>,
    settled: AtomicBool,
}

impl Settle {
    /// Claim the right to decide; false if someone already did.
    fn claim(&self) -> bool {
        // ORDERING: only decides who settles; the core's mutex orders the lock itself.
        !self.settled.swap(true, Ordering::Relaxed)
    }

    /// Whether this waiter ends up holding the lock, leaving the queue if it does not.
    fn take_or_leave(&self) -> bool {
        match &self.wait {
            None => true,
            Some(w) => w.granted() || !w.abandon(),
        }
    }

    /// Give up: leave the queue, or pass on a lock granted at the same moment.
    fn give_up(&self) {
        if self.claim() && self.take_or_leave() {
            self.view.unlock();
        }
    }
}

/// The waker of a queued task: rings the task's future on its own loop.
struct Doorbell {
    event_loop: Py<PyAny>,
    fut: Py<PyAny>,
    settle: OnceLock<Weak<Settle>>,
}

impl Doorbell {
    /// Complete the future on its loop: directly when this thread runs that loop (the
    /// cheap path, e.g. a task releasing to the next task), else through
    /// `call_soon_threadsafe`. False if the loop is closed.
    fn ring(&self, py: Python<'_>) -> PyResult<bool> {
        static GET_RUNNING_LOOP: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
        static SET_DONE: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
        let running = GET_RUNNING_LOOP
            .import(py, "asyncio.events", "_get_running_loop")?
            .call0()?;
        let fut = self.fut.bind(py);
        if running.is(&self.event_loop) {
            if !fut.call_method0(intern!(py, "done"))?.is_truthy()? {
                fut.call_method1(intern!(py, "set_result"), (py.None(),))?;
            }
            return Ok(true);
        }
        let set_done = SET_DONE.import(py, "ctxlock._asyncio", "_set_done")?;
        match self
            .event_loop
            .bind(py)
            .call_method1(intern!(py, "call_soon_threadsafe"), (set_done, fut))
        {
            Ok(_) => Ok(true),
            // The loop is closed: the task will never run again.
            Err(e) if e.is_instance_of::<PyRuntimeError>(py) => Ok(false),
            Err(e) => Err(e),
        }
    }
}

impl Wake for Doorbell {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        // try_attach: a grant can come from the timer thread during interpreter shutdown.
        let rang = Python::try_attach(|py| {
            self.ring(py).unwrap_or_else(|e| {
                e.write_unraisable(py, None);
                false
            })
        });
        if rang != Some(true) {
            // The task's loop is closed (or Python is gone): the task will never run, so
            // settle for it; a lock granted to it goes to the next waiter.
            if let Some(settle) = self.settle.get().and_then(Weak::upgrade) {
                settle.give_up();
            }
        }
    }
}

#[pyclass(name = "_Waiting", module = "ctxlock", frozen)]
pub(crate) struct Waiting {
    settle: Arc<Settle>,
}

impl Waiting {
    pub(crate) fn queue(lock: &Bound<'_, PyAny>, event_loop: Py<PyAny>, fut: Py<PyAny>) -> Waiting {
        let view = Owner::of(lock).view().clone();
        let bell = Arc::new(Doorbell {
            event_loop,
            fut,
            settle: OnceLock::new(),
        });
        let wait = view.lock_task(Waker::from(bell.clone()));
        let settle = Arc::new(Settle {
            wait,
            view,
            lock: lock.clone().unbind(),
            settled: AtomicBool::new(false),
        });
        let _ = bell.settle.set(Arc::downgrade(&settle));
        Waiting { settle }
    }
}

#[pymethods]
impl Waiting {
    /// Whether the lock is this task's already (no need to wait).
    fn granted(&self) -> bool {
        self.settle.wait.as_ref().is_none_or(TaskWait::granted)
    }

    /// The task was cancelled (or its coroutine closed) while waiting.
    fn cancel(&self) {
        self.settle.give_up();
    }

    /// The doorbell rang: take the lock, or raise why not.
    #[pyo3(signature = (token, want_unlock))]
    fn finish(
        &self,
        py: Python<'_>,
        token: Option<&Bound<'_, PyCancelToken>>,
        want_unlock: bool,
    ) -> PyResult<Option<PyUnlock>> {
        let settle = &self.settle;
        if !settle.claim() {
            return Err(PyRuntimeError::new_err(
                "the wait was given up: its event loop could not be reached",
            ));
        }
        let held = settle.take_or_leave();
        if let Some(t) = token.map(|t| &t.get().token) {
            if t.is_cancelled() {
                // A cancellation that was observed leaves the lock unchanged.
                if held {
                    settle.view.unlock();
                }
                return Err(token_error(py, t));
            }
        }
        if !held {
            return Err(LockTimeout::new_err(
                "the deadline passed before the lock was acquired",
            ));
        }
        if want_unlock {
            Ok(Some(PyUnlock::new(Owner::of(settle.lock.bind(py)), true)))
        } else {
            TaskOwner::set(&settle.view);
            Ok(None)
        }
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        // A coroutine destroyed without running its `except`/`finally` still must not
        // leave a waiter (or a granted lock) behind.
        self.settle.give_up();
    }
}
