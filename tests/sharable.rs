//! `SharableLock` through the public API: the reader group, exclusion, phase-fair order,
//! a waiting writer that gives up, and the lockout attacks phase fairness rules out.
//!
//! Waits for another thread are bounded by `support::PATIENCE`, and tests that block
//! with `forever()` run under `support::watchdog`, so a lost wake-up fails the test
//! instead of hanging it. No test measures speed.
#![cfg(not(loom))] // loom's types only work inside `loom::model`: see `loom_sharable.rs`.

mod support;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Barrier;
use std::thread;
use std::time::Duration;

use ctxlock::{forever, AcquireError, CancelToken, LockView, SharableLock, TaskWait};
use support::{
    for_at_most, label, noop_waker, reason, until_cancelled, wait_until, watchdog, PATIENCE,
};

/// Who is inside, checked on every entry: readers count 1 each, a writer `WRITER`, in
/// one word, so every overlap shows in the value an RMW returns.
#[derive(Default)]
struct Inside(AtomicUsize);

const WRITER: usize = 1 << 16;

impl Inside {
    fn reader_enters(&self) {
        // ORDERING: SeqCst; a test counter, kept simple.
        let before = self.0.fetch_add(1, Ordering::SeqCst);
        assert!(before < WRITER, "a reader beside a writer");
    }

    fn reader_leaves(&self) {
        // ORDERING: as in `reader_enters`.
        self.0.fetch_sub(1, Ordering::SeqCst);
    }

    fn writer_enters(&self) {
        // ORDERING: as in `reader_enters`.
        let before = self.0.fetch_add(WRITER, Ordering::SeqCst);
        assert_eq!(before, 0, "a writer beside another holder");
    }

    fn writer_leaves(&self) {
        // ORDERING: as in `reader_enters`.
        self.0.fetch_sub(WRITER, Ordering::SeqCst);
    }
}

fn assert_free(lock: &SharableLock) {
    let (shared, exclusive) = (lock.shared(), lock.exclusive());
    assert!(
        !exclusive.is_locked() && shared.readers() == 0,
        "the lock is still held"
    );
    assert_eq!(shared.queued(), 0, "a waiter was left in the queue");
    assert!(exclusive.try_lock(), "a free lock cannot be taken");
    assert!(exclusive.unlock());
}

fn queue_task(view: &LockView) -> TaskWait {
    view.lock_task(noop_waker())
        .expect("the lock is held, so the task queues")
}

#[test]
fn test_views_share_one_slot() {
    let lock = SharableLock::default();
    let (shared, exclusive) = (lock.shared(), lock.exclusive());
    assert!(shared.same_slot(exclusive));
    assert_eq!(
        (shared.mode(), exclusive.mode()),
        (ctxlock::Mode::Shared, ctxlock::Mode::Exclusive)
    );
    assert!(shared.try_lock());
    assert!(shared.is_locked() && !exclusive.is_locked());
    assert!(shared.unlock());
    assert!(exclusive.try_lock());
    assert!(exclusive.is_locked() && !shared.is_locked());
    assert!(exclusive.unlock());
}

#[test]
fn test_shared_holders_overlap() {
    let _watchdog = watchdog("test_shared_holders_overlap");
    const READERS: usize = 4;
    let lock = SharableLock::new();
    assert!(lock.shared().try_lock() && lock.shared().try_lock());
    assert_eq!(lock.shared().readers(), 2);
    assert!(
        !lock.exclusive().try_lock(),
        "a writer got in beside readers"
    );
    assert!(lock.shared().unlock() && lock.shared().unlock());

    // Each reader waits inside until all are inside: this ends only if they overlap.
    let inside = AtomicUsize::new(0);
    thread::scope(|s| {
        for _ in 0..READERS {
            s.spawn(|| {
                lock.shared().lock(forever()).unwrap();
                // ORDERING: SeqCst; a test counter.
                inside.fetch_add(1, Ordering::SeqCst);
                wait_until("every reader is inside", || {
                    inside.load(Ordering::SeqCst) == READERS
                });
                assert!(lock.shared().unlock());
            });
        }
    });
    assert_free(&lock);
}

