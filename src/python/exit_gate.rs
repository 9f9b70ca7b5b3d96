//! Calls into Python from threads that may not hold the GIL (a deadline's callbacks on
//! a runner thread, a grant rung or a lock released on the timer thread, a forgotten
//! `Unlock`'s warning in any thread) around interpreter exit.
//!
//! Before 3.14, CPython ends a thread that takes the GIL once finalization has begun with
//! `pthread_exit`, a forced unwind. Meeting ctxlock's Rust frames (a `catch_unwind`, an
//! `extern "C"` entry point), that unwind aborts the whole process: deadline callbacks
//! that were sleeping as a script ended killed it with SIGABRT. (3.14 parks such a thread
//! instead, and PyO3 refuses to attach once finalization has begun on 3.13+, but neither
//! helps a call that began before and gives up the GIL inside, as a sleep does.) Stopping
//! the unwind in a destructor is no way out: a forced unwind through frames with
//! destructors is undefined behaviour in Rust.
//!
//! So each such call is counted while it runs, and ctxlock's `atexit` hook, which runs
//! before finalization begins, waits up to [`EXIT_WAIT`] for the calls under way to end.
//! Once finalization has begun, a call from any thread but the one that ran the hook is
//! turned away. Nothing is turned away before that: `atexit` handlers registered before
//! ctxlock was imported run after its hook, and may wait for a deadline, a release or a
//! task's grant. What is left: a call that begins after the hook's wait and is still
//! inside Python (sleeping) when finalization begins, as a daemon thread that goes on
//! cancelling tokens may be; nothing in ctxlock can stop CPython ending that thread.

use pyo3::prelude::*;
use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use super::dealloc::finalizing;

/// How long the exit waits for calls under way (a callback that is still sleeping, say).
/// Bounded so that a callback that never returns cannot hold the process open; a call
/// still running after it may abort the process as before.
const EXIT_WAIT: Duration = Duration::from_secs(2);

/// The number of calls under way. Invariant: exactly the live `Entered` values of this
/// process (a forked child keeps only its own thread's: see `after_fork_in_child`).
static UNDER_WAY: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// This thread's live `Entered` values (a callback may cancel a token whose
    /// callbacks enter again).
    static MINE: Cell<usize> = const { Cell::new(0) };
    /// Whether this thread ran the `atexit` hook: it goes on to finalize the
    /// interpreter, which may still run ctxlock's callbacks (a `__del__` that cancels),
    /// and it is the one thread CPython never ends.
    static EXITING: Cell<bool> = const { Cell::new(false) };
}

/// A call under way, counted in [`UNDER_WAY`] while it lives.
struct Entered;

impl Entered {
    fn new() -> Entered {
        // ORDERING: Relaxed: the count is one atomic, and `wait_for_calls` only needs to
        // see it fall to zero (the Release/Acquire pair in `drop` orders the work).
        UNDER_WAY.fetch_add(1, Ordering::Relaxed);
        MINE.with(|m| m.set(m.get() + 1));
        Entered
    }
}

impl Drop for Entered {
    fn drop(&mut self) {
        MINE.with(|m| m.set(m.get() - 1));
        // ORDERING: Release pairs with `wait_for_calls`' Acquire load: what the call did
        // is done before the interpreter goes on to finalize.
        UNDER_WAY.fetch_sub(1, Ordering::Release);
    }
}

/// `Python::try_attach(f)`, counted for the exit's wait; `None`, as when Python cannot
/// be attached to at all, once finalization has begun, unless this thread ran the
/// `atexit` hook.
pub(crate) fn attach<R>(f: impl FnOnce(Python<'_>) -> R) -> Option<R> {
    let _entered = Entered::new();
    if finalizing() && !EXITING.with(Cell::get) {
        return None;
    }
    Python::try_attach(f)
}

/// From the `atexit` hook, without the GIL (the calls may be waiting for it): mark this
/// thread as the exiting one, and wait, up to [`EXIT_WAIT`], until no call is under way.
pub(crate) fn wait_for_calls() {
    EXITING.with(|e| e.set(true));
    let until = Instant::now() + EXIT_WAIT;
    // Polled rather than signalled: this runs once, at exit, and only while a call is
    // under way; a condvar would put a lock on every call's path for it.
    // ORDERING: Acquire pairs with `Entered`'s Release (see there).
    while UNDER_WAY.load(Ordering::Acquire) != 0 && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// In a forked child: of the calls under way, only the forking thread's own go on (a
/// callback that forks); the parent's other threads are not the child's.
pub(crate) fn after_fork_in_child() {
    // ORDERING: the child has one thread here.
    UNDER_WAY.store(MINE.with(Cell::get), Ordering::Relaxed);
}
