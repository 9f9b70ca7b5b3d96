//! How a blocked thread waits: park until granted, cancelled, timed out or interrupted.
//!
//! One loop serves every cause. A grant unparks the thread (std's park token means an
//! unpark before the park is not lost); a token's cancel runs the `unpark` the waiter
//! registered on it; the deadline is the park timeout. Parkers swallow EINTR, so a
//! caller that must react to signals (Python's main thread) passes an [`Interrupt`]:
//! the wait is cut into slices and the check runs after each one. On any cause but a
//! grant the waiter calls `Slot::abandon`, the one race-resolution path: if the slot
//! was handed over at that very moment, a timeout keeps it (granted wins, as in
//! CPython and parking_lot) and a cancellation or interrupt passes it on (x/sync's
//! "cancel observed ⇒ lock unchanged").

use std::time::{Duration, Instant};

use super::cancel::{CancelToken, Registration};
use super::deadline::earliest;
use super::error::AcquireError;
use super::slot::Slot;
use super::sync::{current, lock, park_until, Arc};
use super::waiter::{Mode, Notify, Waiter, GRANTED, RETRY};

/// A check run while waiting, e.g. "run pending signal handlers".
pub struct Interrupt<E> {
    /// The longest stretch between two checks.
    pub every: Duration,
    /// Fails to end the wait.
    pub check: fn() -> Result<(), E>,
}

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

impl<E> Interrupt<E> {
    /// Park until `until` or one slice, then run the check.
    fn park(&self, until: Option<Instant>) -> Result<(), E> {
        let slice_end = Instant::now() + self.every;
        park_until(Some(earliest(until, Some(slice_end)).unwrap_or(slice_end)));
        (self.check)()
    }
}

/// Park once, until `until`, or one slice of `interrupt` and then its check.
pub(crate) fn park_step<E>(
    interrupt: &Option<Interrupt<E>>,
    until: Option<Instant>,
) -> Result<(), E> {
    match interrupt {
        Some(i) => i.park(until),
        None => {
            park_until(until);
            Ok(())
        }
    }
}

/// How one step of a [`ThreadWait`] ended, short of a failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Woken {
    /// The caller holds the lock.
    Acquired,
    /// A release chose this waiter to compete for the free slot (barging policy). The
    /// caller must call [`ThreadWait::compete`] before the next step (see [`Compete`]).
    Retry,
}

/// When a thread woken to compete for a free slot will compete.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compete {
    /// As soon as it is woken: it leaves the queue then (parking_lot's way), so releases
    /// meanwhile stay on the fast path.
    AtOnce,
    /// Only after something that may take a while (the binding takes the GIL back
    /// first): it keeps its place in the queue meanwhile, so the hand-off rule still
    /// reaches it, and releases wake nobody else.
    Later,
}

/// A thread's wait for one lock, kept across steps so that a waiter that is woken to
/// compete keeps its place, its age (for the hand-off rule) and its token registration.
pub struct ThreadWait<'a, E> {
    slot: &'a Slot,
    waiter: Arc<Waiter>,
    wait: Wait<'a, E>,
    deadline: Option<Instant>,
    registration: Option<Registration>,
    queued: bool,
}

impl<'a, E> ThreadWait<'a, E> {
    pub(crate) fn new(slot: &'a Slot, mode: Mode, wait: Wait<'a, E>, compete: Compete) -> Self {
        let registration = wait.cancel.and_then(|t| {
            let me = current();
            t.on_cancel(move |_| me.unpark())
        });
        ThreadWait {
            slot,
            waiter: Arc::new(Waiter::new(
                mode,
                Notify::Thread(current()),
                compete == Compete::Later,
            )),
            deadline: earliest(wait.deadline, wait.cancel.and_then(CancelToken::deadline)),
            wait,
            registration,
            queued: false,
        }
    }

