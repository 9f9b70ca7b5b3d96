//! An asynchronous acquire: a waiter in the same queue as threads, woken by a `Waker`.
//!
//! The core knows nothing of event loops: the waker is the doorbell (the binding's
//! completes an asyncio future on the task's loop). It rings for a grant, and for the
//! wait's token and deadline too: [`TaskWait::start`] registers the waker on the token
//! (a child of it, or a fresh one, with the wait's own deadline), so the thread that
//! cancels, or the timer thread at a deadline, rings the one doorbell. Ownership never
//! travels through the doorbell; it is the waiter's status, so a doorbell that rings
//! late, twice, or for a task that is gone cannot leak or double-grant the lock. The
//! wait is settled exactly once: by the task when its doorbell rang
//! ([`TaskWait::finish`]), or by whoever sees that the task will not finish (it was
//! cancelled, its loop is gone, it was dropped: [`TaskWait::give_up`]). Both apply the
//! one give-up rule (`give_up.rs`). loom checks the settlement against a racing grant
//! (`tests/loom_lock.rs`, `task_settles_once`) and against a cancel racing a grant and
//! a doorbell that gives up (`tests/loom_task.rs`).

use std::sync::{Arc, Mutex};
use std::task::Waker;
use std::time::Instant;

use super::cancel::{CancelToken, Reason, Registration};
use super::error::AcquireError;
use super::give_up::{cancelled, give_up, keep_or_pass_on};
use super::raw::{Compete, Enqueued, Notify, RawLock, RawWaiter, Status};
use super::step_aside::step_aside_interrupted;
use super::sync::{AtomicU8, Ordering};

/// Not yet settled.
const OPEN: u8 = 0;
/// Settled: by `finish` or `give_up`, whichever came first; never left again.
const SETTLED: u8 = 1;

/// The reason the token of a wait's own deadline is cancelled with. Never shown: a wait
/// woken by it ends in [`AcquireError::Timeout`] (the caller's token is asked first).
struct OwnDeadline;

/// A queued asynchronous acquire of `L`.
///
/// # Invariants
/// - `settled` goes from `OPEN` to `SETTLED` once, by the one call that settles the
///   wait; only that call decides whether the task holds the lock.
/// - Until settled, a grant (the waiter's status) belongs to the wait: settling either
///   hands it to the task or passes it on. Dropped unsettled, a grant that `granted`
///   reported belongs to the caller, any other is passed on.
/// - `wake_up` holds a registration from `start` (if it queued with a token or a
///   deadline) until the call that settles takes it out and unregisters it; only that
///   call touches it. It is `None` when there is nothing to register (a plain wait
///   settles without a mutex).
pub struct TaskWait<L: RawLock> {
    lock: L,
    /// `None`: the lock was free, and taken at once.
    waiter: Option<L::Waiter>,
    settled: AtomicU8,
    /// The caller's token: cancelled, it ends the wait with its reason.
    cancel: Option<CancelToken>,
    /// The waker, registered on the token that ends the wait: the caller's, or a child
    /// of it (or a fresh root) that also cancels itself at the wait's own deadline.
    /// (A std mutex, as in the token tree: only the settling call takes it, once.)
    wake_up: Option<Mutex<Option<Registration>>>,
}

impl<L: RawLock> TaskWait<L> {
    /// Take `lock`, or queue a task woken through `waker` when the lock is handed to
    /// it, when `cancel` is cancelled (from any thread, or by its deadline) and at
    /// `deadline`.
    pub fn start(
        lock: L,
        waker: Waker,
        cancel: Option<CancelToken>,
        deadline: Option<Instant>,
    ) -> TaskWait<L> {
        // The waker goes to the queue, and a clone to the token if there is one to ring.
        let (notify, waker) = match (&cancel, deadline) {
            (None, None) => (waker, None),
            _ => (waker.clone(), Some(waker)),
        };
        let waiter = match lock.enqueue(Notify::Task(notify), Compete::AtOnce) {
            Enqueued::Acquired => None,
            Enqueued::Queued(waiter) => {
                // A task that queues within a wait's check (an event loop run by a
                // signal handler) may block this thread as a thread's wait would.
                step_aside_interrupted();
                Some(waiter)
            }
        };
        let wake_up = waiter.as_ref().zip(waker).and_then(|(_, waker)| {
            let own = |at: Instant| -> (Instant, Reason) { (at, Arc::new(OwnDeadline)) };
            let ends = match (&cancel, deadline) {
                (None, None) => return None,
                (Some(t), None) => t.clone(),
                (Some(t), Some(at)) => t.child(Some(own(at))),
                (None, Some(at)) => CancelToken::new(Some(own(at))),
            };
            // Already cancelled (or due): the waker rings now, and `finish` tells why.
            ends.on_cancel(move |_| waker.wake_by_ref())
        });
        TaskWait {
            lock,
            waiter,
            settled: AtomicU8::new(OPEN),
            cancel,
            wake_up: wake_up.map(|r| Mutex::new(Some(r))),
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

    /// True for the one caller that settles the wait; it also stops the token from
    /// ringing the doorbell.
    fn claim(&self) -> bool {
        // ORDERING: only decides who settles (one RMW order on one atomic); the kind's
        // own synchronization (the slot's queue mutex) orders the lock itself.
        if self.settled.swap(SETTLED, Ordering::Relaxed) != OPEN {
            return false;
        }
        let wake_up = self
            .wake_up
            .as_ref()
            .and_then(|m| m.lock().unwrap_or_else(|e| e.into_inner()).take());
        if let Some(r) = wake_up {
            r.unregister();
        }
        true
    }

    /// The doorbell rang (for a grant, the token or the deadline): take the lock, or
    /// say why not. A wait that ends without a grant is a timeout, unless the token is
    /// cancelled (or due: it is cancelled now, before the caller sees the error, as a
    /// thread's wait does); a grant that races a timeout is kept, one that races a
    /// cancel is passed on. `AcquireError::Abandoned` if the wait was already given up.
    pub fn finish<E>(&self) -> Result<(), AcquireError<E>> {
        self.finish_with(|held| {
            let t = self.cancel.as_ref()?;
            let ended = t.is_cancelled() || (!held && t.expire_if_due(Instant::now()));
            ended.then(|| cancelled(t))
        })
    }

    /// [`finish`](Self::finish), with the token's verdict given by `cancelled`: told
    /// whether the lock is held, it returns the cancellation that ends the wait, if
    /// any. (The settlement itself, which the loom model drives with a verdict of its
    /// own, as the token tree is not modelled.)
    pub fn finish_with<E>(
        &self,
        cancelled: impl FnOnce(bool) -> Option<AcquireError<E>>,
    ) -> Result<(), AcquireError<E>> {
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
        // A failed backend ends the wait as a cancel would: a grant that raced it is
        // passed on.
        let why = match self.lock.failure() {
            Some(failure) => Some(AcquireError::Backend(failure)),
            None => cancelled(held),
        };
        match (why, held) {
            (Some(why), true) => keep_or_pass_on(&self.lock, why),
            (Some(why), false) => Err(why),
            (None, true) => Ok(()),
            (None, false) => Err(AcquireError::Timeout),
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
