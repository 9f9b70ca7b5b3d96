//! An asynchronous acquire: a waiter in the same queue as threads, woken by a `Waker`.
//!
//! The core knows nothing of event loops: the waker is the doorbell (the binding's
//! completes an asyncio future on the task's loop). Ownership never travels through the
//! doorbell; it is the waiter's status, so a doorbell that rings late, twice, or for a
//! task that is gone cannot leak or double-grant the lock. The wait is settled exactly
//! once: by the task when its doorbell rang ([`TaskWait::finish`]), or by whoever sees
//! that the task will not finish (it was cancelled, its loop is gone, it was dropped:
//! [`TaskWait::give_up`]). Both apply the one give-up rule (`give_up.rs`). loom checks
//! the settlement against a racing grant (`tests/loom_lock.rs`, `task_settles_once`).

use std::task::Waker;
use std::time::Instant;

use super::cancel::CancelToken;
use super::error::AcquireError;
use super::give_up::{cancelled, give_up, keep_or_pass_on};
use super::raw::{Compete, Enqueued, Notify, RawLock, RawWaiter, Status};
use super::sync::{AtomicU8, Ordering};

/// Not yet settled.
const OPEN: u8 = 0;
/// Settled: by `finish` or `give_up`, whichever came first; never left again.
const SETTLED: u8 = 1;

/// A queued asynchronous acquire of `L`.
///
/// # Invariants
/// - `settled` goes from `OPEN` to `SETTLED` once, by the one call that settles the
///   wait; only that call decides whether the task holds the lock.
/// - Until settled, a grant (the waiter's status) belongs to the wait: settling either
///   hands it to the task or passes it on. Dropped unsettled, a grant that `granted`
///   reported belongs to the caller, any other is passed on.
pub struct TaskWait<L: RawLock> {
    lock: L,
    /// `None`: the lock was free, and taken at once.
    waiter: Option<L::Waiter>,
    settled: AtomicU8,
}

impl<L: RawLock> TaskWait<L> {
    /// Take `lock`, or queue a task woken through `waker`.
    pub fn start(lock: L, waker: Waker) -> TaskWait<L> {
        let waiter = match lock.enqueue(Notify::Task(waker), Compete::AtOnce) {
            Enqueued::Acquired => None,
            Enqueued::Queued(waiter) => Some(waiter),
        };
        TaskWait {
            lock,
            waiter,
            settled: AtomicU8::new(OPEN),
        }
    }

    /// Whether it queued (false: it took the lock at once).
    pub fn queued(&self) -> bool {
        self.waiter.is_some()
    }

    /// Whether the lock is this waiter's (taken at once, or handed to it).
    pub fn granted(&self) -> bool {
        self.waiter
            .as_ref()
            .is_none_or(|w| w.status() == Status::Granted)
    }

    /// Leave the queue. True if it left without the lock; false if the lock is its own
    /// (taken at once, or handed to it first), in which case the caller owns it. (The
    /// raw step of the give-up rule, for tests; a task settles through `finish` or
    /// `give_up`.)
    pub fn abandon(&self) -> bool {
        self.waiter.as_ref().is_some_and(RawWaiter::abandon)
    }

    /// The lock it waits for.
    pub fn view(&self) -> &L {
        &self.lock
    }

    /// True for the one caller that settles the wait.
    fn claim(&self) -> bool {
        // ORDERING: only decides who settles (one RMW order on one atomic); the kind's
        // own synchronization (the slot's queue mutex) orders the lock itself.
        self.settled.swap(SETTLED, Ordering::Relaxed) == OPEN
    }

    /// The doorbell rang (or the task woke for its token or its deadline): take the lock,
    /// or say why not. A wait that ends without a grant is a timeout, unless `cancel` is
    /// cancelled (or due); a grant that races a timeout is kept, one that races a cancel
    /// is passed on. `AcquireError::Abandoned` if the wait was already given up.
    pub fn finish<E>(&self, cancel: Option<&CancelToken>) -> Result<(), AcquireError<E>> {
        if !self.claim() {
            return Err(AcquireError::Abandoned);
        }
        let held = match &self.waiter {
            None => true,
            Some(w) => {
                w.status() == Status::Granted
                    || give_up(&self.lock, w, AcquireError::<E>::Timeout).is_ok()
            }
        };
        if let Some(t) = cancel {
            // A wait that ended without the lock may have ended at the token's deadline
            // before the timer got to it: cancel the token now, as a thread does.
            if t.is_cancelled() || (!held && t.expire_if_due(Instant::now())) {
                return match held {
                    true => keep_or_pass_on(&self.lock, cancelled(t)),
                    false => Err(cancelled(t)),
                };
            }
        }
        match held {
            true => Ok(()),
            false => Err(AcquireError::Timeout),
        }
    }

    /// The task will not finish the wait (cancelled, closed, dropped, its loop is gone):
    /// leave the queue, or pass on a lock granted at the same moment. Does nothing if
    /// the wait is settled already.
    pub fn give_up(&self) {
        if self.claim() && !self.abandon() {
            let _ = keep_or_pass_on(&self.lock, AcquireError::<()>::Abandoned);
        }
    }
}

impl<L: RawLock> Drop for TaskWait<L> {
    fn drop(&mut self) {
        // Dropped unsettled: a grant the owner saw through `granted` is the owner's (to
        // release through the lock, as after `try_lock`); one that came after the last
        // look goes to the next waiter instead of staying held by a dropped waiter.
        if self.claim() && !self.granted() && !self.abandon() {
            self.lock.unlock();
        }
    }
}
