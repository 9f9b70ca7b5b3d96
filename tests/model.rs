//! The grant policy against a model, driven by proptest (jiter's habit).
//!
//! A random sequence of operations runs on one thread against a `SharableLock`, a fair
//! `Lock` and a barging `Lock`: non-blocking acquires, unlocks, queued task waiters in
//! either mode, waiters that give up, and acquires with a cancelled token. Beside it
//! runs a model of the documented policy: FIFO hand-off; phase-fair for the sharable
//! lock (an exclusive unlock grants every queued reader, the last reader out grants the
//! head writer, a writer that gives up lets the readers it held back in); a task is
//! always handed the lock, so the barging `Lock` behaves like the fair one here. After
//! every step the real holders, queue length and grants must equal the model's.
#![cfg(not(loom))] // loom's types only work inside `loom::model`.

mod support;

use std::collections::VecDeque;

use ctxlock::{AcquireError, CancelToken, Lock, LockView, Mode, SharableLock, TaskWait};
use proptest::prelude::*;
use support::{noop_waker, reason, until_cancelled};

#[derive(Clone, Debug)]
enum Op {
    /// `try_lock` in this mode.
    TryLock(Mode),
    /// Release one hold of this mode (or check that none is released if none is held).
    Unlock(Mode),
    /// Queue an asynchronous acquire (`lock_task`); it may acquire at once.
    Queue(Mode),
    /// A queued waiter (picked by index) gives up.
    Abandon(usize),
    /// An acquire whose token is already cancelled.
    AcquireCancelled(Mode),
}

fn mode() -> impl Strategy<Value = Mode> {
    prop_oneof![Just(Mode::Exclusive), Just(Mode::Shared)]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => mode().prop_map(Op::TryLock),
        4 => mode().prop_map(Op::Unlock),
        4 => mode().prop_map(Op::Queue),
        2 => any::<usize>().prop_map(Op::Abandon),
        1 => mode().prop_map(Op::AcquireCancelled),
    ]
}

/// The documented policy, in the plainest terms.
#[derive(Default, Debug)]
struct Model {
    writer: bool,
    readers: usize,
    /// Waiters in arrival order: (id, mode).
    queue: VecDeque<(usize, Mode)>,
}

impl Model {
    fn writer_queued(&self) -> bool {
        self.queue.iter().any(|&(_, m)| m == Mode::Exclusive)
    }

    fn free(&self) -> bool {
        !self.writer && self.readers == 0
    }

    /// Take the lock without queueing, if the policy allows it now.
    fn try_lock(&mut self, mode: Mode) -> bool {
        let ok = match mode {
            // Never ahead of a queued waiter.
            Mode::Exclusive => self.free() && self.queue.is_empty(),
            // Readers join the group unless a writer holds or waits.
            Mode::Shared => !self.writer && !self.writer_queued(),
        };
        if ok {
            self.hold(mode);
        }
        ok
    }

    fn hold(&mut self, mode: Mode) {
        match mode {
            Mode::Exclusive => self.writer = true,
            Mode::Shared => self.readers += 1,
        }
    }

    fn holds(&self, mode: Mode) -> bool {
        match mode {
            Mode::Exclusive => self.writer,
            Mode::Shared => self.readers > 0,
        }
    }

    /// Release one hold of `mode`; the ids granted in consequence.
    fn unlock(&mut self, mode: Mode) -> Vec<usize> {
        match mode {
            Mode::Exclusive => self.writer = false,
            Mode::Shared => self.readers -= 1,
        }
        self.grant(Some(mode))
    }

    /// Waiter `id` gives up; the ids granted in consequence.
    fn abandon(&mut self, id: usize) -> Vec<usize> {
        self.queue.retain(|&(i, _)| i != id);
        self.grant(None)
    }

    /// Whom the lock goes to after a release of `released` (or a waiter leaving).
    fn grant(&mut self, released: Option<Mode>) -> Vec<usize> {
        let readers_go = if self.writer || self.queue.is_empty() {
            false
        } else if self.readers > 0 {
            // The group holds: queued readers join once no writer waits any more.
            !self.writer_queued()
        } else {
            // Free: after an exclusive hold (or a waiter leaving) the queued readers go
            // first; after the last reader, the head writer, if there is one.
            self.queue.iter().any(|&(_, m)| m == Mode::Shared)
                && (released != Some(Mode::Shared) || !self.writer_queued())
        };
        if readers_go {
            let granted: Vec<usize> = self
                .queue
                .iter()
                .filter(|&&(_, m)| m == Mode::Shared)
                .map(|&(i, _)| i)
                .collect();
            self.queue.retain(|&(_, m)| m == Mode::Exclusive);
            self.readers += granted.len();
            return granted;
        }
        if self.free() {
            if let Some(at) = self.queue.iter().position(|&(_, m)| m == Mode::Exclusive) {
                let (id, _) = self.queue.remove(at).expect("position is in range");
                self.writer = true;
                return vec![id];
            }
        }
        Vec::new()
    }
}