#[test]
fn test_exclusive_excludes_readers_and_writers() {
    let _watchdog = watchdog("test_exclusive_excludes_readers_and_writers");
    let lock = SharableLock::new();
    assert!(lock.exclusive().try_lock());
    assert!(!lock.shared().try_lock() && !lock.exclusive().try_lock());
    let r = lock.shared().lock(for_at_most(Duration::from_millis(10)));
    assert!(matches!(r, Err(AcquireError::Timeout)), "{r:?}");
    assert!(lock.exclusive().unlock());

    const ROUNDS: usize = 1_000;
    let inside = Inside::default();
    thread::scope(|s| {
        for t in 0..6 {
            let (lock, inside) = (&lock, &inside);
            s.spawn(move || {
                for _ in 0..ROUNDS {
                    if t < 2 {
                        lock.exclusive().lock(forever()).unwrap();
                        inside.writer_enters();
                        inside.writer_leaves();
                        assert!(lock.exclusive().unlock());
                    } else {
                        lock.shared().lock(forever()).unwrap();
                        inside.reader_enters();
                        thread::yield_now();
                        inside.reader_leaves();
                        assert!(lock.shared().unlock());
                    }
                }
            });
        }
    });
    assert_free(&lock);
}

#[test]
fn test_unlock_in_the_wrong_mode_changes_nothing() {
    let lock = SharableLock::new();
    assert!(!lock.shared().unlock() && !lock.exclusive().unlock());
    assert!(lock.shared().try_lock());
    assert!(
        !lock.exclusive().unlock(),
        "an exclusive unlock released a reader"
    );
    assert_eq!(lock.shared().readers(), 1);
    assert!(lock.shared().unlock());
    assert!(lock.exclusive().try_lock());
    assert!(
        !lock.shared().unlock(),
        "a shared unlock released the writer"
    );
    assert!(lock.exclusive().is_locked());
    assert!(lock.exclusive().unlock());
    assert_free(&lock);
}

#[test]
fn test_cancelled_token_fails_at_once_on_both_sides() {
    let lock = SharableLock::new();
    let token = CancelToken::default();
    token.cancel(reason("early"));
    for view in [lock.shared(), lock.exclusive()] {
        match view.lock(until_cancelled(&token)) {
            Err(AcquireError::Cancelled(r)) => assert_eq!(label(&r), "early"),
            other => panic!("expected Cancelled, got {other:?}"),
        }
    }
    assert_free(&lock);
}

#[test]
fn test_phase_fair_order_with_tasks() {
    // W holds; R1, R2 queue; W2 queues; R3 queues (behind W2).
    let lock = SharableLock::new();
    let (shared, exclusive) = (lock.shared(), lock.exclusive());
    assert!(exclusive.try_lock());
    let r1 = queue_task(shared);
    let r2 = queue_task(shared);
    let w2 = queue_task(exclusive);
    let r3 = queue_task(shared);
    assert!(!shared.try_lock(), "a reader barged past a waiting writer");
    assert_eq!(shared.queued(), 4);

    // Unlock W: every queued reader joins the group, even R3, who came after W2.
    assert!(exclusive.unlock());
    assert!(r1.granted() && r2.granted() && r3.granted());
    assert!(!w2.granted());
    assert_eq!((shared.readers(), shared.queued()), (3, 1));
    assert!(
        !shared.try_lock(),
        "a new reader joined while a writer waits"
    );

    // W2 waits until all three unlock.
    assert!(shared.unlock() && shared.unlock());
    assert!(!w2.granted());
    assert!(shared.unlock());
    assert!(w2.granted() && exclusive.is_locked());
    assert!(exclusive.unlock());
    assert_free(&lock);
}

