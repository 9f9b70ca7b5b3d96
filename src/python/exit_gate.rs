//! Calls into Python from threads that may not hold the GIL (a deadline's callbacks on
//! a runner thread, a grant rung or a lock released on the timer thread, a `cancel()` in
//! a daemon thread) while the interpreter exits.
//!
//! Before 3.14, CPython ends a thread that takes the GIL once finalization has begun with
//! `pthread_exit`, a forced unwind. Meeting ctxlock's Rust frames (a `catch_unwind`, an
//! `extern "C"` entry point), that unwind aborts the whole process: a deadline that fired
//! as a script ended killed it with SIGABRT. (3.14 parks such a thread instead, and PyO3
//! refuses to attach once finalization has begun on 3.13+, but neither helps a call that
//! began just before and gives up the GIL inside, as a callback that sleeps does.)
//! Stopping the unwind in a destructor instead is no way out: a forced unwind through
//! frames with destructors is undefined behaviour in Rust.
//!
//! So the gate closes in ctxlock's `atexit` hook, which runs before finalization begins:
//! from then on only the exiting thread calls into Python through the gate, and the hook
//! waits, up to [`EXIT_WAIT`], for the calls already under way to end. A user's callback
//! turned away is not run (the exit would have cut it short). A release turned away (by
//! `unlock_on_cancel`), which the exiting thread may be waiting for, is kept for that
//! thread: it runs it after the hook's wait and whenever it runs signal handlers in a
//! blocking ctxlock wait. (An `atexit` handler registered before ctxlock was imported runs
//! after the hook, and may wait for such a lock.) Releases are quick; callbacks run
//! there one after another could hold the exit for as long as they all take.

use pyo3::prelude::*;
use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long the exit waits for calls under way (a callback that is still sleeping, say).
/// Bounded so that a callback that never returns cannot hold the process open; a call
/// still running after it may abort the process as before.
pub(crate) const EXIT_WAIT: Duration = Duration::from_secs(2);

/// Set once the gate has closed.
const CLOSED: usize = 1 << (usize::BITS - 1);

/// `CLOSED`, plus the number of calls under way (entered and not yet left, whether or not
/// the gate let them through). Invariant: the count is exactly the live `Entered` values
/// of this process (a forked child keeps only its own thread's: see `after_fork_in_child`).
static GATE: AtomicUsize = AtomicUsize::new(0);

/// Work the gate turned away, kept for the exiting thread (see the module's comment).
type Deferred = Box<dyn FnOnce(Python<'_>) + Send>;
static DEFERRED: Mutex<Vec<Deferred>> = Mutex::new(Vec::new());

thread_local! {
    /// This thread's live `Entered` values (a callback may cancel a token whose
    /// callbacks enter again).
    static MINE: Cell<usize> = const { Cell::new(0) };
    /// Whether this thread closed the gate: it goes on to finalize the interpreter,
    /// which may still run ctxlock's callbacks (a `__del__` that cancels), and it is the
    /// one thread CPython never ends.
    static EXITING: Cell<bool> = const { Cell::new(false) };
}

/// A call under way, counted in [`GATE`] while it lives.
struct Entered;

impl Entered {
    fn new() -> Option<Entered> {
        // ORDERING: Relaxed is enough for the handshake with `close`: both are
        // read-modify-writes of the one atomic, so one comes first in its modification
        // order, and either this sees CLOSED or `close`'s wait sees this count.
        let before = GATE.fetch_add(1, Ordering::Relaxed);
        MINE.with(|m| m.set(m.get() + 1));
        // Dropped (so uncounted) at once when the gate turns the call away.
        let entered = Entered;
        (before & CLOSED == 0 || EXITING.with(Cell::get)).then_some(entered)
    }
}

impl Drop for Entered {
    fn drop(&mut self) {
        MINE.with(|m| m.set(m.get() - 1));
        // ORDERING: Release pairs with `wait_for_calls`' Acquire load: what the call did
        // is done before the interpreter goes on to finalize.
        GATE.fetch_sub(1, Ordering::Release);
    }
}

/// `Python::try_attach(f)`, unless the interpreter has begun to exit and this is not the
/// exiting thread: `None` then, as when Python cannot be attached to at all.
pub(crate) fn attach<R>(f: impl FnOnce(Python<'_>) -> R) -> Option<R> {
    let _entered = Entered::new()?;
    Python::try_attach(f)
}

/// Run `f` attached, as [`attach`]; if the gate turns it away, or Python cannot be
/// attached to, keep it for the exiting thread (see [`run_deferred`]).
pub(crate) fn attach_or_defer(f: impl FnOnce(Python<'_>) + Send + 'static) {
    let mut f = Some(f);
    if let Some(_entered) = Entered::new() {
        Python::try_attach(|py| f.take().map(|f| f(py)));
    }
    if let Some(f) = f {
        lock_deferred().push(Box::new(f));
    }
}

/// In the exiting thread, once the gate has closed: run the work turned away so far
/// (once: what is turned away meanwhile, say by a daemon thread that goes on cancelling,
/// waits for the next call). Anywhere else, nothing (a thread-local read).
pub(crate) fn run_deferred(py: Python<'_>) {
    if !EXITING.with(Cell::get) {
        return;
    }
    // Taken out under the mutex, run outside it: a callback may defer more.
    let work = std::mem::take(&mut *lock_deferred());
    for f in work {
        f(py);
    }
}

fn lock_deferred() -> std::sync::MutexGuard<'static, Vec<Deferred>> {
    // Nothing panics under this mutex (pushes and a take), so the list is whole.
    DEFERRED.lock().unwrap_or_else(|e| e.into_inner())
}

/// Close the gate; the calling thread is the one that goes on to exit. Call
/// [`wait_for_calls`] next, without the GIL.
pub(crate) fn close() {
    EXITING.with(|e| e.set(true));
    // ORDERING: see `Entered::new`.
    GATE.fetch_or(CLOSED, Ordering::Relaxed);
}

/// Wait, up to [`EXIT_WAIT`], until no call that entered before [`close`] is under way.
/// Run without the GIL: those calls may be waiting for it.
pub(crate) fn wait_for_calls() {
    let until = Instant::now() + EXIT_WAIT;
    // Polled rather than signalled: this runs once, at exit, and only while a call is
    // under way; a condvar would put a lock on every call's path for it.
    // ORDERING: Acquire pairs with `Entered`'s Release (see there).
    while GATE.load(Ordering::Acquire) & !CLOSED != 0 && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// In a forked child: of the calls under way, only the forking thread's own go on (a
/// callback that forks); the parent's other threads are not the child's.
pub(crate) fn after_fork_in_child() {
    let mine = MINE.with(Cell::get);
    // ORDERING: the child has one thread here.
    let closed = GATE.load(Ordering::Relaxed) & CLOSED;
    GATE.store(closed | mine, Ordering::Relaxed);
}
