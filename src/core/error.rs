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
    /// The interrupt check failed (a signal handler raised).
    Interrupted(E),
}

impl<E> fmt::Debug for AcquireError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AcquireError::Timeout => "Timeout",
            AcquireError::Cancelled(_) => "Cancelled",
            AcquireError::WouldBlock => "WouldBlock",
            AcquireError::Interrupted(_) => "Interrupted",
        })
    }
}

impl<E> fmt::Display for AcquireError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AcquireError::Timeout => "the deadline passed before the lock was acquired",
            AcquireError::Cancelled(_) => "the acquire was cancelled",
            AcquireError::WouldBlock => "the lock is taken",
            AcquireError::Interrupted(_) => "the wait was interrupted",
        })
    }
}

impl<E> std::error::Error for AcquireError<E> {}
