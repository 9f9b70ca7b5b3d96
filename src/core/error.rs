//! Why an acquire did not acquire. No Python types: the binding maps these once.

use std::convert::Infallible;
use std::fmt;

use super::cancel::Reason;

/// Why an acquire returned without the lock. `E` is what the caller's interrupt check
/// returns (a pending Python exception in the binding); it is `Infallible` without one.
pub enum AcquireError<E = Infallible> {
    /// The acquire's own deadline passed.
    Timeout,
    /// The cancellation token was cancelled (perhaps by its own deadline) with this reason.
    Cancelled(Reason),
    /// A non-blocking acquire found the lock taken.
    WouldBlock,
    /// An acquire with a deadline of zero (try once) found the lock taken.
    TakenNow,
    /// The arguments disagree: a deadline was given with `blocking=False` (rule 0 of the
    /// driver, `acquire.rs`). Nothing was tried.
    DeadlineWithoutBlocking,
    /// The interrupt check failed (a signal handler raised).
    Interrupted(E),
    /// A task's wait was settled without it: given up because its doorbell could not
    /// reach it (its event loop is closed).
    Abandoned,
    /// The token was cancelled with a reason that says its deadline passed (the
    /// embedding tells which reasons do; the core never builds this one).
    TokenDeadline(Reason),
    /// The lock's backend failed or was closed (see `RawLock::failure`); what happened,
    /// in words an operator can act on.
    Backend(String),
}

impl<E> fmt::Debug for AcquireError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AcquireError::Timeout => "Timeout",
            AcquireError::Cancelled(_) => "Cancelled",
            AcquireError::WouldBlock => "WouldBlock",
            AcquireError::TakenNow => "TakenNow",
            AcquireError::DeadlineWithoutBlocking => "DeadlineWithoutBlocking",
            AcquireError::Interrupted(_) => "Interrupted",
            AcquireError::Abandoned => "Abandoned",
            AcquireError::TokenDeadline(_) => "TokenDeadline",
            AcquireError::Backend(_) => "Backend",
        })
    }
}

impl<E> fmt::Display for AcquireError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let AcquireError::Backend(why) = self {
            return f.write_str(why);
        }
        f.write_str(match self {
            AcquireError::Timeout => "the deadline passed before the lock was acquired",
            AcquireError::Cancelled(_) => "the acquire was cancelled",
            AcquireError::WouldBlock => "the lock is taken",
            AcquireError::TakenNow => "the lock is taken (deadline=0)",
            AcquireError::DeadlineWithoutBlocking => "deadline cannot be given with blocking=False",
            AcquireError::Interrupted(_) => "the wait was interrupted",
            AcquireError::Abandoned => "the wait was given up: its event loop could not be reached",
            AcquireError::TokenDeadline(_) => {
                "the cancel token's deadline passed before the lock was acquired"
            }
            AcquireError::Backend(_) => unreachable!(),
        })
    }
}

impl<E> std::error::Error for AcquireError<E> {}
