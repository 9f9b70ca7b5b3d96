//! The give-up rule, for a blocked thread and a task alike.
//!
//! A waiter that stops waiting for any reason but a grant leaves the queue through
//! [`RawWaiter::abandon`]. If the lock was handed to it at that very moment, a timeout
//! keeps it (granted wins, as in CPython and parking_lot: the caller gets the lock it
//! waited for) and a cancellation, a signal or a task's cancellation passes it on
//! (x/sync's "cancel observed ⇒ lock unchanged").

use super::cancel::CancelToken;
use super::error::AcquireError;
use super::raw::{RawLock, RawWaiter};

/// Leave the queue of `lock` because of `why`; settle the race with a grant.
pub(crate) fn give_up<L: RawLock + ?Sized, E>(
    lock: &L,
    waiter: &L::Waiter,
    why: AcquireError<E>,
) -> Result<(), AcquireError<E>> {
    if waiter.abandon() {
        return Err(why);
    }
    keep_or_pass_on(lock, why)
}

/// A hold that reached a waiter that gives up because of `why`: a timeout keeps it,
/// anything else passes it on.
pub(crate) fn keep_or_pass_on<L: RawLock + ?Sized, E>(
    lock: &L,
    why: AcquireError<E>,
) -> Result<(), AcquireError<E>> {
    match why {
        AcquireError::Timeout => Ok(()),
        _ => {
            lock.unlock();
            Err(why)
        }
    }
}

/// The error of an acquire whose token is cancelled.
pub(crate) fn cancelled<E>(t: &CancelToken) -> AcquireError<E> {
    AcquireError::Cancelled(t.reason().expect("BUG: a cancelled token has no reason"))
}

/// Rule 1 (see `acquire.rs`): a cancelled token fails. Here, not there, so that a wait
/// that stepped aside (`wait.rs`) applies it before it queues again.
#[inline]
pub fn check_token<E>(cancel: Option<&CancelToken>) -> Result<(), AcquireError<E>> {
    match cancel {
        Some(t) if t.is_cancelled() => Err(cancelled(t)),
        _ => Ok(()),
    }
}

/// Rule 1 for the lock itself: a kind whose backend failed (or was closed) fails.
#[inline]
pub fn check_backend<L: RawLock + ?Sized, E>(lock: &L) -> Result<(), AcquireError<E>> {
    match lock.failure() {
        None => Ok(()),
        Some(why) => Err(AcquireError::Backend(why)),
    }
}
