//! The one timer thread that expires things at their deadlines: tokens, and the
//! "waited `FAIR_AFTER`" mark of a waiter woken to compete later (`slot.rs`).
//!
//! Started lazily by the first deadline; it sleeps on a condition variable until the
//! earliest deadline and expires that entry. It knows only [`Expire`], not what expires:
//! entries hold weak references and are removed when their owner is dropped, so tokens
//! that never expire leave nothing behind. Blocked threads never need it for their own
//! deadlines (they park until the deadline themselves); it serves `on_cancel` callbacks,
//! `wait`, asyncio waiters, the `cancelled` flag and the fairness mark.

use std::collections::BTreeMap;
use std::ptr;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, Weak};
use std::time::Instant;

/// Something the timer expires at its deadline (a token cancels itself).
pub(crate) trait Expire: Send + Sync {
    /// The deadline passed; runs on the timer thread, so it must not block.
    fn expire(&self);
}

/// A timer entry: its time and a tie-breaking number.
pub(crate) type Key = (Instant, u64);

struct Timer {
    entries: Mutex<Entries>,
    changed: Condvar,
}

#[derive(Default)]
struct Entries {
    due: BTreeMap<Key, Weak<dyn Expire>>,
    next: u64,
}

/// The running timer, created by the first deadline. A pointer rather than a
/// `OnceLock` so that a forked child can start a new one (`after_fork_in_child`); each
/// timer is leaked on purpose, as its thread runs for the life of the process.
static TIMER: AtomicPtr<Timer> = AtomicPtr::new(ptr::null_mut());

fn timer() -> &'static Timer {
    // ORDERING: Acquire pairs with the AcqRel CAS in `start`, so the timer's fields are
    // initialized before we use them.
    let t = TIMER.load(Ordering::Acquire);
    if t.is_null() {
        return start(Entries::default());
    }
    // SAFETY: a non-null TIMER points to a leaked, never freed `Timer`.
    unsafe { &*t }
}

/// Install a new timer with `entries` (unless another thread just did) and start its thread.
#[cold]
fn start(entries: Entries) -> &'static Timer {
    let new: &'static mut Timer = Box::leak(Box::new(Timer {
        entries: Mutex::new(entries),
        changed: Condvar::new(),
    }));
    // ORDERING: AcqRel: Release publishes the new timer's fields to `timer`'s Acquire;
    // Acquire on failure makes the winner's fields visible to us.
    match TIMER.compare_exchange(ptr::null_mut(), new, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => {
            let t: &'static Timer = new;
            std::thread::Builder::new()
                .name("ctxlock-timer".into())
                .spawn(move || t.run())
                .expect("ctxlock: cannot start the timer thread");
            t
        }
        Err(winner) => {
            // SAFETY: `new` came from Box::leak above and was never shared.
            drop(unsafe { Box::from_raw(new) });
            // SAFETY: as in `timer`.
            unsafe { &*winner }
        }
    }
}

/// In a forked child: the timer thread is gone; start a new one with the pending entries.
pub(crate) fn after_fork_in_child() {
    // ORDERING: the child has a single thread now.
    let old = TIMER.swap(ptr::null_mut(), Ordering::AcqRel);
    if old.is_null() {
        return;
    }
    // SAFETY: as in `timer`; the old timer stays leaked, its thread does not exist here.
    let old = unsafe { &*old };
    // If the parent's timer thread held the mutex at the fork, its entries are lost.
    if let Ok(mut entries) = old.entries.try_lock() {
        let pending = std::mem::take(&mut *entries);
        drop(entries);
        if !pending.due.is_empty() {
            start(pending);
        }
    }
}

impl Timer {
    fn lock(&self) -> MutexGuard<'_, Entries> {
        // Only this file's code runs under the mutex, and it does not panic.
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn run(&self) {
        let mut entries = self.lock();
        loop {
            let now = Instant::now();
            match entries.due.first_key_value().map(|(k, _)| *k) {
                Some(key) if key.0 <= now => {
                    let entry = entries.due.remove(&key);
                    drop(entries);
                    if let Some(entry) = entry.and_then(|w| w.upgrade()) {
                        entry.expire();
                    }
                    entries = self.lock();
                }
                Some((at, _)) => {
                    entries = self
                        .changed
                        .wait_timeout(entries, at - now)
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                }
                None => {
                    entries = self
                        .changed
                        .wait(entries)
                        .unwrap_or_else(|e| e.into_inner());
                }
            }
        }
    }
}

/// Expire `entry` at `at` (unless it is dropped first).
pub(crate) fn schedule(at: Instant, entry: Weak<dyn Expire>) -> Key {
    let t = timer();
    let mut entries = t.lock();
    let key = (at, entries.next);
    entries.next += 1;
    let earliest = entries.due.first_key_value().is_none_or(|(k, _)| key < *k);
    entries.due.insert(key, entry);
    drop(entries);
    if earliest {
        t.changed.notify_one();
    }
    key
}

/// Forget an entry (its owner was dropped).
pub(crate) fn unschedule(key: Key) {
    // ORDERING: as in `timer`.
    let t = TIMER.load(Ordering::Acquire);
    // SAFETY: as in `timer`.
    if let Some(t) = unsafe { t.as_ref() } {
        let removed = t.lock().due.remove(&key);
        drop(removed);
    }
}
