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

use super::cancel::CancelToken;
use super::deadline::Timeout;
use super::error::AcquireError;
use super::give_up::cancelled;
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

/// Rule 1: a cancelled token fails.
#[inline]
pub fn check_token<E>(cancel: Option<&CancelToken>) -> Result<(), AcquireError<E>> {
    match cancel {
        Some(t) if t.is_cancelled() => Err(cancelled(t)),
        _ => Ok(()),
    }
}

/// Rule 1 for the lock itself: a kind whose backend failed (or was closed) fails.
#[inline]
pub fn check_backend<L: RawLock + ?Sized, E>(lock: &L) -> Result<(), AcquireError<E>> {
    match lock.failure() {
        None => Ok(()),
        Some(why) => Err(AcquireError::Backend(why)),
    }
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
/// GIL around it); a thread woken to compete competes after it.
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
    let mut waiting = ThreadWait::new(lock, wait, compete);
    loop {
        match step(&mut waiting)? {
            Woken::Acquired => return Ok(()),
            Woken::Retry if waiting.compete() => return Ok(()),
            Woken::Retry => {}
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
