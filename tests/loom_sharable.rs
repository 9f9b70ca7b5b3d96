//! loom models of `SharableLock`: a reader group beside a writer, the phase change when
//! a writer unlocks, and a waiting writer that gives up while readers hold.
//!
//! `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 cargo test --release --test loom_sharable`
//!
//! See `loom_lock.rs` for what loom does and does not model here.
#![cfg(loom)]

mod support;

use ctxlock::{forever, LockView, SharableLock};
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;
use support::{model, model_exhaustive, noop_waker};

/// Who is inside, and the data a writer updates.
#[derive(Default)]
struct Inside {
    /// Readers count 1 each, a writer `WRITER`: one word, so that RMWs on it see every
    /// overlap whatever the lock's orderings (they read the latest value).
    holders: AtomicUsize,
    /// Written by writers with a plain load and store; only the lock orders it.
    data: AtomicUsize,
}

const WRITER: usize = 1 << 16;

impl Inside {
    fn read(&self, view: &LockView) -> usize {
        view.lock(forever()).unwrap();
        // ORDERING: Relaxed RMW; see `holders`.
        let before = self.holders.fetch_add(1, Ordering::Relaxed);
        assert!(before < WRITER, "a reader beside a writer");
        // ORDERING: Relaxed; only the lock makes the last writer's store visible.
        let seen = self.data.load(Ordering::Relaxed);
        // ORDERING: Relaxed RMW; see `holders`.
        self.holders.fetch_sub(1, Ordering::Relaxed);
        assert!(view.unlock());
        seen
    }

    fn write(&self, view: &LockView) {
        view.lock(forever()).unwrap();
        // ORDERING: Relaxed RMW; see `holders`.
        let before = self.holders.fetch_add(WRITER, Ordering::Relaxed);
        assert_eq!(before, 0, "a writer beside another holder");
        // ORDERING: Relaxed load and store: only the lock keeps an update from being lost.
        let n = self.data.load(Ordering::Relaxed);
        // ORDERING: as above.
        self.data.store(n + 1, Ordering::Relaxed);
        // ORDERING: Relaxed RMW; see `holders`.
        self.holders.fetch_sub(WRITER, Ordering::Relaxed);
        assert!(view.unlock());
    }

    fn data(&self) -> usize {
        // ORDERING: read after the threads are joined; join orders it.
        self.data.load(Ordering::Relaxed)
    }
}

fn assert_free(lock: &SharableLock) {
    assert!(
        !lock.exclusive().is_locked() && lock.shared().readers() == 0,
        "still held"
    );
    assert_eq!(lock.shared().queued(), 0, "a waiter was left in the queue");
    assert!(lock.exclusive().try_lock(), "a free lock cannot be taken");
    assert!(lock.exclusive().unlock());
}

/// Two readers and a writer: readers never overlap the writer, and a reader sees either
/// none or all of the writer's update.
#[test]
fn loom_readers_and_a_writer_exclude() {
    model("readers_and_a_writer_exclude", || {
        let lock = SharableLock::new();
        let inside = Arc::new(Inside::default());
        let writer = {
            let (lock, inside) = (lock.clone(), inside.clone());
            thread::spawn(move || inside.write(lock.exclusive()))
        };
        let reader = {
            let (lock, inside) = (lock.clone(), inside.clone());
            thread::spawn(move || inside.read(lock.shared()))
        };
        let seen = inside.read(lock.shared());
        assert!(seen <= 1);
        assert!(reader.join().unwrap() <= 1);
        writer.join().unwrap();
        assert_eq!(inside.data(), 1);
        assert_free(&lock);
    });
}

