//! Calls into Python from threads that may not hold the GIL (a deadline's callbacks on
//! a runner thread, a grant rung on the timer thread, a `cancel()` in a daemon thread)
//! while the interpreter exits.
//!
//! Before 3.14, CPython ends a thread that takes the GIL once finalization has begun with
//! `pthread_exit`, a forced unwind. Meeting ctxlock's Rust frames (a `catch_unwind`, an
//! `extern "C"` entry point), that unwind aborts the whole process: a deadline that fired
//! as a script ended killed it with SIGABRT. (3.14 parks such a thread instead, and PyO3
//! refuses to attach once finalization has begun on 3.13+, but neither helps a call that
//! began just before and gives up the GIL inside, as a callback that sleeps does.)
//!
//! So the gate closes in ctxlock's `atexit` hook, which runs before finalization begins:
//! from then on only the exiting thread calls into Python through [`attach`], and the
//! hook waits, up to [`EXIT_WAIT`], for the calls already under way to end. The calls it
//! turns away are ones the exit would have cut short anyway.

use pyo3::prelude::*;
use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// How long the exit waits for calls under way (a callback that is still sleeping, say).
/// Bounded so that a callback that never returns cannot hold the process open; a call
/// still running after it may abort the process as before.
pub(crate) const EXIT_WAIT: Duration = Duration::from_secs(2);

/// Set once the gate has closed.
const CLOSED: usize = 1 << (usize::BITS - 1);

/// `CLOSED`, plus the number of calls under way (entered and not yet left, whether or not
/// the gate let them through). Invariant: the count is exactly the live `Entered` values
/// of this process (a forked child resets it: the parent's callers are not its threads).
static GATE: AtomicUsize = AtomicUsize::new(0);

thread_local! {
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
        // Dropped (so uncounted) at once when the gate turns the call away.
        let entered = Entered;
        (before & CLOSED == 0 || EXITING.with(Cell::get)).then_some(entered)
    }
}

impl Drop for Entered {
    fn drop(&mut self) {
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

/// In a forked child: the calls under way were the parent's threads', which the child
/// does not have.
pub(crate) fn after_fork_in_child() {
    // ORDERING: the child has one thread here.
    GATE.fetch_and(CLOSED, Ordering::Relaxed);
}
