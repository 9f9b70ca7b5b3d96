//! asyncio: the Rust half of `acquire_async` and `async with`.
//!
//! `acquire_async()` returns an [`Acquire`], which asyncio and anyio take for a coroutine
//! and which does nothing until awaited. Its first step checks the token and tries the
//! same CAS as a thread's: a free lock is acquired with no future and no event-loop
//! call. A contended acquire creates one future and queues a [`Waiting`] in the lock's
//! one wait queue, with its token and deadline (no Python frame, whatever the
//! arguments). Its waker, [`Doorbell`], completes that future on the task's own loop
//! (directly on the loop's thread, else through `call_soon_threadsafe`); the core rings
//! it for a grant, for a cancel of the token (from any thread) and, from its timer
//! thread, at the token's deadline and the acquire's own, so no loop timer is involved.
//! The future is only a doorbell: who owns the lock is the waiter's status in the core,
//! and the wait is settled exactly once, by the task (`finish`, or giving up when an
//! exception is thrown in or it is closed or dropped) or, if the loop can no longer run
//! it, by the doorbell itself, which then passes the lock on. So no path leaks the lock
//! or grants it twice.
//!
//! XX: a release that grants many tasks rings each doorbell separately; batching them
//! into one `call_soon_threadsafe` per loop is left for the benchmark work.

use std::convert::Infallible;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::task::{Wake, Waker};

use pyo3::exceptions::{
    PyBaseException, PyRuntimeError, PyStopIteration, PyTypeError, PyValueError,
};
use pyo3::gc::PyVisit;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyIterator, PyType};
use pyo3::PyTraverseError;

use crate::core::acquire;
use crate::core::cancel::CancelToken;
use crate::core::deadline::Timeout;
use crate::core::raw::RawLock;
use crate::core::task::TaskWait;

use super::args;
use super::blocking::thread_ident;
use super::cancel::PyCancelToken;
use super::dealloc::exception_set_aside;
use super::errors::to_pyerr;
use super::kind::{Held, Kind, Owner};
use super::task_owner::TaskOwner;
use super::unlock::PyUnlock;

/// `acquire_async(cancel, *, deadline)`: the arguments are checked now, the lock is
/// touched only when the result is awaited (see [`Acquire`]).
pub(crate) fn acquire<'py>(
    py: Python<'py>,
    owner: Owner,
    cancel: Option<&Bound<'py, PyAny>>,
    deadline: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    let timeout = args::timeout(deadline, "deadline")?;
    let token = super::cancel::token(cancel)?.map(|t| t.clone().unbind());
    Acquire::create(py, owner, Step::Start { token, timeout }, true)
}

/// `__aenter__`. `async with` awaits at once, so the uncontended path takes the lock here
/// and returns the shared finished awaitable (the cheapest `async with`); a contended one
/// returns an [`Acquire`] that waits.
pub(crate) fn enter<'py, K: Kind>(
    py: Python<'py>,
    kind: &K,
    owner: impl FnOnce() -> Owner,
) -> PyResult<Bound<'py, PyAny>> {
    if trio_loaded(py)? {
        // Under trio a free lock would be taken and a taken one fail: fail both alike.
        running_loop(py)?;
    }
    // A kind that records who holds asks for the task only once it has the hold.
    let taken = if kind.names_owners() {
        RawLock::try_lock(kind).then(|| in_task(py, true, || kind.take_up(true)))
    } else {
        kind.try_take_up_scoped()
    };
    if let Some(taken) = taken {
        return enter_taken(py, kind, taken);
    }
    let start = Step::Start {
        token: None,
        timeout: Timeout::NEVER,
    };
    Acquire::create(py, owner(), start, false)
}

/// `__aenter__`'s common case on its own, for the hand-written entry point
/// (`vectorcall.rs`): a free lock of a kind that does not record who holds, with trio
/// not imported, taken here. `None` in every other case, which [`enter`] then takes.
#[inline]
pub(crate) fn enter_free<'py, K: Kind>(
    py: Python<'py>,
    kind: &K,
) -> Option<PyResult<Bound<'py, PyAny>>> {
    if kind.names_owners() {
        return None;
    }
    match trio_loaded(py) {
        Ok(false) => {}
        Ok(true) => return None,
        // Raised here, as the full `enter` would: the error is not dropped.
        Err(e) => return Some(Err(e)),
    }
    let taken = kind.try_take_up_scoped()?;
    Some(enter_taken(py, kind, taken))
}

