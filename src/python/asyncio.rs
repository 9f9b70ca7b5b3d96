//! asyncio: the Rust half of `acquire_async` and `async with`.
//!
//! The uncontended path is the same CAS as a thread's and returns an already-finished
//! awaitable ([`Ready`]): no future, no event-loop call. A contended acquire with a
//! token or a deadline runs the Python shim `ctxlock._asyncio.acquire`, which creates
//! one future and queues a [`Waiting`] in the lock's one wait queue; one with neither
//! (`async with`, plain `acquire_async()`) does the same steps in [`Acquiring`], an
//! awaitable with no Python frame of its own. Its waker, [`Doorbell`], completes that
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

use pyo3::exceptions::{PyBaseException, PyRuntimeError, PyStopIteration};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyIterator, PyType};

use crate::core::lock::LockView;
use crate::core::task::TaskWait;

use super::args;
use super::blocking::thread_ident;
use super::cancel::PyCancelToken;
use super::dealloc::exception_set_aside;
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
        let unlock = Bound::new(py, PyUnlock::new(Owner::of(lock)))?;
        return Ready::finished(py, Some(unlock.into_any().unbind()));
    }
    if timeout.is_now() {
        return Ready::failed(py, LockTimeout::new_err("the lock is taken (deadline=0)"));
    }
    let secs = timeout.duration().map(|d| d.as_secs_f64());
    if token.is_none() && secs.is_none() {
        return Acquiring::start(lock, true);
    }
    shim_fn!(py, "acquire")?.call1((lock, token, secs))
}

/// `__aenter__`.
pub(crate) fn enter<'py>(lock: &Bound<'py, PyAny>, view: &LockView) -> PyResult<Bound<'py, PyAny>> {
    let py = lock.py();
    if view.try_lock() {
        view.scope_hold();
        TaskOwner::set(view);
        return Ready::done(py);
    }
    Acquiring::start(lock, false)
}

/// `__aexit__`.
pub(crate) fn exit<'py>(py: Python<'py>, view: &LockView) -> PyResult<Bound<'py, PyAny>> {
    super::lock::exit(view)?;
    // `async with` runs on the task's loop thread, the thread its hold was tagged with.
    TaskOwner::clear(view);
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

/// A contended acquire with no token and no deadline: the shim's `acquire` without
/// its Python frame. The first step queues and yields the future (as `await fut`
/// does); the step after the doorbell rang takes the lock; an exception thrown in
/// while it waits, `close()`, or dropping it gives the wait up, as the shim's `except`
/// and [`Waiting`]'s `Drop` do.
#[pyclass(name = "_Acquiring", module = "ctxlock", frozen)]
pub(crate) struct Acquiring {
    lock: Py<PyAny>,
    want_unlock: bool,
    /// Taken out while a step runs, so no Python code runs under the mutex.
    state: Mutex<Step>,
}

enum Step {
    Start,
    /// Queued: the wait and the future's own iterator (`await fut`).
    Queued(Waiting, Py<PyIterator>),
    Done,
}

impl Acquiring {
    fn start<'py>(lock: &Bound<'py, PyAny>, want_unlock: bool) -> PyResult<Bound<'py, PyAny>> {
        let acquiring = Acquiring {
            lock: lock.clone().unbind(),
            want_unlock,
            state: Mutex::new(Step::Start),
        };
        Ok(Bound::new(lock.py(), acquiring)?.into_any())
    }

    fn take(&self) -> Step {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        std::mem::replace(&mut *state, Step::Done)
    }

    /// Step the future's iterator: yield what it yields, else take the lock.
    fn wait(
        &self,
        py: Python<'_>,
        waiting: Waiting,
        fut_iter: Bound<'_, PyIterator>,
    ) -> PyResult<Option<Py<PyAny>>> {
        match fut_iter.clone().next() {
            Some(Ok(yielded)) => {
                *self.state.lock().unwrap_or_else(|e| e.into_inner()) =
                    Step::Queued(waiting, fut_iter.unbind());
                Ok(Some(yielded.unbind()))
            }
            // Dropping `waiting` gives the wait up.
            Some(Err(e)) => Err(e),
            None => self.finish(py, &waiting),
        }
    }

    fn finish(&self, py: Python<'_>, waiting: &Waiting) -> PyResult<Option<Py<PyAny>>> {
        match waiting.finish(py, None, self.want_unlock)? {
            None => Ok(None),
            Some(unlock) => Err(PyStopIteration::new_err((Py::new(py, unlock)?,))),
        }
    }
}

