//! Parking a thread in slices, so that a caller that must react to signals can.
//!
//! Parkers swallow EINTR, so a caller that must run something while it waits (Python's
//! main thread runs signal handlers) passes an [`Interrupt`]: the wait is cut into
//! slices and the check runs after each one. No lock and no token knowledge here.

use std::time::{Duration, Instant};

use super::deadline::earliest;

/// A check run while waiting, e.g. "run pending signal handlers".
pub struct Interrupt<E> {
    /// The longest stretch between two checks.
    pub every: Duration,
    /// Fails to end the wait.
    pub check: fn() -> Result<(), E>,
}

/// Park once with `park`, until `until`, or one slice of `interrupt` and then its check.
pub(crate) fn park_step<E>(
    interrupt: &Option<Interrupt<E>>,
    until: Option<Instant>,
    park: impl FnOnce(Option<Instant>),
) -> Result<(), E> {
    match interrupt {
        Some(i) => {
            let slice_end = Instant::now() + i.every;
            park(Some(earliest(until, Some(slice_end)).unwrap_or(slice_end)));
            (i.check)()
        }
        None => {
            park(until);
            Ok(())
        }
    }
}