    /// Take the slot or queue (the first step; with its deadline already passed, one
    /// try and no queueing), then park until granted, woken to compete, or failed. A
    /// step that fails has left the queue (and passed on any grant it raced with).
    pub fn step(&mut self) -> Result<Woken, AcquireError<E>> {
        let (slot, w) = (self.slot, &self.waiter);
        if !self.queued {
            if self.wait.deadline.is_some_and(|d| d <= Instant::now()) {
                return if slot.try_lock(w.mode) {
                    Ok(Woken::Acquired)
                } else {
                    Err(AcquireError::Timeout)
                };
            }
            self.queued = true;
            if slot.acquire_or_queue(&mut lock(slot.queue()), w) {
                return Ok(Woken::Acquired);
            }
        }
        loop {
            match w.status() {
                GRANTED => return Ok(Woken::Acquired),
                RETRY => return Ok(Woken::Retry),
                _ => {}
            }
            if let Some(t) = self.wait.cancel {
                if t.is_cancelled() {
                    return slot.give_up(w, cancelled(t)).map(|()| Woken::Acquired);
                }
            }
            if let Some(d) = self.deadline {
                let now = Instant::now();
                if now >= d {
                    // The token's deadline may be the one that passed before its timer ran.
                    match self.wait.cancel {
                        Some(t) if t.expire_if_due(now) => {
                            return slot.give_up(w, cancelled(t)).map(|()| Woken::Acquired);
                        }
                        // Its deadline passed, but the cancel that another thread began
                        // (the timer's, on an ancestor) has not reached it yet: that
                        // cancel unparks us; until then only our own deadline counts.
                        Some(t)
                            if t.deadline().is_some_and(|td| td <= now)
                                && self.wait.deadline.is_none_or(|own| own > now) =>
                        {
                            self.deadline = self.wait.deadline;
                        }
                        _ => {
                            return slot
                                .give_up(w, AcquireError::Timeout)
                                .map(|()| Woken::Acquired);
                        }
                    }
                }
            }
            if let Err(e) = park_step(&self.wait.interrupt, self.deadline) {
                return slot
                    .give_up(w, AcquireError::Interrupted(e))
                    .map(|()| Woken::Acquired);
            }
        }
    }

    /// After [`Woken::Retry`]: take the slot if it is free; else stay queued and let the
    /// next step park. True if the caller now holds the lock.
    pub fn compete(&mut self) -> bool {
        self.slot.compete(&self.waiter)
    }
}

impl<E> Drop for ThreadWait<'_, E> {
    fn drop(&mut self) {
        if let Some(r) = self.registration.take() {
            r.unregister();
        }
    }
}

impl Slot {
    /// Queue and wait. The caller has tried the fast path and checked the token.
    pub(crate) fn acquire_slow<E>(
        &self,
        mode: Mode,
        wait: Wait<'_, E>,
    ) -> Result<(), AcquireError<E>> {
        let mut waiting = ThreadWait::new(self, mode, wait, Compete::AtOnce);
        loop {
            if waiting.step()? == Woken::Acquired || waiting.compete() {
                return Ok(());
            }
        }
    }

    /// Leave the queue because of `why`; settle the race with a grant.
    fn give_up<E>(&self, w: &Arc<Waiter>, why: AcquireError<E>) -> Result<(), AcquireError<E>> {
        if self.abandon(w) {
            return Err(why);
        }
        match why {
            // Granted wins over a timeout: the caller gets the lock it waited for.
            AcquireError::Timeout => Ok(()),
            // A cancellation or interrupt that was observed leaves the lock unchanged.
            _ => {
                self.release(w.mode);
                Err(why)
            }
        }
    }
}

fn cancelled<E>(t: &CancelToken) -> AcquireError<E> {
    AcquireError::Cancelled(t.reason().expect("BUG: a cancelled token has no reason"))
}

impl CancelToken {
    /// Block until the token is cancelled (true) or `until` passes (false).
    pub fn wait<E>(
        &self,
        until: Option<Instant>,
        interrupt: Option<Interrupt<E>>,
    ) -> Result<bool, E> {
        if self.is_cancelled() {
            return Ok(true);
        }
        let me = current();
        let registration = self.on_cancel(move |_| me.unpark());
        let mut deadline = earliest(until, self.deadline());
        let result = loop {
            if self.is_cancelled() {
                break Ok(true);
            }
            if let Some(d) = deadline {
                let now = Instant::now();
                if now >= d {
                    if self.expire_if_due(now) {
                        break Ok(true);
                    }
                    if until.is_some_and(|u| u <= now) {
                        break Ok(false);
                    }
                    // Our deadline passed, but the cancel another thread began (the
                    // timer's, on an ancestor) has not reached us yet; it unparks us.
                    deadline = until;
                }
            }
            if let Err(e) = park_step(&interrupt, deadline) {
                break Err(e);
            }
        };
        if let Some(r) = registration {
            r.unregister();
        }
        result
    }
}
