//! What the loom models of exclusion share: a critical section that notices a second
//! holder or a lost update, and a blocking acquire that competes `Later`, as the Python
//! binding's does.

use ctxlock::{AcquireError, Compete, Lock, Woken};
use loom::sync::atomic::{AtomicUsize, Ordering};

/// The shared data of a critical section: who is inside, and a counter updated with a
/// plain load and store, so only the lock's ordering keeps updates from being lost.
#[derive(Default)]
pub struct Guarded {
    inside: AtomicUsize,
    count: AtomicUsize,
}

impl Guarded {
    pub fn critical_section(&self) {
        // ORDERING: Relaxed RMWs still read the latest value, so a second holder is seen
        // whatever the lock's orderings are.
        assert_eq!(
            self.inside.fetch_add(1, Ordering::Relaxed),
            0,
            "two holders at once"
        );
        // ORDERING: Relaxed on purpose: only the lock's Release/Acquire makes the last
        // holder's store visible here; if it did not, loom would find a lost update.
        let n = self.count.load(Ordering::Relaxed);
        // ORDERING: as above.
        self.count.store(n + 1, Ordering::Relaxed);
        // ORDERING: as for the fetch_add.
        self.inside.fetch_sub(1, Ordering::Relaxed);
    }

    pub fn count(&self) -> usize {
        // ORDERING: read after the threads are joined; join orders it.
        self.count.load(Ordering::Relaxed)
    }
}

/// A blocking acquire that competes `Later` when woken to re-compete, as the Python
/// binding does (it takes the GIL back first): the waiter keeps its place meanwhile.
pub fn lock_competing_later<E: std::fmt::Debug>(
    lock: &Lock,
    wait: ctxlock::Wait<'_, E>,
) -> Result<(), AcquireError<E>> {
    if lock.try_lock() {
        return Ok(());
    }
    let mut waiting = lock.wait_steps(wait, Compete::Later);
    loop {
        match waiting.step()? {
            Woken::Acquired => return Ok(()),
            Woken::Retry => {
                if waiting.compete() {
                    return Ok(());
                }
            }
        }
    }
}
