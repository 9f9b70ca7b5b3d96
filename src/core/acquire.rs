//! THE acquire driver: the argument rules of `acquire(cancel, *, deadline, blocking)`,
//! written once for every kind of lock ([`RawLock`]) and for threads and tasks alike.
//!
//! In order:
//! 0. The arguments agree: `blocking=False` never waits, so it cannot come with a
//!    deadline (how long to wait, an infinite one too); such a call fails with
//!    [`AcquireError::DeadlineWithoutBlocking`] before anything else is looked at.
//! 1. A token that is already cancelled fails at once, even if the lock is free (Go
//!    checks `ctx.Done()` first).
//! 2. One try (the kind's fast path; no clock is read).
//! 3. Taken: `blocking=False` fails with [`AcquireError::WouldBlock`]; a deadline of
//!    zero with [`AcquireError::TakenNow`].
//! 4. Else wait: a thread through [`ThreadWait`] (a deadline that has passed by then
//!    tries once more and does not queue), a task through [`TaskWait`]. Either gives up
//!    through the one give-up rule (`give_up.rs`).

use std::time::{Duration, Instant};

use super::cancel::CancelToken;
use super::deadline::Timeout;
use super::error::AcquireError;
pub use super::give_up::{check_backend, check_token};
use super::raw::{Compete, RawLock};
use super::wait::{ThreadWait, Wait, Woken};

/// Rule 0: a deadline cannot be given with `blocking=False`. `deadline_given` says
/// whether the caller gave one at all (an infinite deadline parses to no limit, yet is
/// refused as well). A caller that takes neither argument (a plain `acquire()`, an
/// asynchronous acquire, which always may wait) has nothing to check.
#[inline]
pub fn check_args<E>(deadline_given: bool, blocking: bool) -> Result<(), AcquireError<E>> {
    if deadline_given && !blocking {
        return Err(AcquireError::DeadlineWithoutBlocking);
    }
    Ok(())
}

/// Whether a wait could be ended by nothing but a release: it has no token and no
/// deadline. Such a wait, on a lock held where only the waiting thread itself can
/// release it, never ends; the embedding refuses it instead (the binding's `TaskOwner`:
/// an `async with` hold of the thread's own event loop).
#[inline]
pub fn only_a_release_ends(cancel: Option<&CancelToken>, timeout: Timeout) -> bool {
    cancel.is_none() && timeout.is_never()
}

/// Rules 1 to 3, with nothing but the kind's fast path: `Ok(true)` if the caller now
/// holds the lock, `Ok(false)` if it must wait.
#[inline]
pub fn try_first<L: RawLock + ?Sized, E>(
    lock: &L,
    cancel: Option<&CancelToken>,
    timeout: Timeout,
    blocking: bool,
) -> Result<bool, AcquireError<E>> {
    check_token(cancel)?;
    check_backend(lock)?;
    if lock.try_lock() {
        return Ok(true);
    }
    cannot_wait(timeout, blocking).map(|()| false)
}

/// Rule 3: whether a taken lock may be waited for.
#[cold]
fn cannot_wait<E>(timeout: Timeout, blocking: bool) -> Result<(), AcquireError<E>> {
    if !blocking {
        Err(AcquireError::WouldBlock)
    } else if timeout.is_now() {
        Err(AcquireError::TakenNow)
    } else {
        Ok(())
    }
}

/// A blocking acquire: rules 1 and 2, then the wait of rule 4 (`wait.deadline` is
/// absolute, so there is no deadline of zero and no `blocking=False` here).
pub fn lock<L: RawLock + ?Sized, E>(lock: &L, wait: Wait<'_, E>) -> Result<(), AcquireError<E>> {
    check_token(wait.cancel)?;
    check_backend(lock)?;
    if lock.try_lock() {
        return Ok(());
    }
    block(lock, wait, Compete::AtOnce, 0, |w| w.step())
}

/// Rule 4 for a thread that ran rules 1 to 3: first [`spin`] up to `spins` times, then
/// step the wait until it holds the lock. `step` runs one step (the binding releases the
/// GIL around it); a thread woken to compete competes after it, and if it lost and may
/// spin (`spins` > 0, competing at once), it [`watch`]es before the next step parks it.
#[cold]
pub fn block<'a, L: RawLock + ?Sized, E>(
    lock: &'a L,
    wait: Wait<'a, E>,
    compete: Compete,
    spins: u32,
    mut step: impl FnMut(&mut ThreadWait<'a, L, E>) -> Result<Woken, AcquireError<E>>,
) -> Result<(), AcquireError<E>> {
    if spin(lock, spins) {
        return Ok(());
    }
    let watches = spins > 0 && compete == Compete::AtOnce;
    let mut waiting = ThreadWait::new(lock, wait, compete);
    loop {
        match step(&mut waiting)? {
            Woken::Acquired => return Ok(()),
            Woken::Retry if waiting.compete() => return Ok(()),
            Woken::Retry if watches && watch(lock, &mut waiting, WATCH_FOR) => return Ok(()),
            Woken::Retry => {}
        }
    }
}

