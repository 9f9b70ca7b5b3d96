//! THE wait queue: every blocked thread and task of one lock, in FIFO order.
//!
//! Exclusive and shared waiters are kept in two ordered maps keyed by one shared
//! sequence number, so the overall FIFO head is the smaller of the two first keys,
//! "grant every queued reader" (the phase change of the phase-fair `SharableLock`) is
//! one drain of the shared map, and a waiter that gives up is removed in O(log n)
//! (eagerly: a million timeouts never grow the queue). A `BTreeMap` is std's
//! well-tested ordered map; an intrusive list would save an allocation per waiter on
//! the slow path only, at the price of `unsafe` links.
//!
//! The queue lives inside the slot's mutex; this file knows nothing of the state word.
//! Wake-ups are collected in a [`WakeList`] under the mutex and delivered after it is
//! dropped (tokio's rule), so no waker or `unpark` ever runs under the mutex.

use std::collections::BTreeMap;

use super::sync::{Arc, Ordering};
use super::waiter::{Mode, Waiter};

#[derive(Default)]
pub(crate) struct WaitQueue {
    exclusive: BTreeMap<u64, Arc<Waiter>>,
    shared: BTreeMap<u64, Arc<Waiter>>,
    next_seq: u64,
    /// The process generation whose waiters these are (see `fork.rs`).
    generation: u64,
}

impl WaitQueue {
    pub(crate) fn is_empty(&self) -> bool {
        self.exclusive.is_empty() && self.shared.is_empty()
    }

    pub(crate) fn has_exclusive(&self) -> bool {
        !self.exclusive.is_empty()
    }

    pub(crate) fn shared_len(&self) -> usize {
        self.shared.len()
    }

    pub(crate) fn len(&self) -> usize {
        self.exclusive.len() + self.shared.len()
    }

    /// The first exclusive waiter.
    pub(crate) fn head_exclusive(&self) -> Option<&Arc<Waiter>> {
        self.exclusive.first_key_value().map(|(_, w)| w)
    }

    /// How many waiters are queued, as a report counts them: in a forked child whose
    /// queue still has the blocked threads of the parent (until it is next changed:
    /// `forget_threads_of_parent`), without them, as they do not exist here.
    pub(crate) fn live_len(&self) -> usize {
        let now = super::fork::generation();
        if self.generation == now {
            return self.len();
        }
        let live = |w: &&Arc<Waiter>| w.generation == now || w.is_task();
        self.exclusive
            .values()
            .chain(self.shared.values())
            .filter(live)
            .count()
    }

    /// In a forked child, the first time: drop the blocked threads queued before the
    /// fork (they do not exist here). Their status becomes ABANDONED. True if it dropped
    /// any (the slot's state word then still counts them: see `Slot::enqueue`).
    pub(crate) fn forget_threads_of_parent(&mut self) -> bool {
        let now = super::fork::generation();
        if self.generation == now {
            return false;
        }
        self.generation = now;
        let before = self.len();
        for map in [&mut self.exclusive, &mut self.shared] {
            map.retain(|_, w| {
                let ghost = w.generation != now && !w.is_task();
                if ghost {
                    w.set_status(super::waiter::ABANDONED);
                }
                !ghost
            });
        }
        self.len() < before
    }

    /// Queue `w` at the back, or at its old place if it queued before.
    pub(crate) fn push(&mut self, w: Arc<Waiter>) {
        // ORDERING: `seq` is only touched under the queue mutex, which orders it.
        let mut seq = w.seq.load(Ordering::Relaxed);
        if seq == u64::MAX {
            seq = self.next_seq;
            self.next_seq += 1;
            w.seq.store(seq, Ordering::Relaxed);
        }
        let old = self.map(w.mode).insert(seq, w);
        debug_assert!(old.is_none(), "BUG: a waiter was queued twice");
    }

    /// Take `w` out; false if it was not queued.
    pub(crate) fn remove(&mut self, w: &Waiter) -> bool {
        // ORDERING: as in `push`.
        let seq = w.seq.load(Ordering::Relaxed);
        self.map(w.mode).remove(&seq).is_some()
    }

    pub(crate) fn pop_exclusive(&mut self) -> Option<Arc<Waiter>> {
        self.exclusive.pop_first().map(|(_, w)| w)
    }

    /// Every queued shared waiter, in order.
    pub(crate) fn drain_shared(&mut self) -> impl Iterator<Item = Arc<Waiter>> {
        std::mem::take(&mut self.shared).into_values()
    }

    fn map(&mut self, mode: Mode) -> &mut BTreeMap<u64, Arc<Waiter>> {
        match mode {
            Mode::Exclusive => &mut self.exclusive,
            Mode::Shared => &mut self.shared,
        }
    }
}

/// Waiters to wake once the queue mutex is dropped.
#[derive(Default)]
pub(crate) struct WakeList(Vec<Arc<Waiter>>);

impl WakeList {
    pub(crate) fn push(&mut self, w: Arc<Waiter>) {
        self.0.push(w);
    }

    /// Wake everyone collected. Call only after the queue mutex is dropped.
    pub(crate) fn wake_all(self) {
        for w in self.0 {
            w.wake();
        }
    }
}
