//! An asynchronous acquire: a waiter in the same queue as threads, woken by a `Waker`.
//!
//! The core knows nothing of event loops: the waker is the doorbell (the binding's
//! completes an asyncio future on the task's loop). Ownership never travels through the
//! doorbell; it is the waiter's status, so a doorbell that rings late, twice, or for a
//! task that is gone cannot leak or double-grant the lock: whoever settles the
//! `TaskWait` first (the task itself, or the binding when the task can no longer run)
//! decides, through the same `abandon` as a blocked thread.

use std::task::Waker;

use super::lock::LockView;
use super::sync::{lock, Arc};
use super::waiter::{Notify, Waiter, GRANTED};

/// A queued asynchronous acquire.
///
/// Dropping it while it is still queued takes it out of the queue (and passes on a lock
/// handed to it in that very moment). Once [`TaskWait::granted`] is true the hold is the
/// caller's, to release with the view's `unlock`, exactly as after `try_lock`.
pub struct TaskWait {
    view: LockView,
    waiter: Arc<Waiter>,
}

impl TaskWait {
    pub(crate) fn start(view: LockView, waker: Waker) -> Option<TaskWait> {
        let waiter = Arc::new(Waiter::new(view.mode(), Notify::Task(waker), false));
        let acquired = view
            .slot()
            .acquire_or_queue(&mut lock(view.slot().queue()), &waiter);
        (!acquired).then(|| TaskWait { view, waiter })
    }

    /// Whether the lock has been handed to this waiter (then it owns it).
    pub fn granted(&self) -> bool {
        self.waiter.status() == GRANTED
    }

    /// Leave the queue. True if it left without the lock; false if the lock had been
    /// handed to it first, in which case the caller owns it.
    pub fn abandon(&self) -> bool {
        self.view.slot().abandon(&self.waiter)
    }

    pub fn view(&self) -> &LockView {
        &self.view
    }
}

impl Drop for TaskWait {
    fn drop(&mut self) {
        if !self.granted() && !self.abandon() {
            // Granted between the check and the abandon: nobody can have seen it, so the
            // lock goes to the next waiter instead of staying held by a dropped waiter.
            self.view.unlock();
        }
    }
}