/// How long a woken thread that lost its competition watches the lock before it parks
/// again: about what parking and being woken again cost it (a futex wait, a wake-up, a
/// thread switch: tens of microseconds on the machines BENCHMARKS.md was measured on).
/// Watching never costs much more than the park it may save, the rule of adaptive
/// mutexes, while the holder runs; where threads outnumber cores the holder may be
/// waiting for the very CPU the watcher keeps busy, and the bound is what limits that.
const WATCH_FOR: Duration = Duration::from_micros(50);

/// How many spin-loop hints pass between two reads of the clock while watching: a few
/// hundred nanoseconds' worth to about one read, so the clock costs the watch little
/// and ends it near its time.
const WATCH_CLOCK_EVERY: u32 = 16;

/// A woken thread lost its competition and is queued again: for `how_long`,
/// look at the lock between spin-loop hints, and compete again whenever it looks free
/// (or a release reached this waiter meanwhile). True if that took the lock.
///
/// Why a woken thread watches, where [`spin`] does not look between its yields: the
/// spinner has not waited yet, and a spinner that took the lock the moment it came free
/// made the lock's cache lines cross between cores on every hold. A woken thread has
/// waited already, and the release that woke it chose it to go next; yet without a GIL
/// the holder runs on and takes the lock again at once, so a woken thread that looked
/// once lost one competition in three to five, parked again, and paid a wake-up (tens of
/// microseconds) per loss. Those losses in a row were most of
/// ctxlock's waits of 0.2-1 ms on free-threaded 3.14 (BENCHMARKS.md). The holder lets go
/// every few hundred nanoseconds, so a watcher nearly always gets the lock within a few
/// microseconds. As with the spin, the deadline and the token are not looked at: the
/// watch is short, and an acquire that wins a race against a cancel may succeed.
fn watch<'a, L: RawLock + ?Sized, E>(
    lock: &L,
    waiting: &mut ThreadWait<'a, L, E>,
    how_long: Duration,
) -> bool {
    let until = Instant::now() + how_long;
    loop {
        for _ in 0..WATCH_CLOCK_EVERY {
            std::hint::spin_loop();
            if (lock.looks_free() || waiting.woken()) && waiting.compete() {
                return true;
            }
        }
        if Instant::now() >= until {
            return false;
        }
    }
}

/// Before queueing: if the lock says it is worth it ([`RawLock::may_spin`]: held, nobody
/// queued), yield the CPU `spins` times, then look once and try if it looks free. True
/// if that took the lock.
///
/// Spinning pays where the holder runs in parallel and holds briefly: a park and its
/// wake-up cost two thread switches, far more than a short critical section (CPython's
/// `PyMutex` and parking_lot spin the same way, and only then). With a GIL the holder
/// cannot run while the spinner holds it, so the binding passes 0 there. A spin lasts
/// a few microseconds at most, so it ignores the deadline and the token: an acquire that
/// wins the lock meanwhile succeeds, as one that wins a race against a cancel may.
///
/// It does not look between its yields. A spinner that looked after each one took the
/// lock the moment its holder let go, so the lock's word, the lock object and the data
/// the lock guards crossed between cores on every hold, while the holder, which would
/// have taken the lock again at once, waited in turn. Yielding first lets a running
/// holder do a run of holds on its own core. `PyMutex` spins the same way: it does not
/// read the lock again between its yields. On free-threaded 3.14 this took the
/// two-thread contended rows from 1.3-2.0 times `threading.Lock`'s time per operation
/// to 0.86-1.1 (BENCHMARKS.md).
fn spin<L: RawLock + ?Sized>(lock: &L, spins: u32) -> bool {
    if spins == 0 || !lock.may_spin() {
        return false;
    }
    for _ in 0..spins {
        std::thread::yield_now();
    }
    // Free (perhaps with a queue now, which a barging lock may pass), or held: then
    // queue. Held, a try would only take the lock's cache line from the holder.
    !lock.may_spin() && lock.try_lock()
}