#[test]
fn test_phase_fair_order_with_threads() {
    let _watchdog = watchdog("test_phase_fair_order_with_threads");
    let lock = SharableLock::new();
    let inside = Inside::default();
    // Which thread holds, and the flags that let each one go.
    let granted: [AtomicBool; 4] = Default::default();
    let release: [AtomicBool; 4] = Default::default();
    let (shared, exclusive) = (lock.shared(), lock.exclusive());
    assert!(exclusive.try_lock());
    thread::scope(|s| {
        // Threads 0, 1, 3 are R1, R2, R3; thread 2 is W2. Each starts once the previous
        // one is queued, so the queue order is known.
        for (i, view) in [shared, shared, exclusive, shared].into_iter().enumerate() {
            let (inside, granted, release) = (&inside, &granted, &release);
            s.spawn(move || {
                view.lock(for_at_most(PATIENCE)).expect("never granted");
                let writer = i == 2;
                if writer {
                    inside.writer_enters()
                } else {
                    inside.reader_enters()
                }
                // ORDERING: SeqCst; test flags, kept simple.
                granted[i].store(true, Ordering::SeqCst);
                wait_until("the test lets this holder go", || {
                    // ORDERING: as above.
                    release[i].load(Ordering::SeqCst)
                });
                if writer {
                    inside.writer_leaves()
                } else {
                    inside.reader_leaves()
                }
                assert!(view.unlock());
            });
            wait_until("the thread queued", || shared.queued() == i + 1);
        }
        // ORDERING: SeqCst; test flags, kept simple.
        let is_granted = |i: usize| granted[i].load(Ordering::SeqCst);
        // ORDERING: as above.
        let let_go = |i: usize| release[i].store(true, Ordering::SeqCst);

        assert!(exclusive.unlock());
        wait_until("R1, R2 and R3 are all granted", || {
            is_granted(0) && is_granted(1) && is_granted(3)
        });
        assert_eq!(shared.readers(), 3);
        let_go(0);
        let_go(1);
        wait_until("R1 and R2 unlocked", || shared.readers() == 1);
        thread::sleep(Duration::from_millis(20));
        assert!(!is_granted(2), "W2 got in while R3 still holds");
        assert_eq!(shared.queued(), 1);
        let_go(3);
        wait_until("W2 is granted", || is_granted(2));
        let_go(2);
    });
    assert_free(&lock);
}

#[test]
fn test_writer_that_times_out_lets_queued_readers_in() {
    let _watchdog = watchdog("test_writer_that_times_out_lets_queued_readers_in");
    // R0 holds throughout. W waits with a deadline; R1 queues behind W. When W times
    // out, R1 joins R0 at once, without waiting for R0 to leave.
    let lock = SharableLock::new();
    assert!(lock.shared().try_lock());
    thread::scope(|s| {
        let writer = s.spawn(|| {
            lock.exclusive()
                .lock(for_at_most(Duration::from_millis(100)))
        });
        wait_until("the writer queued", || lock.shared().queued() == 1);
        let reader = s.spawn(|| lock.shared().lock(for_at_most(PATIENCE)));
        wait_until("the reader queued", || lock.shared().queued() == 2);
        let r = writer.join().unwrap();
        assert!(matches!(r, Err(AcquireError::Timeout)), "{r:?}");
        reader
            .join()
            .unwrap()
            .expect("the reader was not let in when the writer left");
        assert_eq!(lock.shared().readers(), 2, "R0 should still hold beside R1");
    });
    assert!(lock.shared().unlock() && lock.shared().unlock());
    assert_free(&lock);
}

#[test]
fn test_writer_that_is_cancelled_lets_queued_readers_in() {
    let _watchdog = watchdog("test_writer_that_is_cancelled_lets_queued_readers_in");
    let lock = SharableLock::new();
    let token = CancelToken::default();
    assert!(lock.shared().try_lock());
    thread::scope(|s| {
        let writer = s.spawn(|| lock.exclusive().lock(until_cancelled(&token)));
        wait_until("the writer queued", || lock.shared().queued() == 1);
        let reader = queue_task(lock.shared());
        token.cancel(reason("give up"));
        match writer.join().unwrap() {
            Err(AcquireError::Cancelled(r)) => assert_eq!(label(&r), "give up"),
            other => panic!("expected Cancelled, got {other:?}"),
        }
        assert!(
            reader.granted(),
            "the reader was not let in when the writer left"
        );
    });
    assert_eq!(lock.shared().readers(), 2);
    assert!(lock.shared().unlock() && lock.shared().unlock());
    assert_free(&lock);
}

