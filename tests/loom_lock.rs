//! loom models of `Lock`: exclusion, hand-off to a parked waiter, the races between a
//! grant and a waiter that gives up (abandon, cancellation), and a task's wait settled
//! exactly once (`TaskWait::finish` against `TaskWait::give_up`).
//!
//! `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 cargo test --release --test loom_lock`
//!
//! Under `cfg(loom)` the core's `sync.rs` swaps in loom's atomics, mutexes, `Arc` and
//! park, so these models drive the public API while loom explores the core's
//! interleavings; a lost wake-up shows as loom's deadlock error. Time is not modelled:
//! no deadlines (they would start the timer thread), the barging lock always takes its
//! re-compete branch, and a timeout is modelled as `TaskWait::abandon`, the one path
//! every give-up goes through. Models of two threads are explored exhaustively
//! (`model_exhaustive`); those of three use `LOOM_MAX_PREEMPTIONS` (2 in the Makefile),
//! and the whole file still runs in about a second.
#![cfg(loom)]

mod support;

use ctxlock::{forever, AcquireError, CancelToken, Lock};
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;
use support::critical::{lock_competing_later, Guarded};
use support::{label, model, model_exhaustive, noop_waker, reason, until_cancelled};

fn assert_free(lock: &Lock) {
    assert!(!lock.is_locked(), "the lock is still held");
    assert_eq!(lock.queued(), 0, "a waiter was left in the queue");
    assert!(lock.try_lock(), "a free lock cannot be taken");
    assert!(lock.unlock());
}

/// Two threads lock, run the critical section and unlock.
fn exclusion(new: fn() -> Lock) {
    model_exhaustive("exclusion", move || {
        let lock = new();
        let data = Arc::new(Guarded::default());
        let other = {
            let (lock, data) = (lock.clone(), data.clone());
            thread::spawn(move || {
                lock.lock(forever()).unwrap();
                data.critical_section();
                assert!(lock.unlock());
            })
        };
        lock.lock(forever()).unwrap();
        data.critical_section();
        assert!(lock.unlock());
        other.join().unwrap();
        assert_eq!(data.count(), 2);
        assert_free(&lock);
    });
}

#[test]
fn loom_exclusion_fair() {
    exclusion(Lock::fair);
}

#[test]
fn loom_exclusion_barging() {
    exclusion(Lock::new);
}

/// Three blocking threads: two of them queue, so a release hands off (fair) or wakes
/// a waiter to re-compete (barging) while the other waiter is still queued. `acquire` is
/// how each thread blocks.
fn exclusion_of_three(name: &str, new: fn() -> Lock, acquire: fn(&Lock)) {
    model(name, move || {
        let lock = new();
        let data = Arc::new(Guarded::default());
        let others: Vec<_> = (0..2)
            .map(|_| {
                let (lock, data) = (lock.clone(), data.clone());
                thread::spawn(move || {
                    acquire(&lock);
                    data.critical_section();
                    assert!(lock.unlock());
                })
            })
            .collect();
        acquire(&lock);
        data.critical_section();
        assert!(lock.unlock());
        for t in others {
            t.join().unwrap();
        }
        assert_eq!(data.count(), 3);
        assert_free(&lock);
    });
}

fn lock_forever(lock: &Lock) {
    lock.lock(forever()).unwrap();
}

#[test]
fn loom_exclusion_of_three_fair() {
    exclusion_of_three("exclusion_of_three", Lock::fair, lock_forever);
}

#[test]
fn loom_exclusion_of_three_barging() {
    exclusion_of_three("exclusion_of_three", Lock::new, lock_forever);
}

/// Threads that compete `Later`: releases while a woken waiter is away wake nobody else,
/// the waiter keeps its place, and nobody is lost or enters beside a holder.
#[test]
fn loom_exclusion_of_three_competing_later() {
    exclusion_of_three("exclusion_of_three_competing_later", Lock::new, |lock| {
        lock_competing_later(lock, forever()).unwrap();
    });
}