/// Take up a hold `async with` took at once, tag it as the current task's, and finish.
fn enter_taken<'py, K: Kind>(
    py: Python<'py>,
    kind: &K,
    taken: Result<Held, String>,
) -> PyResult<Bound<'py, PyAny>> {
    super::acquire::taken_up(py, taken)?;
    TaskOwner::set(kind);
    Ready::done(py)
}

/// `__aexit__`.
pub(crate) fn exit<'py, K: Kind>(py: Python<'py>, kind: &K) -> PyResult<Bound<'py, PyAny>> {
    // As the task: a kind that records who holds releases this task's hold.
    in_task(py, kind.names_owners(), || super::acquire::exit(kind))?;
    // `async with` runs on the task's loop thread, the thread its hold was tagged with.
    TaskOwner::clear(kind);
    Ready::done(py)
}

/// Run `f` (which records a hold or a wait) as the current asyncio task, for a kind
/// that records who holds and waits (`query()`): the task's name goes with the record.
fn in_task<T>(py: Python<'_>, names_owners: bool, f: impl FnOnce() -> T) -> T {
    if !names_owners {
        return f();
    }
    crate::core::named::as_task(current_task_name(py), f)
}

/// `asyncio.current_task().get_name()`, if there is a current task.
fn current_task_name(py: Python<'_>) -> Option<std::sync::Arc<str>> {
    static CURRENT_TASK: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    let task = CURRENT_TASK
        .import(py, "asyncio.tasks", "current_task")
        .and_then(|f| f.call0())
        .ok()?;
    if task.is_none() {
        return None;
    }
    let name = task.call_method0(intern!(py, "get_name")).ok()?;
    Some(std::sync::Arc::from(name.extract::<String>().ok()?))
}

/// The running asyncio event loop of this thread, or a clear error: every wait needs one
/// (its doorbell is a future of that loop).
fn running_loop(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    static GET_RUNNING_LOOP: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    let event_loop = GET_RUNNING_LOOP
        .import(py, "asyncio.events", "_get_running_loop")?
        .call0()?;
    if event_loop.is_none() {
        return Err(PyRuntimeError::new_err(
            "ctxlock's acquire_async and async with need a running asyncio event loop; \
             trio and other event loops are not supported (under anyio, use its asyncio \
             backend, or call the blocking acquire in a worker thread)",
        ));
    }
    Ok(event_loop)
}

/// Whether trio has been imported: only then can `async with` on a free lock run under
/// an event loop that is not asyncio's. (Asking for the running loop costs a `getpid`
/// system call on CPython 3.11, as much again as the whole uncontended `async with`.)
fn trio_loaded(py: Python<'_>) -> PyResult<bool> {
    static MODULES: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    MODULES
        .import(py, "sys", "modules")?
        .contains(intern!(py, "trio"))
}

/// The awaitable finished with `None` of an uncontended `async with` and of `__aexit__`.
#[pyclass(name = "_Ready", module = "ctxlock", frozen)]
pub(crate) struct Ready;

impl Ready {
    /// The one shared, stateless instance.
    fn done(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
        static DONE: PyOnceLock<Py<Ready>> = PyOnceLock::new();
        let done = DONE.get_or_try_init(py, || Py::new(py, Ready))?;
        Ok(done.bind(py).clone().into_any())
    }
}

#[pymethods]
impl Ready {
    fn __await__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// For `yield from lock.__aenter__().__await__()` (`asyncio.ensure_future`).
    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__(&self) -> Option<Py<PyAny>> {
        None
    }
}