/// The real lock under test: one view per mode (a `Lock` has only the exclusive one).
struct Real {
    shared: Option<LockView>,
    exclusive: LockView,
    /// Queued task waiters: (id, wait).
    waiting: Vec<(usize, TaskWait)>,
}

impl Real {
    fn view(&self, mode: Mode) -> &LockView {
        match mode {
            Mode::Shared => self.shared.as_ref().unwrap_or(&self.exclusive),
            Mode::Exclusive => &self.exclusive,
        }
    }
}

/// Run `ops`; `sharable` says whether shared ops are real (else they become exclusive).
fn check(mut real: Real, ops: &[Op]) -> Result<(), TestCaseError> {
    let sharable = real.shared.is_some();
    let as_mode = |m: Mode| if sharable { m } else { Mode::Exclusive };
    let mut model = Model::default();
    let cancelled = CancelToken::default();
    cancelled.cancel(reason("cancelled"));
    for (id, op) in ops.iter().enumerate() {
        let granted = match *op {
            Op::TryLock(m) => {
                let m = as_mode(m);
                prop_assert_eq!(real.view(m).try_lock(), model.try_lock(m), "{:?}", op);
                Vec::new()
            }
            Op::Unlock(m) => {
                let m = as_mode(m);
                let held = model.holds(m);
                prop_assert_eq!(real.view(m).unlock(), held, "{:?}", op);
                if held {
                    model.unlock(m)
                } else {
                    Vec::new()
                }
            }
            Op::Queue(m) => {
                let m = as_mode(m);
                let at_once = model.try_lock(m);
                match real.view(m).lock_task(noop_waker()) {
                    None => prop_assert!(at_once, "acquired at once, the model queues"),
                    Some(wait) => {
                        prop_assert!(!at_once, "queued, the model acquires at once");
                        prop_assert!(!wait.granted());
                        model.queue.push_back((id, m));
                        real.waiting.push((id, wait));
                    }
                }
                Vec::new()
            }
            Op::Abandon(pick) => {
                if real.waiting.is_empty() {
                    continue;
                }
                let (id, wait) = real.waiting.remove(pick % real.waiting.len());
                prop_assert!(wait.abandon(), "a waiting task could not leave");
                prop_assert!(wait.abandon(), "leaving twice must stay a no-op");
                model.abandon(id)
            }
            Op::AcquireCancelled(m) => {
                let m = as_mode(m);
                let r = real.view(m).lock(until_cancelled(&cancelled));
                prop_assert!(matches!(r, Err(AcquireError::Cancelled(_))), "{:?}", r);
                Vec::new()
            }
        };
        // The waiters the real lock granted are exactly the model's.
        let mut real_granted: Vec<usize> = real
            .waiting
            .iter()
            .filter(|(_, w)| w.granted())
            .map(|&(id, _)| id)
            .collect();
        let mut granted = granted;
        real_granted.sort_unstable();
        granted.sort_unstable();
        prop_assert_eq!(&real_granted, &granted, "after {:?}; model {:?}", op, model);
        // A granted task owns its hold: it can no longer leave, and it is not queued.
        for (_, wait) in real.waiting.iter().filter(|(_, w)| w.granted()) {
            prop_assert!(!wait.abandon(), "a granted task left without the lock");
        }
        real.waiting.retain(|(_, w)| !w.granted());
        prop_assert_eq!(real.exclusive.is_locked(), model.writer, "after {:?}", op);
        if let Some(shared) = &real.shared {
            prop_assert_eq!(shared.readers(), model.readers, "after {:?}", op);
        }
        prop_assert_eq!(real.exclusive.queued(), model.queue.len(), "after {:?}", op);
    }
    Ok(())
}

proptest! {
    #[test]
    fn test_sharable_lock_grants_as_the_model(ops in prop::collection::vec(op(), 0..64)) {
        let lock = SharableLock::new();
        check(Real { shared: Some(lock.shared().clone()), exclusive: lock.exclusive().clone(), waiting: Vec::new() }, &ops)?;
    }

    #[test]
    fn test_fair_lock_grants_as_the_model(ops in prop::collection::vec(op(), 0..64)) {
        check(Real { shared: None, exclusive: Lock::fair().view().clone(), waiting: Vec::new() }, &ops)?;
    }

    #[test]
    fn test_barging_lock_grants_tasks_as_the_model(ops in prop::collection::vec(op(), 0..64)) {
        check(Real { shared: None, exclusive: Lock::new().view().clone(), waiting: Vec::new() }, &ops)?;
    }
}