#[test]
fn test_abandoned_writer_task_lets_queued_readers_in() {
    let lock = SharableLock::new();
    assert!(lock.shared().try_lock());
    let writer = queue_task(lock.exclusive());
    let readers = [queue_task(lock.shared()), queue_task(lock.shared())];
    assert!(readers.iter().all(|r| !r.granted()));
    assert!(writer.abandon());
    assert!(readers.iter().all(TaskWait::granted));
    assert_eq!((lock.shared().readers(), lock.shared().queued()), (3, 0));
    // With no writer waiting any more, new readers join again without queueing.
    assert!(lock.shared().try_lock());
    for _ in 0..4 {
        assert!(lock.shared().unlock());
    }
    assert_free(&lock);
}

#[test]
fn test_reader_lockout_is_impossible() {
    let _watchdog = watchdog("test_reader_lockout_is_impossible");
    // Writers take turns without pause; a reader still gets in: when a writer unlocks,
    // every queued reader goes before the next writer.
    let lock = SharableLock::new();
    let inside = Inside::default();
    let done = AtomicBool::new(false);
    thread::scope(|s| {
        for _ in 0..3 {
            s.spawn(|| {
                // ORDERING: Relaxed; a stop flag, it orders nothing.
                while !done.load(Ordering::Relaxed) {
                    lock.exclusive().lock(forever()).unwrap();
                    inside.writer_enters();
                    thread::sleep(Duration::from_micros(50));
                    inside.writer_leaves();
                    assert!(lock.exclusive().unlock());
                }
            });
        }
        for _ in 0..20 {
            lock.shared()
                .lock(for_at_most(PATIENCE))
                .expect("writers locked a reader out");
            inside.reader_enters();
            inside.reader_leaves();
            assert!(lock.shared().unlock());
        }
        // ORDERING: Relaxed; see the load.
        done.store(true, Ordering::Relaxed);
    });
    assert_free(&lock);
}

#[test]
fn test_writer_lockout_is_impossible() {
    let _watchdog = watchdog("test_writer_lockout_is_impossible");
    // Readers overlap without pause, so the reader group would never empty if new
    // readers could keep joining; a waiting writer stops them, and gets in.
    let lock = SharableLock::new();
    let inside = Inside::default();
    let done = AtomicBool::new(false);
    let start = Barrier::new(4);
    thread::scope(|s| {
        for _ in 0..3 {
            s.spawn(|| {
                start.wait();
                // ORDERING: Relaxed; a stop flag, it orders nothing.
                while !done.load(Ordering::Relaxed) {
                    lock.shared().lock(forever()).unwrap();
                    inside.reader_enters();
                    thread::sleep(Duration::from_micros(200));
                    inside.reader_leaves();
                    assert!(lock.shared().unlock());
                }
            });
        }
        start.wait();
        for _ in 0..20 {
            lock.exclusive()
                .lock(for_at_most(PATIENCE))
                .expect("readers locked a writer out");
            inside.writer_enters();
            inside.writer_leaves();
            assert!(lock.exclusive().unlock());
            thread::sleep(Duration::from_micros(500));
        }
        // ORDERING: Relaxed; see the load.
        done.store(true, Ordering::Relaxed);
    });
    assert_free(&lock);
}

#[test]
fn test_grant_abandon_race_with_readers_behind() {
    let _watchdog = watchdog("test_grant_abandon_race_with_readers_behind");
    // A writer task waits behind a reader, readers behind the writer; the writer gives
    // up as the reader unlocks. The readers behind are never stranded.
    let lock = SharableLock::new();
    for i in 0..2_000 {
        assert!(lock.shared().try_lock());
        let writer = queue_task(lock.exclusive());
        let reader = queue_task(lock.shared());
        let go = Barrier::new(2);
        let left = thread::scope(|s| {
            let abandoning = s.spawn(|| {
                go.wait();
                writer.abandon()
            });
            go.wait();
            assert!(lock.shared().unlock());
            abandoning.join().unwrap()
        });
        if !left {
            assert!(writer.granted() && !reader.granted(), "round {i}");
            assert!(lock.exclusive().unlock());
        }
        assert!(
            reader.granted(),
            "the queued reader was stranded (round {i})"
        );
        assert!(lock.shared().unlock());
        assert!(
            !lock.exclusive().is_locked() && lock.shared().readers() == 0,
            "round {i}"
        );
        assert_eq!(lock.shared().queued(), 0, "round {i}");
    }
    assert_free(&lock);
}
