//! loom models of a task's wait settled while its token is cancelled: the settlement
//! (`TaskWait::finish_with`) against a racing grant and a doorbell that gives up.
//!
//! `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 cargo test --release --test loom_task`
//!
//! The token tree uses std's primitives, which loom does not model, so the cancel here
//! is a loom flag that the model turns into the token's verdict itself, as
//! `TaskWait::finish` does from the token: set by the thread that cancels, read once by
//! the settling call. The models check that the lock is never leaked nor held twice,
//! and that a wait that was cancelled never returns the lock.
#![cfg(loom)]

mod support;

use std::cell::Cell;

use ctxlock::{AcquireError, Lock};
use loom::sync::atomic::{AtomicBool, Ordering};
use loom::sync::Arc;
use loom::thread;
use support::{label, model, model_exhaustive, noop_waker, reason};

fn assert_free(lock: &Lock) {
    assert!(!lock.is_locked(), "the lock is still held");
    assert_eq!(lock.queued(), 0, "a waiter was left in the queue");
    assert!(lock.try_lock(), "a free lock cannot be taken");
    assert!(lock.unlock());
}

/// The token's verdict, as `finish` computes it from a cancelled token.
fn verdict(cancelled: &AtomicBool, seen: &Cell<bool>) -> Option<AcquireError<()>> {
    // ORDERING: Acquire pairs with the canceller's Release store (the token's own
    // `cancelled` flag has the same pair).
    let c = cancelled.load(Ordering::Acquire);
    seen.set(c);
    c.then(|| AcquireError::Cancelled(reason("cancel")))
}

/// The token was cancelled before the doorbell rang while the holder unlocks: the
/// task never keeps the lock, a grant that reached it is passed on.
fn cancel_passes_a_racing_grant_on(new: fn() -> Lock) {
    model_exhaustive("cancel_passes_a_racing_grant_on", move || {
        let lock = new();
        assert!(lock.try_lock());
        let task = lock.lock_task(noop_waker()).expect("held, so it queues");
        let holder = {
            let lock = lock.clone();
            thread::spawn(move || assert!(lock.unlock()))
        };
        let cancelled = AtomicBool::new(true);
        let seen = Cell::new(false);
        match task.finish_with(|_| verdict(&cancelled, &seen)) {
            Err(AcquireError::Cancelled(r)) => assert_eq!(label(&r), "cancel"),
            other => panic!("a cancelled wait ended in {other:?}"),
        }
        holder.join().unwrap();
        drop(task);
        assert_free(&lock);
    });
}

/// A cancel from another thread, whose doorbell then finds the task's loop gone and
/// gives the wait up, races the holder's unlock (a grant) and the task finishing the
/// wait. Settled once: the lock is the task's only if it finished first and saw no
/// cancel; else it is passed on or left, never leaked.
fn cancel_races_grant_and_give_up(new: fn() -> Lock) {
    model("cancel_races_grant_and_give_up", move || {
        let lock = new();
        assert!(lock.try_lock());
        let task = Arc::new(lock.lock_task(noop_waker()).expect("held, so it queues"));
        let cancelled = Arc::new(AtomicBool::new(false));
        let holder = {
            let lock = lock.clone();
            thread::spawn(move || assert!(lock.unlock()))
        };
        let canceller = {
            let (task, cancelled) = (task.clone(), cancelled.clone());
            thread::spawn(move || {
                // ORDERING: Release pairs with the Acquire in `verdict`.
                cancelled.store(true, Ordering::Release);
                task.give_up();
            })
        };
        let seen = Cell::new(false);
        match task.finish_with(|_| verdict(&cancelled, &seen)) {
            Ok(()) => {
                assert!(!seen.get(), "kept the lock of a cancelled wait");
                assert!(lock.unlock(), "finish said held, but the lock is not");
            }
            Err(AcquireError::Cancelled(_)) => assert!(seen.get()),
            Err(AcquireError::Timeout) => assert!(!seen.get()),
            Err(AcquireError::Abandoned) => {}
            Err(e) => panic!("unexpected {e:?}"),
        }
        holder.join().unwrap();
        canceller.join().unwrap();
        drop(task);
        assert_free(&lock);
    });
}

#[test]
fn loom_task_cancel_passes_a_racing_grant_on_fair() {
    cancel_passes_a_racing_grant_on(Lock::fair);
}

#[test]
fn loom_task_cancel_passes_a_racing_grant_on_barging() {
    cancel_passes_a_racing_grant_on(Lock::new);
}

#[test]
fn loom_task_cancel_races_grant_and_give_up_fair() {
    cancel_races_grant_and_give_up(Lock::fair);
}

#[test]
fn loom_task_cancel_races_grant_and_give_up_barging() {
    cancel_races_grant_and_give_up(Lock::new);
}