/// The steps of rule 4, for a caller that must do something between being woken to
/// compete and competing (see [`Compete::Later`]). The caller ran rules 1 to 3.
pub fn wait_steps<'a, L: RawLock + ?Sized, E>(
    lock: &'a L,
    wait: Wait<'a, E>,
    compete: Compete,
) -> ThreadWait<'a, L, E> {
    ThreadWait::new(lock, wait, compete)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;
    use std::sync::atomic::Ordering::Relaxed;

    use super::*;
    use crate::core::raw::{Enqueued, Notify, RawWaiter, Status};

    /// A lock whose answers are scripted: held (with nobody queued) for the first
    /// `held_for` looks, free after; counts looks and tries.
    struct Scripted {
        held_for: usize,
        looks: AtomicUsize,
        tries: AtomicUsize,
    }

    impl Scripted {
        fn new(held_for: usize) -> Scripted {
            Scripted {
                held_for,
                looks: AtomicUsize::new(0),
                tries: AtomicUsize::new(0),
            }
        }

        /// (looks, tries) so far.
        fn counts(&self) -> (usize, usize) {
            // ORDERING: Relaxed: one thread only.
            (self.looks.load(Relaxed), self.tries.load(Relaxed))
        }
    }

    impl RawLock for Scripted {
        type Waiter = crate::core::slot::SlotWaiter;

        fn try_lock(&self) -> bool {
            // ORDERING: Relaxed: one thread only.
            self.tries.fetch_add(1, Relaxed);
            self.looks.load(Relaxed) > self.held_for
        }

        fn unlock(&self) -> bool {
            true
        }

        fn enqueue(
            &self,
            _: crate::core::raw::Notify,
            _: Compete,
        ) -> crate::core::raw::Enqueued<Self::Waiter> {
            unreachable!("spin never queues")
        }

        fn may_spin(&self) -> bool {
            // ORDERING: Relaxed: one thread only.
            self.looks.fetch_add(1, Relaxed) < self.held_for
        }
    }

    #[test]
    fn a_spinner_yields_all_its_spins_before_it_looks_again() {
        // Held when it starts: it looks once to start, once after its yields.
        let lock = Scripted::new(1);
        assert!(spin(&lock, 40), "the lock was free after the yields");
        assert_eq!(lock.counts(), (2, 1));
        // Still held after the yields: no try (it would take the holder's cache line).
        let lock = Scripted::new(2);
        assert!(!spin(&lock, 40));
        assert_eq!(lock.counts(), (2, 0));
        // Free when it would start, or no spins: it does not spin at all.
        let lock = Scripted::new(0);
        assert!(!spin(&lock, 40));
        assert_eq!(lock.counts(), (1, 0));
        let lock = Scripted::new(1);
        assert!(!spin(&lock, 0));
        assert_eq!(lock.counts(), (0, 0));
    }

    /// A lock held for its first `free_after` looks and free after, whose one waiter
    /// reads its statuses from a script (the last one repeats) and wins a competition
    /// when the lock is free or it was granted. Counts looks and competitions.
    struct Watched {
        script: std::sync::Arc<WatchScript>,
    }

    struct WatchScript {
        free_after: usize,
        statuses: std::sync::Mutex<Vec<Status>>,
        looks: AtomicUsize,
        competes: AtomicUsize,
        granted: std::sync::atomic::AtomicBool,
    }

    struct WatchedWaiter(std::sync::Arc<WatchScript>);

    impl Watched {
        fn new(free_after: usize, statuses: &[Status]) -> Watched {
            let mut statuses = statuses.to_vec();
            statuses.reverse();
            Watched {
                script: std::sync::Arc::new(WatchScript {
                    free_after,
                    statuses: std::sync::Mutex::new(statuses),
                    looks: AtomicUsize::new(0),
                    competes: AtomicUsize::new(0),
                    granted: Default::default(),
                }),
            }
        }

        /// (looks, competitions) so far.
        fn counts(&self) -> (usize, usize) {
            // ORDERING: Relaxed: one thread only.
            (
                self.script.looks.load(Relaxed),
                self.script.competes.load(Relaxed),
            )
        }
    }

    impl WatchScript {
        fn free(&self) -> bool {
            // ORDERING: Relaxed: one thread only.
            self.looks.load(Relaxed) > self.free_after
        }
    }

    impl RawLock for Watched {
        type Waiter = WatchedWaiter;

        fn try_lock(&self) -> bool {
            false
        }

        fn unlock(&self) -> bool {
            true
        }

        fn enqueue(&self, _: Notify, _: Compete) -> Enqueued<WatchedWaiter> {
            Enqueued::Queued(WatchedWaiter(self.script.clone()))
        }

        fn looks_free(&self) -> bool {
            // ORDERING: Relaxed: one thread only.
            self.script.looks.fetch_add(1, Relaxed);
            self.script.free()
        }
    }

    impl RawWaiter for WatchedWaiter {
        fn status(&self) -> Status {
            let mut statuses = self.0.statuses.lock().unwrap();
            let status = if statuses.len() > 1 {
                statuses.pop().unwrap()
            } else {
                statuses[0]
            };
            if status == Status::Granted {
                // ORDERING: Relaxed: one thread only.
                self.0.granted.store(true, Relaxed);
            }
            status
        }

        fn abandon(&self) -> bool {
            true
        }

        fn compete(&self) -> bool {
            // ORDERING: Relaxed: one thread only.
            self.0.competes.fetch_add(1, Relaxed);
            self.0.free() || self.0.granted.load(Relaxed)
        }
    }

    /// `block` on `lock` with `spins` and `compete`, counting its steps.
    fn block_counting_steps(lock: &Watched, compete: Compete, spins: u32) -> usize {
        let mut steps = 0;
        block(lock, Wait::<()>::default(), compete, spins, |w| {
            steps += 1;
            w.step()
        })
        .expect("the scripted wait ends holding the lock");
        steps
    }

    #[test]
    fn a_woken_thread_that_lost_watches_and_competes_again_once_the_lock_looks_free() {
        // Woken, it loses (held), then looks 4 times: free on the 4th, and wins without
        // a second step (which would park).
        let lock = Watched::new(3, &[Status::Retry, Status::Waiting]);
        assert_eq!(block_counting_steps(&lock, Compete::AtOnce, 40), 1);
        assert_eq!(lock.counts(), (4, 2));
    }

    #[test]
    fn only_a_thread_that_competes_at_once_and_may_spin_watches() {
        // With no spins (a GIL), or competing later (after taking the GIL back), a lost
        // competition goes straight to the next step, which finds the grant here.
        for (compete, spins) in [(Compete::AtOnce, 0), (Compete::Later, 40)] {
            let lock = Watched::new(0, &[Status::Retry, Status::Granted]);
            assert_eq!(block_counting_steps(&lock, compete, spins), 2);
            assert_eq!(lock.counts(), (0, 1), "{compete:?} with {spins} spins");
        }
    }

    #[test]
    fn a_watch_competes_when_a_release_reached_the_waiter_and_otherwise_ends_in_time() {
        // Granted while it watches a lock that never looks free (it holds it now): it
        // competes at once, which answers that it holds the lock.
        let lock = Watched::new(
            usize::MAX,
            &[Status::Retry, Status::Waiting, Status::Granted],
        );
        let mut waiting = ThreadWait::new(&lock, Wait::<()>::default(), Compete::AtOnce);
        assert_eq!(waiting.step().ok(), Some(Woken::Retry));
        assert!(!waiting.compete());
        assert!(watch(&lock, &mut waiting, Duration::from_secs(60)));
        assert_eq!(lock.counts(), (2, 2));
        // Nothing comes: it gives up after its time, having looked and not competed.
        let lock = Watched::new(usize::MAX, &[Status::Retry, Status::Waiting]);
        let mut waiting = ThreadWait::new(&lock, Wait::<()>::default(), Compete::AtOnce);
        assert_eq!(waiting.step().ok(), Some(Woken::Retry));
        assert!(!waiting.compete());
        let started = Instant::now();
        assert!(!watch(&lock, &mut waiting, Duration::from_millis(2)));
        assert!(started.elapsed() >= Duration::from_millis(2));
        let (looks, competes) = lock.counts();
        assert!(
            looks >= WATCH_CLOCK_EVERY as usize && competes == 1,
            "{looks} {competes}"
        );
    }

    #[test]
    fn only_a_deadline_with_blocking_false_is_refused() {
        assert!(check_args::<()>(false, true).is_ok());
        assert!(check_args::<()>(true, true).is_ok());
        assert!(check_args::<()>(false, false).is_ok());
        let refused = check_args::<()>(true, false);
        assert!(matches!(
            refused,
            Err(AcquireError::DeadlineWithoutBlocking)
        ));
        assert_eq!(
            refused.unwrap_err().to_string(),
            "deadline cannot be given with blocking=False"
        );
    }

    #[test]
    fn only_a_wait_with_no_token_and_no_deadline_is_ended_by_a_release_alone() {
        let token = CancelToken::new(None);
        let soon = Timeout::from_secs(1.0).unwrap();
        assert!(only_a_release_ends(None, Timeout::NEVER));
        assert!(!only_a_release_ends(Some(&token), Timeout::NEVER));
        assert!(!only_a_release_ends(None, soon));
        assert!(!only_a_release_ends(None, Timeout::NOW));
        assert!(!only_a_release_ends(Some(&token), soon));
    }
}
