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

/// Before queueing: while the lock says it is worth it ([`RawLock::may_spin`]: held,
/// nobody queued), yield the CPU and look again, up to `spins` times, and try once it
/// looks free. True if that took the lock.
///
/// Spinning pays where the holder runs in parallel and holds briefly: a park and its
/// wake-up cost two thread switches, far more than a short critical section (CPython's
/// `PyMutex` and parking_lot spin the same way, and only then). With a GIL the holder
/// cannot run while the spinner holds it, so the binding passes 0 there. A spin lasts
/// a few microseconds at most, so it ignores the deadline and the token: an acquire that
/// wins the lock meanwhile succeeds, as one that wins a race against a cancel may.
fn spin<L: RawLock + ?Sized>(lock: &L, spins: u32) -> bool {
    if spins == 0 || !lock.may_spin() {
        return false;
    }
    for _ in 0..spins {
        std::thread::yield_now();
        // Only look while it is held: a failed try would take the lock's cache line from
        // the holder, which must write it again to release.
        if lock.may_spin() {
            continue;
        }
        if lock.try_lock() {
            return true;
        }
        if !lock.may_spin() {
            return false; // free but with a queue, or taken with one: queue as well
        }
    }
    false
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
    use super::*;

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