/// What `acquire_async()` returns, and `__aenter__` on a taken lock: an object that is a
/// coroutine to asyncio and anyio (`send`, `throw`, `close`, `__await__`, so
/// `collections.abc.Coroutine` recognises it), with no Python frame of its own.
///
/// Nothing happens until the first step: then it checks the token, takes a free lock, or
/// waits: queue, yield the future (as `await fut` does), and on the step after the
/// doorbell rang take the lock or raise why not (the token, the deadline). An exception
/// thrown in, `close()`, or dropping it gives any wait up ([`Waiting`]'s `Drop`), so no
/// stage leaks the lock or grants it twice.
#[pyclass(name = "_Acquire", module = "ctxlock", frozen)]
pub(crate) struct Acquire {
    owner: Owner,
    /// `acquire_async` returns an `Unlock`; `__aenter__` tags the hold and returns None.
    want_unlock: bool,
    /// Invariant: `Running` exactly while a step runs (taken out, so no Python code runs
    /// under the mutex); `Done` once it returned, raised or was closed, never left again.
    state: Mutex<Step>,
}

enum Step {
    /// Not yet stepped: nothing held, nothing queued.
    Start {
        token: Option<Py<PyCancelToken>>,
        timeout: Timeout,
    },
    /// Queued: the wait and the future's own iterator.
    Queued(Waiting, Py<PyIterator>),
    Running,
    Done,
}

/// How a step resumes.
enum Resume<'py> {
    Send(Bound<'py, PyAny>),
    Throw(Bound<'py, PyAny>),
}

/// What a step ends in, when it does not raise.
enum Suspend {
    /// Yielded this to the task; wait in this state.
    Yield(Py<PyAny>, Step),
    /// Finished; the value of the `await`.
    Return(Option<Py<PyAny>>),
}

impl Acquire {
    fn create(
        py: Python<'_>,
        owner: Owner,
        start: Step,
        want_unlock: bool,
    ) -> PyResult<Bound<'_, PyAny>> {
        let acquire = Acquire {
            owner,
            want_unlock,
            state: Mutex::new(start),
        };
        Ok(Bound::new(py, acquire)?.into_any())
    }

    fn take(&self) -> Step {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        match &*state {
            Step::Done => Step::Done,
            _ => std::mem::replace(&mut *state, Step::Running),
        }
    }

    fn put(&self, step: Step) {
        *self.state.lock().unwrap_or_else(|e| e.into_inner()) = step;
    }

    /// One step: `__next__`/`send` (`Send`), or `throw` (`Throw`). `Ok(None)` is a
    /// return of `None` (`__aenter__`); a return of a value raises `StopIteration`.
    fn step(&self, py: Python<'_>, how: Resume<'_>) -> PyResult<Option<Py<PyAny>>> {
        let step = match self.take() {
            Step::Done => {
                return Err(match how {
                    // A finished coroutine raises what is thrown into it.
                    Resume::Throw(exc) => PyErr::from_value(exc),
                    Resume::Send(_) => {
                        PyRuntimeError::new_err("cannot reuse already awaited coroutine")
                    }
                });
            }
            Step::Running => return Err(PyValueError::new_err("coroutine already executing")),
            step => step,
        };
        if matches!(step, Step::Start { .. }) && matches!(&how, Resume::Send(v) if !v.is_none()) {
            // It stays unstarted, as a coroutine does.
            self.put(step);
            return Err(PyTypeError::new_err(
                "can't send non-None value to a just-started coroutine",
            ));
        }
        match self.resume(py, step, how) {
            Ok(Suspend::Yield(yielded, step)) => {
                self.put(step);
                Ok(Some(yielded))
            }
            Ok(Suspend::Return(value)) => {
                self.put(Step::Done);
                match value {
                    None => Ok(None),
                    Some(v) => Err(PyStopIteration::new_err((v,))),
                }
            }
            Err(e) => {
                self.put(Step::Done);
                Err(e)
            }
        }
    }

    fn resume(&self, py: Python<'_>, step: Step, how: Resume<'_>) -> PyResult<Suspend> {
        match (step, how) {
            (Step::Start { token, timeout }, Resume::Send(_)) => self.start(py, token, timeout),
            (Step::Queued(waiting, fut_iter), Resume::Send(_)) => {
                self.wait(py, waiting, fut_iter.into_bound(py))
            }
            // Unstarted: raise it (nothing to give up). Queued: dropping the wait gives
            // it up, or passes on a lock granted at that moment.
            (_, Resume::Throw(exc)) => Err(PyErr::from_value(exc)),
            (Step::Running | Step::Done, _) => unreachable!("taken out by `step`"),
        }
    }

    /// The first step: token, free lock, then wait.
    fn start(
        &self,
        py: Python<'_>,
        token: Option<Py<PyCancelToken>>,
        timeout: Timeout,
    ) -> PyResult<Suspend> {
        // Only `acquire_async` gets here on a free lock; see `enter` for `async with`.
        let event_loop = running_loop(py)?;
        let cancel = token.as_ref().map(|t| &t.get().token);
        match acquire::try_first::<_, Infallible>(&self.owner, cancel, timeout, true) {
            Ok(true) => return Ok(Suspend::Return(self.held(py)?)),
            Ok(false) => {}
            Err(e) => return Err(to_pyerr(py, e)),
        }
        let fut = event_loop.call_method0(intern!(py, "create_future"))?;
        let fut_iter = fut.try_iter()?;
        let waiting = in_task(py, self.owner.kind().names_owners(), || {
            Waiting::queue(
                self.owner.clone_ref(py),
                event_loop.unbind(),
                fut.unbind(),
                cancel.cloned(),
                timeout,
            )
        });
        if waiting.granted() {
            return self.finish(py, &waiting);
        }
        self.wait(py, waiting, fut_iter)
    }

    /// The value of an acquire that holds the lock.
    fn held(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        let kind = self.owner.kind();
        let take_up = |scoped| in_task(py, kind.names_owners(), || kind.take_up(scoped));
        if self.want_unlock {
            let held = super::acquire::taken_up(py, take_up(false))?;
            let unlock = PyUnlock::new(self.owner.clone_ref(py), held);
            Ok(Some(Py::new(py, unlock)?.into_any()))
        } else {
            super::acquire::taken_up(py, take_up(true))?;
            TaskOwner::set(kind);
            Ok(None)
        }
    }

    /// Step the future's iterator: yield what it yields, else take the lock.
    fn wait(
        &self,
        py: Python<'_>,
        waiting: Waiting,
        fut_iter: Bound<'_, PyIterator>,
    ) -> PyResult<Suspend> {
        match fut_iter.clone().next() {
            Some(Ok(yielded)) => Ok(Suspend::Yield(
                yielded.unbind(),
                Step::Queued(waiting, fut_iter.unbind()),
            )),
            // Dropping `waiting` gives the wait up.
            Some(Err(e)) => Err(e),
            None => self.finish(py, &waiting),
        }
    }

    fn finish(&self, py: Python<'_>, waiting: &Waiting) -> PyResult<Suspend> {
        waiting
            .wait
            .finish::<Infallible>()
            .map_err(|e| to_pyerr(py, e))?;
        Ok(Suspend::Return(self.held(py)?))
    }
}

