//! Stepping aside: an interrupted wait gives up its place while its check runs a wait.
//!
//! A wait that runs a check between park slices ([`Interrupt`](super::park::Interrupt):
//! Python's main thread runs signal handlers there) may find the check blocking in turn
//! on the same thread: a handler that acquires, perhaps the very lock its thread waits
//! for, or waits for a thread that needs it. Kept queued, the interrupted waiter could
//! be handed that lock and use it only once the handler returned: a deadlock. So while
//! a check runs, this file keeps how to make the interrupted wait step aside, and every
//! wait that is about to park on the thread, or a task that queues there, calls
//! [`step_aside_interrupted`] first. The interrupted waiter then leaves its queue,
//! passing on a grant that reached it meanwhile, and queues again once the check
//! returns. CPython's `threading.Lock` leaves its queue the same way before it runs
//! handlers.
//!
//! Assumes that a check runs to its end on the thread's own stack: one that switched
//! stacks (a greenlet's switch inside a signal handler) and began a wait on another
//! stack would reach a wait whose frame is not live. No check ctxlock passes does so.

use std::cell::Cell;

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
    /// The wait of this thread whose check is running, until a wait that began
    /// meanwhile made it step aside (and took it out). Set only by `run_check`, which
    /// puts back what was here before when the check returns or unwinds.
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
pub(crate) fn run_check<E, A: StepAside>(wait: &A, check: fn() -> Result<(), E>) -> Result<(), E> {
    let erased = Erased {
        wait: (wait as *const A).cast(),
        step_aside: step_aside_erased::<A>,
    };
    let _restore = Restore(INTERRUPTED.replace(Some(erased)));
    check()
}

/// Called by a wait of this thread that is about to block: if it runs within the
/// check of an interrupted wait of this thread, that wait steps aside first (once).
#[inline]
pub(crate) fn step_aside_interrupted() {
    if let Some(e) = INTERRUPTED.take() {
        // SAFETY: every `Erased` here was put by a `run_check` frame still active on
        // this thread (see the module's note on stacks): its `Restore` removes it on
        // return or unwind, and only ever puts back the one of an enclosing frame. So
        // `e.wait` points to that frame's live `A`.
        unsafe { (e.step_aside)(e.wait) }
    }
}
