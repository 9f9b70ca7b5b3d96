//! How a blocked thread waits: park until granted, cancelled, timed out or interrupted.
//!
//! One loop serves every cause and every kind of lock ([`RawLock`]). A grant notifies
//! the thread (std's park token means an unpark before the park is not lost); a
//! token's cancel runs the `unpark` the wait registered on it; the deadline is the park
//! timeout; an [`Interrupt`] cuts the park into slices. On any cause but a grant the
//! wait gives up through the one give-up rule (`give_up.rs`).

use std::cell::Cell;
use std::time::Instant;

use super::cancel::{CancelToken, Registration};
use super::deadline::earliest;
use super::error::AcquireError;
use super::give_up::{cancelled, check_backend, check_token, give_up};
use super::park::{park_step, Interrupt};
use super::raw::{Compete, Enqueued, Notify, RawLock, RawWaiter, Status};
use super::step_aside::StepAside;
use super::sync::current;

/// What ends a blocking wait besides success.
pub struct Wait<'a, E> {
    pub deadline: Option<Instant>,
    pub cancel: Option<&'a CancelToken>,
    pub interrupt: Option<Interrupt<E>>,
}

impl<E> Default for Wait<'_, E> {
    fn default() -> Self {
        Wait {
            deadline: None,
            cancel: None,
            interrupt: None,
        }
    }
}

/// How one step of a [`ThreadWait`] ended, short of a failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Woken {
    /// The caller holds the lock.
    Acquired,
    /// A release chose this waiter to compete for the free lock (barging policy). The
    /// caller must call [`ThreadWait::compete`] before the next step (see [`Compete`]).
    Retry,
}

/// A thread's wait for one lock, kept across steps so that a waiter that is woken to
/// compete keeps its place, its age (for the hand-off rule) and its token registration.
/// (Only a wait begun within its interrupt's check makes it give up its place and age:
/// it steps aside, see `step_aside.rs`, and queues again in its next pass.)
///
/// # Invariants
/// - The wait is settled once a step returned anything but [`Woken::Retry`] (it holds
///   the lock, or it failed and gave up through the give-up rule) or `compete` returned
///   true (it holds the lock); after that the lock is the caller's business.
/// - Dropped queued and unsettled (after a `Retry`, or unwinding out of a step), it
///   gives up through the give-up rule like a cancelled wait: it leaves the queue, and a
///   grant that reached it meanwhile, which the caller never saw, is passed on. So
///   dropping is the one cancel path, and no queued waiter is ever left without an owner.
/// - A waiter that stepped aside (`left`) has left the queue through the give-up rule
///   already: nothing gives it up again.
pub struct ThreadWait<'a, L: RawLock + ?Sized, E> {
    lock: &'a L,
    compete: Compete,
    /// `Some` once queued.
    waiter: Option<L::Waiter>,
    /// See the invariants.
    settled: bool,
    /// Whether `waiter` stepped aside while the interrupt's check ran (`step_aside.rs`):
    /// it left the queue, and the next step queues a new one. Set from within the check,
    /// so a check that unwinds leaves it set, and dropping the wait then gives up nothing.
    left: Cell<bool>,
    wait: Wait<'a, E>,
    deadline: Option<Instant>,
    registration: Option<Registration>,
}

impl<'a, L: RawLock + ?Sized, E> ThreadWait<'a, L, E> {
    /// A wait on `lock`; the caller ran the argument rules and the fast path
    /// (`acquire.rs`).
    pub(crate) fn new(lock: &'a L, wait: Wait<'a, E>, compete: Compete) -> Self {
        let registration = wait.cancel.and_then(|t| {
            let me = current();
            t.on_cancel(move |_| me.unpark())
        });
        ThreadWait {
            lock,
            compete,
            waiter: None,
            settled: false,
            left: Cell::new(false),
            deadline: earliest(wait.deadline, wait.cancel.and_then(CancelToken::deadline)),
            wait,
            registration,
        }
    }

    /// Take the lock or queue (the first step; with its deadline already passed, one
    /// try and no queueing), then park until granted, woken to compete, or failed (and
    /// queue again after stepping aside). A step that fails has left the queue (and
    /// passed on any grant it raced with).
    pub fn step(&mut self) -> Result<Woken, AcquireError<E>> {
        let result = self.step_once();
        if !matches!(result, Ok(Woken::Retry)) {
            self.settled = true;
        }
        result
    }