#[pymethods]
impl Acquire {
    fn __await__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// The future's iterator of a queued wait, for the cyclic GC: the task awaits this
    /// object, and the future's callback holds the task. Once the doorbell has rung (and
    /// let go of the future: see `Bell`), a task whose loop went away without running it
    /// is then garbage like any other cycle, and freeing it gives its wait up (or passes
    /// on a lock granted to it). Before the ring the doorbell's own reference keeps the
    /// future, and so the task, alive, as the queue of `asyncio.Lock` does.
    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        // `try_lock`: the collector must not block; a step running now holds no iterator
        // in the state (it is taken out: see `Step::Running`).
        if let Ok(state) = self.state.try_lock() {
            if let Step::Queued(_, fut_iter) = &*state {
                visit.call(fut_iter)?;
            }
        }
        Ok(())
    }

    /// For `yield from` in a generator-based coroutine.
    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        self.step(py, Resume::Send(py.None().into_bound(py)))
    }

    fn send(&self, py: Python<'_>, value: Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        self.step(py, Resume::Send(value))?
            .ok_or_else(|| PyStopIteration::new_err((py.None(),)))
    }

    /// An exception at the `await` (task cancelled, `asyncio.timeout`): give up, raise it.
    #[pyo3(signature = (typ, val = None, _tb = None))]
    fn throw(
        &self,
        py: Python<'_>,
        typ: Bound<'_, PyAny>,
        val: Option<Bound<'_, PyAny>>,
        _tb: Option<Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let exc = match val {
            Some(v) if v.is_instance_of::<PyBaseException>() => v,
            Some(v) if !v.is_none() && typ.is_instance_of::<PyType>() => typ.call1((v,))?,
            _ if typ.is_instance_of::<PyType>() => typ.call0()?,
            _ => typ,
        };
        self.step(py, Resume::Throw(exc))?
            .ok_or_else(|| PyStopIteration::new_err((py.None(),)))
    }

    /// Give up: unstarted, nothing to do; queued, leave the queue (or pass on a lock
    /// granted at that moment).
    fn close(&self) -> PyResult<()> {
        match self.take() {
            Step::Running => Err(PyValueError::new_err("coroutine already executing")),
            // Dropping a `Waiting` gives its wait up.
            _ => {
                self.put(Step::Done);
                Ok(())
            }
        }
    }
}