/// A non-blocking acquirer and two blocking ones: `try_lock` never enters beside a holder
/// and a failed `try_lock` changes nothing.
#[test]
fn loom_try_lock_beside_blocking_acquirers() {
    model("try_lock_beside_blocking_acquirers", || {
        let lock = Lock::new();
        let data = Arc::new(Guarded::default());
        let tried = {
            let (lock, data) = (lock.clone(), data.clone());
            thread::spawn(move || {
                if lock.try_lock() {
                    data.critical_section();
                    assert!(lock.unlock());
                    1
                } else {
                    0
                }
            })
        };
        let blocking = {
            let (lock, data) = (lock.clone(), data.clone());
            thread::spawn(move || {
                lock.lock(forever()).unwrap();
                data.critical_section();
                assert!(lock.unlock());
            })
        };
        lock.lock(forever()).unwrap();
        data.critical_section();
        assert!(lock.unlock());
        let entered = tried.join().unwrap();
        blocking.join().unwrap();
        assert_eq!(data.count(), 2 + entered);
        assert_free(&lock);
    });
}

/// The holder writes, then unlocks; the parked waiter is handed the lock and sees the write.
fn handoff(new: fn() -> Lock) {
    model_exhaustive("handoff_to_a_parked_waiter", move || {
        let lock = new();
        let data = Arc::new(AtomicUsize::new(0));
        assert!(lock.try_lock());
        let waiter = {
            let (lock, data) = (lock.clone(), data.clone());
            thread::spawn(move || {
                lock.lock(forever()).unwrap();
                // ORDERING: Relaxed; the hand-off (GRANTED Release / status Acquire, or
                // the state CAS) must make the holder's store visible.
                let seen = data.load(Ordering::Relaxed);
                assert!(lock.unlock());
                seen
            })
        };
        // ORDERING: Relaxed; published by the unlock below.
        data.store(1, Ordering::Relaxed);
        assert!(lock.unlock());
        assert_eq!(
            waiter.join().unwrap(),
            1,
            "the waiter missed the holder's write"
        );
        assert_free(&lock);
    });
}

#[test]
fn loom_handoff_to_a_parked_waiter_fair() {
    handoff(Lock::fair);
}

#[test]
fn loom_handoff_to_a_parked_waiter_barging() {
    handoff(Lock::new);
}

/// The holder writes and unlocks on another thread; the queued task sees `granted()`
/// and must see the write too: the grant itself publishes the holder's critical section
/// (a task reads its status without taking the queue mutex, and never parks).
fn task_grant_publishes(new: fn() -> Lock) {
    model_exhaustive("task_grant_publishes_the_holders_writes", move || {
        let lock = new();
        let data = Arc::new(AtomicUsize::new(0));
        assert!(lock.try_lock());
        let task = lock
            .lock_task(noop_waker())
            .expect("the lock is held, so the task queues");
        let holder = {
            let (lock, data) = (lock.clone(), data.clone());
            thread::spawn(move || {
                // ORDERING: Relaxed; published by the unlock below.
                data.store(1, Ordering::Relaxed);
                assert!(lock.unlock());
            })
        };
        while !task.granted() {
            thread::yield_now();
        }
        // ORDERING: Relaxed; only the grant orders it.
        assert_eq!(
            data.load(Ordering::Relaxed),
            1,
            "the task missed the holder's write"
        );
        assert!(lock.unlock());
        holder.join().unwrap();
        assert_free(&lock);
    });
}

#[test]
fn loom_task_grant_publishes_the_holders_writes_fair() {
    task_grant_publishes(Lock::fair);
}

#[test]
fn loom_task_grant_publishes_the_holders_writes_barging() {
    task_grant_publishes(Lock::new);
}

/// A queued task gives up (its deadline, in the real world) just as the holder unlocks.
/// Exactly one of the two happens: it leaves without the lock, or it was granted the
/// lock and owns it. A second task behind it is never stranded.
fn grant_abandon_race(new: fn() -> Lock) {
    model_exhaustive("grant_abandon_race", move || {
        let lock = new();
        assert!(lock.try_lock());
        let first = lock
            .lock_task(noop_waker())
            .expect("the lock is held, so the task queues");
        let second = lock
            .lock_task(noop_waker())
            .expect("the lock is held, so the task queues");
        let holder = {
            let lock = lock.clone();
            thread::spawn(move || assert!(lock.unlock()))
        };
        let left = first.abandon();
        holder.join().unwrap();
        if left {
            assert!(!first.granted());
        } else {
            assert!(
                first.granted(),
                "abandon said granted, but the waiter is not"
            );
            assert!(!second.granted(), "two tasks were granted one lock");
            assert!(lock.unlock());
        }
        assert!(
            second.granted(),
            "the task behind the one that left was stranded"
        );
        assert!(
            !second.abandon(),
            "a granted task cannot leave without the lock"
        );
        assert!(lock.unlock());
        assert_free(&lock);
    });
}