#[pymethods]
impl Acquiring {
    fn __await__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// For `yield from lock.__aenter__().__await__()` (`asyncio.ensure_future`).
    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// `send(None)` is a step; the future's iterator ignores a value, and so does this.
    fn send(&self, py: Python<'_>, _value: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        self.__next__(py)?
            .ok_or_else(|| PyStopIteration::new_err((py.None(),)))
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        static GET_RUNNING_LOOP: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
        match self.take() {
            Step::Start => {
                let event_loop = GET_RUNNING_LOOP
                    .import(py, "asyncio.events", "get_running_loop")?
                    .call0()?;
                let fut = event_loop.call_method0(intern!(py, "create_future"))?;
                let fut_iter = fut.try_iter()?;
                let waiting = Waiting::queue(self.lock.bind(py), event_loop.unbind(), fut.unbind());
                if waiting.granted() {
                    return self.finish(py, &waiting);
                }
                self.wait(py, waiting, fut_iter)
            }
            Step::Queued(waiting, fut_iter) => self.wait(py, waiting, fut_iter.into_bound(py)),
            Step::Done => Ok(None),
        }
    }

    /// An exception at the `await` (task cancelled, `asyncio.timeout`): give up, raise it.
    #[pyo3(signature = (typ, val = None, _tb = None))]
    fn throw(
        &self,
        typ: Bound<'_, PyAny>,
        val: Option<Bound<'_, PyAny>>,
        _tb: Option<Bound<'_, PyAny>>,
    ) -> PyResult<Option<Py<PyAny>>> {
        drop(self.take());
        let exc = match val {
            Some(v) if v.is_instance_of::<PyBaseException>() => v,
            Some(v) if !v.is_none() && typ.is_instance_of::<PyType>() => typ.call1((v,))?,
            _ => typ,
        };
        Err(PyErr::from_value(exc))
    }

    /// The coroutine awaiting this was closed: give the wait up.
    fn close(&self) {
        drop(self.take());
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
    /// The thread that runs `event_loop` (the task queued from it, see `Waiting::queue`).
    loop_thread: u64,
    fut: Py<PyAny>,
    settle: OnceLock<Weak<Settle>>,
}

impl Doorbell {
    /// Complete the future on its loop: directly on the loop's own thread (the cheap
    /// path, e.g. a task releasing to the next task), else through
    /// `call_soon_threadsafe`. False if the loop is closed.
    ///
    /// The thread is compared, not the running loop: on 3.11 `_get_running_loop()`
    /// makes a `getpid` system call (its fork check), a few percent of a hand-off. On
    /// its own thread a loop's future may be completed directly even when that loop is
    /// not running at the moment: `set_result` only queues the callbacks with
    /// `call_soon`, which the loop runs when it runs again, and which raises
    /// `RuntimeError` if the loop is closed.
    fn ring(&self, py: Python<'_>) -> PyResult<bool> {
        static SET_DONE: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
        let fut = self.fut.bind(py);
        if thread_ident() == self.loop_thread {
            if fut.call_method0(intern!(py, "done"))?.is_truthy()? {
                return Ok(true);
            }
            return match fut.call_method1(intern!(py, "set_result"), (py.None(),)) {
                Ok(_) => Ok(true),
                // The loop is closed: the task will never run again.
                Err(e) if e.is_instance_of::<PyRuntimeError>(py) => Ok(false),
                Err(e) => Err(e),
            };
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
        // The release that granted may run anywhere, a deallocator included: the
        // exception being raised there (if any) is set aside while the future is rung.
        let rang = Python::try_attach(|py| {
            exception_set_aside(py, |py| {
                self.ring(py).unwrap_or_else(|e| {
                    e.write_unraisable(py, None);
                    false
                })
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
    /// Queue a task of `event_loop`; called from a task, so on the thread running that
    /// loop (the doorbell relies on it).
    pub(crate) fn queue(lock: &Bound<'_, PyAny>, event_loop: Py<PyAny>, fut: Py<PyAny>) -> Waiting {
        let view = Owner::of(lock).view().clone();
        let bell = Arc::new(Doorbell {
            event_loop,
            loop_thread: thread_ident(),
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
            Ok(Some(PyUnlock::new(Owner::of(settle.lock.bind(py)))))
        } else {
            settle.view.scope_hold();
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
