//! A thread blocked until a token is cancelled ([`CancelToken::wait`]).

use std::time::Instant;

use super::cancel::CancelToken;
use super::deadline::earliest;
use super::park::{park_step, Interrupt};
use super::sync::{current, park_until};

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
            if let Err(e) = park_step(&interrupt, deadline, park_until, &()) {
                break Err(e);
            }
        };
        if let Some(r) = registration {
            r.unregister();
        }
        result
    }
}