/// The waker of a queued task: rings the task's future on its own loop.
struct Doorbell {
    /// The loop and the future, until the first ring takes them out (see `Bell`).
    bell: Mutex<Option<Bell>>,
    /// The thread that runs the loop (the task queued from it, see `Waiting::queue`).
    loop_thread: u64,
    wait: OnceLock<Weak<TaskWait<Owner>>>,
}

/// What a doorbell rings: a task's loop and the future the task awaits.
///
/// Kept only until the first ring. After it the task wakes (and settles the wait) or its
/// loop is closed (and the doorbell gives the wait up), so nothing rings again. Kept
/// longer, these references, which the cyclic GC cannot see, would keep alive a task
/// whose loop was closed or dropped after the ring, with the lock granted to it: the
/// loop's ready queue then held the only other way to it.
struct Bell {
    event_loop: Py<PyAny>,
    fut: Py<PyAny>,
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
        // Taken out under the mutex, rung outside it (no Python code runs under it).
        let bell = self.bell.lock().unwrap_or_else(|e| e.into_inner()).take();
        // Rung already: the task wakes for that ring.
        let Some(bell) = bell else {
            return Ok(true);
        };
        bell.ring(py, self.loop_thread == thread_ident())
    }
}

impl Bell {
    /// See [`Doorbell::ring`]; `on_loop_thread`: the caller runs on the loop's thread.
    fn ring(&self, py: Python<'_>, on_loop_thread: bool) -> PyResult<bool> {
        static SET_DONE: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
        let fut = self.fut.bind(py);
        if on_loop_thread {
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
        // Through the exit gate: a grant can come from the timer thread as the
        // interpreter exits. The release that granted may run anywhere, a deallocator
        // included: the exception being raised there (if any) is set aside while the
        // future is rung.
        let rang = super::exit_gate::attach(|py| {
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
            if let Some(wait) = self.wait.get().and_then(Weak::upgrade) {
                wait.give_up();
            }
        }
    }
}

/// One queued asynchronous acquire; the core's `TaskWait` settles it exactly once.
pub(crate) struct Waiting {
    wait: Arc<TaskWait<Owner>>,
}

impl Waiting {
    /// Queue a task of `event_loop`, ended by `cancel` and `timeout` too; called from a
    /// task, so on the thread running that loop (the doorbell relies on it).
    fn queue(
        owner: Owner,
        event_loop: Py<PyAny>,
        fut: Py<PyAny>,
        cancel: Option<CancelToken>,
        timeout: Timeout,
    ) -> Waiting {
        let bell = Arc::new(Doorbell {
            bell: Mutex::new(Some(Bell { event_loop, fut })),
            loop_thread: thread_ident(),
            wait: OnceLock::new(),
        });
        let waker = Waker::from(bell.clone());
        let wait = Arc::new(TaskWait::start(owner, waker, cancel, timeout.deadline()));
        let _ = bell.wait.set(Arc::downgrade(&wait));
        Waiting { wait }
    }

    /// Whether the lock is this task's already (no need to wait).
    fn granted(&self) -> bool {
        self.wait.granted()
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        // A wait given up (an exception thrown in, closed, or dropped unfinished) must
        // not leave a waiter (or a granted lock) behind.
        self.wait.give_up();
    }
}
