//! One waiter in the queue: how it is woken, and the grant/abandon handshake.
//!
//! A waiter is a blocked thread (woken by `unpark`) or an asynchronous task (woken by a
//! `std::task::Waker`; the Python layer's waker completes an asyncio future on the
//! task's own loop): a `Notify` of the seam (`raw.rs`). The core never looks inside a
//! waker, so it stays free of Python.
//!
//! `status` is the only place ownership of the slot moves to a queued waiter: a
//! releaser sets `GRANTED` under the queue mutex after it has put the waiter's hold
//! into the state word. The waiter leaves without the lock only through
//! `Slot::abandon`, which under the same mutex turns `WAITING` (or `RETRY`) into
//! `ABANDONED`; if it finds `GRANTED` instead, the waiter owns the lock after all. So
//! for every waiter exactly one of "granted" and "abandoned" happens.

use std::time::Instant;

use super::raw::Notify;
use super::sync::{AtomicU64, AtomicU8, Ordering};

/// The two ways to hold the slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mode {
    /// The only holder (Go's `Lock`).
    Exclusive,
    /// A member of the reader group (Go's `RLock`).
    Shared,
}

/// In the queue, not yet granted.
pub(crate) const WAITING: u8 = 0;
/// The slot (or a place in the reader group) was handed to this waiter.
pub(crate) const GRANTED: u8 = 1;
/// Woken to compete for a just-freed slot (barging `Lock`). A waiter that `keeps_place`
/// stays queued, at its place, until it takes the slot (`Slot::compete`), is handed it,
/// or gives up; any other leaves the queue when woken and queues again (at its old
/// place) if it loses.
pub(crate) const RETRY: u8 = 2;
/// Left without the lock (deadline, cancellation, signal, dropped task).
pub(crate) const ABANDONED: u8 = 3;

/// A queued acquire.
///
/// # Invariants
/// - `status` changes only with the queue mutex held; it is read without the mutex by
///   the waiter itself, which is why it is atomic.
/// - `seq` is written only under the queue mutex; it is the waiter's place in FIFO
///   order and is kept when a `RETRY` waiter that lost its competition queues or parks
///   again, so re-competing never moves a waiter back.
pub(crate) struct Waiter {
    pub(crate) status: AtomicU8,
    pub(crate) seq: AtomicU64,
    pub(crate) mode: Mode,
    pub(crate) notify: Notify,
    /// When this acquire first queued: the start of the ~1 ms "time to be fair".
    #[cfg_attr(loom, allow(dead_code))]
    pub(crate) since: Instant,
    /// The process generation it queued in (see `fork.rs`).
    pub(crate) generation: u64,
    /// A thread that, woken to compete (`RETRY`), keeps its place in the queue until it
    /// competes (`Compete::Later`); else it leaves the queue when woken.
    pub(crate) keeps_place: bool,
    /// The timer's mark on a waiter away competing (see `slot.rs`'s `FairMark`):
    /// `MARK_ARMED` once the timer is due to mark it, then also `MARK_DUE` once it has
    /// waited `FAIR_AFTER`. Bits are only added, and only with the queue mutex held.
    pub(crate) mark: AtomicU8,
}

/// The timer will mark the waiter at `since + FAIR_AFTER`.
pub(crate) const MARK_ARMED: u8 = 1;
/// The timer marked the waiter: it has waited `FAIR_AFTER`.
pub(crate) const MARK_DUE: u8 = 2;

impl Waiter {
    pub(crate) fn new(mode: Mode, notify: Notify, keeps_place: bool) -> Self {
        Waiter {
            status: AtomicU8::new(WAITING),
            seq: AtomicU64::new(u64::MAX),
            mode,
            notify,
            since: Instant::now(),
            generation: super::fork::generation(),
            keeps_place,
            mark: AtomicU8::new(0),
        }
    }

    /// The waiter's status, read by the waiter itself outside the mutex.
    #[inline]
    pub(crate) fn status(&self) -> u8 {
        // ORDERING: Acquire pairs with the Release store of GRANTED in `set_status`, so a
        // waiter that sees GRANTED also sees every write of the holder that released.
        self.status.load(Ordering::Acquire)
    }

    /// Change the status; only with the queue mutex held.
    #[inline]
    pub(crate) fn set_status(&self, status: u8) {
        // ORDERING: Release publishes the state-word update made for this waiter (and the
        // releaser's critical section) to the waiter's Acquire load in `status`.
        self.status.store(status, Ordering::Release);
    }

    pub(crate) fn is_task(&self) -> bool {
        self.notify.is_task()
    }

    pub(crate) fn wake(&self) {
        self.notify.wake()
    }
}
