//! Parking a thread in slices, so that a caller that must react to signals can.
//!
//! Parkers swallow EINTR, so a caller that must run something while it waits (Python's
//! main thread runs signal handlers) passes an [`Interrupt`]: the wait is cut into
//! slices and the check runs after each one. No lock and no token knowledge here.
//!
//! A check may run a wait of its own on the thread: see `step_aside.rs`.

use std::time::{Duration, Instant};

use super::deadline::earliest;
use super::step_aside::{run_check, step_aside_interrupted, StepAside};

/// A check run while waiting, e.g. "run pending signal handlers".
pub struct Interrupt<E> {
    /// The longest stretch between two checks.
    pub every: Duration,
    /// Fails to end the wait. It runs on the waiting thread's own stack, to its end
    /// (see `step_aside.rs`).
    pub check: fn() -> Result<(), E>,
}

/// Park once with `park`, until `until`, or one slice of `interrupt` and then its check
/// (during which `wait` steps aside if a wait parks on this thread). First, if this
/// runs within another wait's check, that wait steps aside.
pub(crate) fn park_step<E, A: StepAside>(
    interrupt: &Option<Interrupt<E>>,
    until: Option<Instant>,
    park: impl FnOnce(Option<Instant>),
    wait: &A,
) -> Result<(), E> {
    step_aside_interrupted();
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