    fn step_once(&mut self) -> Result<Woken, AcquireError<E>> {
        let lock = self.lock;
        loop {
            let w = match &self.waiter {
                Some(w) => w,
                None => {
                    if self.wait.deadline.is_some_and(|d| d <= Instant::now()) {
                        return if lock.try_lock() {
                            Ok(Woken::Acquired)
                        } else {
                            Err(AcquireError::Timeout)
                        };
                    }
                    match lock.enqueue(Notify::Thread(current()), self.compete) {
                        Enqueued::Acquired => return Ok(Woken::Acquired),
                        Enqueued::Queued(w) => self.waiter.insert(w),
                    }
                }
            };
            match park_queued(lock, w, &self.wait, &mut self.deadline, &self.left) {
                Some(result) => return result,
                // A wait begun in the interrupt's check (a signal handler) made this one
                // leave the queue: queue again, behind the waiters that came meanwhile.
                None => {
                    self.waiter = None;
                    self.left.set(false);
                }
            }
        }
    }

    /// Whether a release reached the queued waiter since it last looked (it was granted
    /// the lock, or woken to compete): then [`ThreadWait::compete`] or the next step has
    /// news for it. False before it queued.
    pub fn woken(&self) -> bool {
        self.waiter
            .as_ref()
            .is_some_and(|w| w.status() != Status::Waiting)
    }

    /// After [`Woken::Retry`]: take the lock if it is free; else stay queued and let the
    /// next step park. True if the caller now holds the lock.
    pub fn compete(&mut self) -> bool {
        let took = self
            .waiter
            .as_ref()
            .expect("BUG: compete before the wait queued")
            .compete();
        self.settled = took;
        took
    }
}

/// Park a queued waiter until granted, woken to compete, or failed (`Some`), or until
/// it stepped aside while its interrupt's check ran (`None`: it left the queue).
fn park_queued<L: RawLock + ?Sized, E>(
    lock: &L,
    w: &L::Waiter,
    wait: &Wait<'_, E>,
    deadline: &mut Option<Instant>,
    left: &Cell<bool>,
) -> Option<Result<Woken, AcquireError<E>>> {
    let given_up = |why| Some(give_up(lock, w, why).map(|()| Woken::Acquired));
    loop {
        match w.status() {
            Status::Granted => return Some(Ok(Woken::Acquired)),
            Status::Retry => return Some(Ok(Woken::Retry)),
            Status::Waiting => {}
        }
        if let Some(why) = lock.failure() {
            return given_up(AcquireError::Backend(why));
        }
        if let Some(t) = wait.cancel {
            if t.is_cancelled() {
                return given_up(cancelled(t));
            }
        }
        if let Some(d) = *deadline {
            let now = Instant::now();
            if now >= d {
                // The token's deadline may be the one that passed before its timer ran.
                match wait.cancel {
                    Some(t) if t.expire_if_due(now) => return given_up(cancelled(t)),
                    // Its deadline passed, but the cancel that another thread began
                    // (the timer's, on an ancestor) has not reached it yet: that
                    // cancel unparks us; until then only our own deadline counts.
                    Some(t)
                        if t.deadline().is_some_and(|td| td <= now)
                            && wait.deadline.is_none_or(|own| own > now) =>
                    {
                        *deadline = wait.deadline;
                    }
                    _ => return given_up(AcquireError::Timeout),
                }
            }
        }
        let aside = Aside {
            lock,
            waiter: w,
            left,
        };
        let checked = park_step(&wait.interrupt, *deadline, |until| w.park(until), &aside);
        match (checked, left.get()) {
            (Err(e), false) => return given_up(AcquireError::Interrupted(e)),
            // Out of the queue already: only the failure is left to report, and the
            // token and the lock's failure come before queueing again, as in rule 1.
            (Err(e), true) => return Some(Err(AcquireError::Interrupted(e))),
            (Ok(()), true) => {
                return check_token(wait.cancel)
                    .and_then(|()| check_backend(lock))
                    .err()
                    .map(Err);
            }
            (Ok(()), false) => {}
        }
    }
}

/// A queued waiter while its interrupt's check runs.
struct Aside<'w, L: RawLock + ?Sized> {
    lock: &'w L,
    waiter: &'w L::Waiter,
    /// The wait's `left`.
    left: &'w Cell<bool>,
}

impl<L: RawLock + ?Sized> StepAside for Aside<'_, L> {
    /// Leave the queue as a cancelled waiter does: a grant that reached the waiter
    /// meanwhile goes on to the next one (its caller never saw it).
    fn step_aside(&self) {
        if !self.left.replace(true) {
            let _ = give_up(self.lock, self.waiter, AcquireError::<()>::Abandoned);
        }
    }
}

impl<L: RawLock + ?Sized, E> Drop for ThreadWait<'_, L, E> {
    fn drop(&mut self) {
        if let Some(r) = self.registration.take() {
            r.unregister();
        }
        if let (Some(w), false, false) = (&self.waiter, self.settled, self.left.get()) {
            let _ = give_up(self.lock, w, AcquireError::<E>::Abandoned);
        }
    }
}