/// A writer holds while a reader and a second writer come (in any order, queued or not
/// yet): the phase change when it unlocks never lets the reader beside the second
/// writer, and both see the first writer's update. (The order itself is checked
/// deterministically in `sharable.rs`.)
#[test]
fn loom_phase_change_on_exclusive_unlock() {
    model("phase_change_on_exclusive_unlock", || {
        let lock = SharableLock::new();
        let inside = Arc::new(Inside::default());
        assert!(lock.exclusive().try_lock());
        let reader = {
            let (lock, inside) = (lock.clone(), inside.clone());
            thread::spawn(move || inside.read(lock.shared()))
        };
        let writer = {
            let (lock, inside) = (lock.clone(), inside.clone());
            thread::spawn(move || inside.write(lock.exclusive()))
        };
        // ORDERING: Relaxed; published by the unlock below.
        inside.data.store(1, Ordering::Relaxed);
        assert!(lock.exclusive().unlock());
        let seen = reader.join().unwrap();
        writer.join().unwrap();
        assert!(
            seen == 1 || seen == 2,
            "the reader missed the first writer's update"
        );
        assert_eq!(inside.data(), 2);
        assert_free(&lock);
    });
}

/// A reader holds; a writer task and a reader task queue behind it. The writer gives up
/// just as the reader unlocks. Whichever wins, the writer ends up either holding the lock
/// or gone, and the queued reader is granted (at once if the writer left while the
/// first reader still held, or when the writer unlocks).
#[test]
fn loom_writer_abandon_races_the_last_reader() {
    model_exhaustive("writer_abandon_races_the_last_reader", || {
        let lock = SharableLock::new();
        assert!(lock.shared().try_lock());
        let writer = lock
            .exclusive()
            .lock_task(noop_waker())
            .expect("readers hold: it queues");
        let reader = lock
            .shared()
            .lock_task(noop_waker())
            .expect("a writer waits: it queues");
        let last_reader = {
            let lock = lock.clone();
            thread::spawn(move || assert!(lock.shared().unlock()))
        };
        let left = writer.abandon();
        if left {
            // Either the first reader still held, and the writer's leaving let the queued
            // reader join it, or the first reader had left, and its unlock granted the
            // queued reader (the writer being gone by then). Both happened by now.
            assert!(
                reader.granted(),
                "the writer left but the reader was not let in"
            );
        }
        last_reader.join().unwrap();
        if !left {
            assert!(writer.granted());
            assert!(!reader.granted(), "a reader was granted beside the writer");
            assert!(lock.exclusive().unlock());
        }
        assert!(reader.granted(), "the queued reader was stranded");
        assert_eq!(lock.shared().readers(), 1);
        assert!(lock.shared().unlock());
        assert_free(&lock);
    });
}

/// The last reader leaves (slow path) while a writer queues for the slot: the writer is
/// never left parked on a free slot.
#[test]
fn loom_last_reader_out_hands_off_to_a_queueing_writer() {
    model_exhaustive("last_reader_out_hands_off_to_a_queueing_writer", || {
        let lock = SharableLock::new();
        let inside = Arc::new(Inside::default());
        assert!(lock.shared().try_lock());
        let writer = {
            let (lock, inside) = (lock.clone(), inside.clone());
            thread::spawn(move || inside.write(lock.exclusive()))
        };
        assert!(lock.shared().unlock());
        writer.join().unwrap();
        assert_eq!(inside.data(), 1);
        assert_free(&lock);
    });
}

/// Two writers and a reader, all blocking: writer hand-off, and the phase changes both
/// ways, with a queue of two.
#[test]
fn loom_two_writers_and_a_reader() {
    model("two_writers_and_a_reader", || {
        let lock = SharableLock::new();
        let inside = Arc::new(Inside::default());
        let writers: Vec<_> = (0..2)
            .map(|_| {
                let (lock, inside) = (lock.clone(), inside.clone());
                thread::spawn(move || inside.write(lock.exclusive()))
            })
            .collect();
        assert!(inside.read(lock.shared()) <= 2);
        for w in writers {
            w.join().unwrap();
        }
        assert_eq!(inside.data(), 2);
        assert_free(&lock);
    });
}