#[test]
fn loom_grant_abandon_race_fair() {
    grant_abandon_race(Lock::fair);
}

#[test]
fn loom_grant_abandon_race_barging() {
    grant_abandon_race(Lock::new);
}

/// A blocked thread's token is cancelled just as the holder unlocks: the waiter either
/// acquires or fails with the reason, never both, and the lock ends free. `acquire` is
/// how the waiter blocks. The token is the real one, built on std's primitives, which
/// loom does not model: it explores the lock's side of the race (the grant against the
/// waiter woken by the cancel), not interleavings inside the token (`loom_task.rs` models
/// the cancel as a loom flag for that).
fn grant_cancel_race(
    name: &str,
    new: fn() -> Lock,
    acquire: fn(&Lock, &CancelToken) -> Result<(), AcquireError<std::convert::Infallible>>,
) {
    model(name, move || {
        let lock = new();
        let token = CancelToken::default();
        assert!(lock.try_lock());
        let waiter = {
            let (lock, token) = (lock.clone(), token.clone());
            thread::spawn(move || match acquire(&lock, &token) {
                Ok(()) => assert!(lock.unlock()),
                Err(AcquireError::Cancelled(r)) => assert_eq!(label(&r), "cancel"),
                Err(e) => panic!("unexpected {e:?}"),
            })
        };
        let canceller = {
            let token = token.clone();
            thread::spawn(move || {
                token.cancel(reason("cancel"));
            })
        };
        assert!(lock.unlock());
        waiter.join().unwrap();
        canceller.join().unwrap();
        assert_eq!(
            token.registrations(),
            0,
            "the waiter left its wake-up registered"
        );
        assert_free(&lock);
    });
}

#[test]
fn loom_grant_cancel_race() {
    grant_cancel_race("grant_cancel_race", Lock::fair, |lock, token| {
        lock.lock(until_cancelled(token))
    });
}

/// The same with a barging lock and a waiter that competes `Later`: the cancel may come
/// while the release has woken it and it keeps its place in the queue.
#[test]
fn loom_grant_cancel_race_competing_later() {
    grant_cancel_race(
        "grant_cancel_race_competing_later",
        Lock::new,
        |lock, token| lock_competing_later(lock, until_cancelled(token)),
    );
}

/// A queued task's wait is settled exactly once: the task finishes it (its doorbell
/// rang) while its doorbell gives it up (the loop is gone) and the holder unlocks,
/// granting it. Whoever settles first decides: `finish` returns the lock (the task
/// releases it), a timeout without it, or `Abandoned` when the doorbell settled first
/// (then a grant was passed on). The lock is never leaked or released twice.
fn task_settles_once(new: fn() -> Lock) {
    model("task_settles_once", move || {
        let lock = new();
        assert!(lock.try_lock());
        let task = Arc::new(
            lock.lock_task(noop_waker())
                .expect("the lock is held, so the task queues"),
        );
        let holder = {
            let lock = lock.clone();
            thread::spawn(move || assert!(lock.unlock()))
        };
        let doorbell = {
            let task = task.clone();
            thread::spawn(move || task.give_up())
        };
        match task.finish::<()>() {
            Ok(()) => assert!(lock.unlock(), "finish said held, but the lock is not"),
            Err(AcquireError::Timeout) | Err(AcquireError::Abandoned) => {}
            Err(e) => panic!("unexpected {e:?}"),
        }
        holder.join().unwrap();
        doorbell.join().unwrap();
        drop(task);
        assert_free(&lock);
    });
}

#[test]
fn loom_task_settles_once_fair() {
    task_settles_once(Lock::fair);
}

#[test]
fn loom_task_settles_once_barging() {
    task_settles_once(Lock::new);
}
