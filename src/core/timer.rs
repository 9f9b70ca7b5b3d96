//! The one timer thread that cancels tokens at their deadlines.
//!
//! Started lazily by the first token with a deadline; it sleeps on a condition variable
//! until the earliest deadline and cancels that token. Entries hold weak references and
//! are removed when their token is dropped, so tokens that never expire leave nothing
//! behind. Blocked threads never need it (they park until the deadline themselves); it
//! serves `on_cancel` callbacks, `wait`, asyncio waiters and the `cancelled` flag.

use std::collections::BTreeMap;
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock, Weak};
use std::time::Instant;

use super::cancel::Node;

/// A timer entry: its time and a tie-breaking number.
pub(crate) type Key = (Instant, u64);

struct Timer {
    entries: Mutex<Entries>,
    changed: Condvar,
}

#[derive(Default)]
struct Entries {
    due: BTreeMap<Key, Weak<Node>>,
    next: u64,
}

static TIMER: OnceLock<Timer> = OnceLock::new();

fn timer() -> &'static Timer {
    let mut started = false;
    let t = TIMER.get_or_init(|| {
        started = true;
        Timer {
            entries: Mutex::new(Entries::default()),
            changed: Condvar::new(),
        }
    });
    if started {
        std::thread::Builder::new()
            .name("ctxlock-timer".into())
            .spawn(move || t.run())
            .expect("ctxlock: cannot start the timer thread");
    }
    t
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
                    let node = entries.due.remove(&key);
                    drop(entries);
                    if let Some(node) = node.and_then(|w| w.upgrade()) {
                        node.expire_own();
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

/// Cancel `node` at `at` (unless it is dropped first).
pub(crate) fn schedule(at: Instant, node: Weak<Node>) -> Key {
    let t = timer();
    let mut entries = t.lock();
    let key = (at, entries.next);
    entries.next += 1;
    let earliest = entries.due.first_key_value().is_none_or(|(k, _)| key < *k);
    entries.due.insert(key, node);
    drop(entries);
    if earliest {
        t.changed.notify_one();
    }
    key
}

/// Forget an entry (its token was dropped).
pub(crate) fn unschedule(key: Key) {
    if let Some(t) = TIMER.get() {
        let removed = t.lock().due.remove(&key);
        drop(removed);
    }
}
