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

use super::cancel::CancelToken;
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

impl Slot {
    /// Queue and wait. The caller has tried the fast path and checked the token.
    pub(crate) fn acquire_slow<E>(
        &self,
        mode: Mode,
        mut wait: Wait<'_, E>,
    ) -> Result<(), AcquireError<E>> {
        let waiter = Arc::new(Waiter::new(mode, Notify::Thread(current())));
        let registration = wait.cancel.and_then(|t| {
            let me = current();
            t.on_cancel(move |_| me.unpark())
        });
        let result = self.wait_for_grant(&waiter, &mut wait);
        if let Some(r) = registration {
            r.unregister();
        }
        result
    }

    fn wait_for_grant<E>(
        &self,
        w: &Arc<Waiter>,
        wait: &mut Wait<'_, E>,
    ) -> Result<(), AcquireError<E>> {
        let deadline = earliest(wait.deadline, wait.cancel.and_then(CancelToken::deadline));
        loop {
            if self.acquire_or_queue(&mut lock(self.queue()), w) {
                return Ok(());
            }
            loop {
                match w.status() {
                    GRANTED => return Ok(()),
                    RETRY => break,
                    _ => {}
                }
                if let Some(t) = wait.cancel {
                    if t.is_cancelled() {
                        return self.give_up(w, cancelled(t));
                    }
                }
                if let Some(d) = deadline {
                    let now = Instant::now();
                    if now >= d {
                        // The token's deadline may be the one that passed before its timer ran.
                        return match wait.cancel {
                            Some(t) if t.expire_if_due(now) => self.give_up(w, cancelled(t)),
                            _ => self.give_up(w, AcquireError::Timeout),
                        };
                    }
                }
                if let Err(e) = park_step(&wait.interrupt, deadline) {
                    return self.give_up(w, AcquireError::Interrupted(e));
                }
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
        let deadline = earliest(until, self.deadline());
        let result = loop {
            if self.is_cancelled() {
                break Ok(true);
            }
            if let Some(d) = deadline {
                let now = Instant::now();
                if now >= d {
                    break Ok(self.expire_if_due(now));
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
