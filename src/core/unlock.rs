//! Unlock: the once-only release of one acquire (Go's `UnlockFunc`).
//!
//! Go builds it from a once-only function; a `sync.Once` would make a second caller
//! wait for the first, while an unlock must never block, so it is one atomic swap here.

use std::sync::atomic::{AtomicBool, Ordering};

use super::cancel::{CancelToken, Registration};
use super::lock::LockView;
use super::waiter::Mode;
use std::sync::Arc;

/// Releases one hold of a lock, once. Callable from any thread.
pub struct Unlock {
    view: LockView,
    released: AtomicBool,
}

impl Unlock {
    /// Wrap a hold the caller owns (taken with `try_lock`/`lock` on `view`).
    pub fn new(view: LockView) -> Unlock {
        Unlock {
            view,
            released: AtomicBool::new(false),
        }
    }

    /// Release if still held; true if this call released.
    #[inline]
    pub fn unlock(&self) -> bool {
        // ORDERING: the swap only decides which call releases; the release itself
        // orders the critical section (Release in `Slot::release`). Acquire/Release are
        // not needed for that decision, and Relaxed RMWs on one atomic still have a
        // single total order, so exactly one caller sees `false`.
        if self.released.swap(true, Ordering::Relaxed) {
            return false;
        }
        let released = self.view.unlock();
        debug_assert!(released, "BUG: an Unlock did not hold its lock");
        true
    }

    /// Whether this hold has been released.
    pub fn released(&self) -> bool {
        // ORDERING: a snapshot; it orders nothing.
        self.released.load(Ordering::Relaxed)
    }

    pub fn mode(&self) -> Mode {
        self.view.mode()
    }

    pub fn view(&self) -> &LockView {
        &self.view
    }

    /// Release when `token` is cancelled, at once if it already is (Go's `UnlockOnCancel`).
    pub fn unlock_on_cancel(self: &Arc<Self>, token: &CancelToken) -> Option<Registration> {
        let me = self.clone();
        token.on_cancel(move |_| {
            me.unlock();
        })
    }
}
