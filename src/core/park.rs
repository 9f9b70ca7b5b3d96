//! Parking a thread in slices, so that a caller that must react to signals can.
//!
//! Parkers swallow EINTR, so a caller that must run something while it waits (Python's
//! main thread runs signal handlers) passes an [`Interrupt`]: the wait is cut into
//! slices and the check runs after each one. No lock and no token knowledge here.
//!
//! The check may run code that blocks in turn on this thread (a signal handler that
//! acquires). While a check runs, this file keeps how to make the interrupted wait step
//! aside ([`StepAside`]), and every wait that begins on the thread first calls
//! [`step_aside_interrupted`]. A queued waiter then leaves its queue, passing on a grant
//! that reached it meanwhile, instead of keeping a place that only the handler's return
//! could use: the handler may be waiting for that very lock, or for a thread that needs
//! it. CPython's `threading.Lock` leaves its queue the same way before it runs handlers.

use std::cell::Cell;
use std::time::{Duration, Instant};

use super::deadline::earliest;

/// A check run while waiting, e.g. "run pending signal handlers".
pub struct Interrupt<E> {
    /// The longest stretch between two checks.
    pub every: Duration,
    /// Fails to end the wait.
    pub check: fn() -> Result<(), E>,
}

/// A wait whose check may run a wait of its own on the same thread.
pub(crate) trait StepAside {
    /// Give up whatever the wait holds on to while it is not waiting (its place in a
    /// queue, a grant that reached it); it takes it up again once the check returns.
    /// Called at most once per check, from within it.
    fn step_aside(&self);
}

/// A wait with nothing to give up while its check runs (a token's wait).
impl StepAside for () {
    fn step_aside(&self) {}
}

/// A [`StepAside`] with its type erased, so that a thread-local can hold any.
#[derive(Clone, Copy)]
struct Erased {
    wait: *const (),
    step_aside: unsafe fn(*const ()),
}

/// # Safety
/// `wait` must point to a live `A`.
unsafe fn step_aside_erased<A: StepAside>(wait: *const ()) {
    // SAFETY: the caller's contract; `Erased` is made only by `run_check`, from an `&A`
    // that outlives its stay in `INTERRUPTED`.
    unsafe { (*wait.cast::<A>()).step_aside() }
}

thread_local! {
    /// The wait of this thread whose check is running, until something began a wait
    /// meanwhile and made it step aside. Set only by `run_check`, which puts back what
    /// was here before when the check returns or unwinds.
    static INTERRUPTED: Cell<Option<Erased>> = const { Cell::new(None) };
}

/// Puts back the interrupted wait of an outer check when an inner check ends.
struct Restore(Option<Erased>);

impl Drop for Restore {
    fn drop(&mut self) {
        INTERRUPTED.set(self.0);
    }
}

/// Run `check` for `wait`, which steps aside if a wait begins within it.
fn run_check<E, A: StepAside>(wait: &A, check: fn() -> Result<(), E>) -> Result<(), E> {
    let erased = Erased {
        wait: (wait as *const A).cast(),
        step_aside: step_aside_erased::<A>,
    };
    let _restore = Restore(INTERRUPTED.replace(Some(erased)));
    check()
}

/// Called by every wait as it begins: if it runs within the check of an interrupted
/// wait of this thread, that wait steps aside first (once).
pub(crate) fn step_aside_interrupted() {
    if let Some(e) = INTERRUPTED.take() {
        // SAFETY: `run_check` put `e` here from a reference that lives until its guard
        // takes it out again, which happens after this call returns: `e.wait` is live.
        unsafe { (e.step_aside)(e.wait) }
    }
}

/// Park once with `park`, until `until`, or one slice of `interrupt` and then its check
/// (during which `wait` steps aside if a wait begins on this thread).
pub(crate) fn park_step<E, A: StepAside>(
    interrupt: &Option<Interrupt<E>>,
    until: Option<Instant>,
    park: impl FnOnce(Option<Instant>),
    wait: &A,
) -> Result<(), E> {
    match interrupt {
        Some(i) => {
            let slice_end = Instant::now() + i.every;
            park(Some(earliest(until, Some(slice_end)).unwrap_or(slice_end)));
            run_check(wait, i.check)
        }
        None => {
            park(until);
            Ok(())
        }
    }
}
