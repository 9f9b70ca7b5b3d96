//! Exclusive holds with an id (invariant 7 in `core/state.rs`): a release that names the
//! id ends that hold and no other, once, however many calls race. (An `Unlock` whose
//! hold decides so: the unit tests of `core/unlock.rs`.)
//!
//! Tests that block with `forever()` run under `support::watchdog`, and waits for another
//! thread are bounded by `support::PATIENCE`: a lost wake-up fails instead of hanging.
#![cfg(not(loom))] // loom's types only work inside `loom::model`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;

mod support;

use ctxlock::{forever, SharableLock};
use support::{exclusive_views, wait_until, watchdog};

const ROUNDS: usize = if cfg!(miri) { 10 } else { 2_000 };

#[test]
fn test_a_release_with_an_id_ends_its_own_hold_once() {
    for view in exclusive_views() {
        let id = view.try_lock_with_id().expect("a free lock");
        assert!(view.holds_id(id));
        assert!(view.try_lock_with_id().is_none(), "taken twice");
        assert!(view.unlock_with_id(id));
        assert!(!view.holds_id(id));
        assert!(!view.is_locked());
        assert!(!view.unlock_with_id(id), "a second release of one hold");
        assert!(!view.is_locked());
    }
}

#[test]
fn test_a_stale_id_never_ends_a_later_hold() {
    for view in exclusive_views() {
        let first = view.try_lock_with_id().unwrap();
        assert!(view.unlock_with_id(first));
        // A later hold with an id, then one without.
        let second = view.try_lock_with_id().unwrap();
        assert_ne!(first, second);
        assert!(!view.unlock_with_id(first));
        assert!(view.holds_id(second));
        assert!(view.unlock_with_id(second));
        assert!(view.try_lock());
        assert!(!view.unlock_with_id(second));
        assert!(view.is_locked(), "a stale id ended a hold without one");
        assert!(view.unlock());
    }
}

#[test]
fn test_no_id_but_one_taken_releases_anything() {
    let rw = SharableLock::new();
    assert_eq!(
        rw.shared().try_lock_with_id(),
        None,
        "a reader's hold has no id"
    );
    assert!(!rw.shared().is_locked() && !rw.exclusive().is_locked());
    for view in exclusive_views() {
        assert!(view.try_lock());
        assert!(!view.unlock_with_id(0), "id 0 ended a hold without one");
        assert!(view.is_locked());
        assert!(view.unlock());
        let id = view.try_lock_with_id().unwrap();
        assert!(!view.unlock_with_id(id | 1), "flag bits taken for an id");
        assert!(view.holds_id(id));
        assert!(view.unlock_with_id(id));
    }
}

#[test]
fn test_a_readers_release_never_touches_a_writers_id() {
    // The id sits in the bits of the reader count: a stray release of a reader must see
    // no readers there, and leave the id as it is.
    let rw = SharableLock::new();
    let id = rw.exclusive().try_lock_with_id().unwrap();
    assert_eq!(rw.shared().readers(), 0);
    assert!(!rw.shared().is_locked());
    assert!(!rw.shared().unlock());
    assert!(!rw.shared().try_lock());
    assert!(rw.exclusive().holds_id(id));
    assert!(rw.exclusive().unlock_with_id(id));
    assert!(rw.shared().try_lock());
    assert!(rw.exclusive().try_lock_with_id().is_none());
    assert!(rw.shared().unlock());
}

#[test]
fn test_a_hold_with_an_id_hands_over_to_a_waiter() {
    let _watchdog = watchdog("test_a_hold_with_an_id_hands_over_to_a_waiter");
    // With a waiter queued the release goes through the queue: the waiter gets the lock,
    // and a second release of the first hold leaves the waiter's hold alone. (Racing
    // releases that both reach the queue: the racing test below and the loom models.)
    for view in exclusive_views() {
        let id = view.try_lock_with_id().unwrap();
        let waiter = {
            let view = view.clone();
            thread::spawn(move || {
                view.lock(forever()).unwrap();
                view
            })
        };
        wait_until("the waiter queued", || view.queued() > 0);
        assert!(view.unlock_with_id(id));
        let view = waiter.join().unwrap();
        assert!(
            !view.unlock_with_id(id),
            "a second release ended the waiter's hold"
        );
        assert!(view.is_locked());
        assert!(view.unlock());
        assert!(!view.is_locked());
    }
}

#[test]
fn test_racing_releases_of_one_id_end_one_hold_and_never_the_next() {
    let _watchdog = watchdog("test_racing_releases_of_one_id_end_one_hold_and_never_the_next");
    // Two threads release one hold at once while a third takes the lock as soon as it
    // is free: one release ends the hold, and the third's hold survives the other.
    for view in exclusive_views() {
        for _ in 0..ROUNDS {
            let id = view.try_lock_with_id().unwrap();
            let start = Arc::new(Barrier::new(3));
            let released = Arc::new(AtomicUsize::new(0));
            let racers: Vec<_> = (0..2)
                .map(|_| {
                    let (view, start, released) = (view.clone(), start.clone(), released.clone());
                    thread::spawn(move || {
                        start.wait();
                        if view.unlock_with_id(id) {
                            released.fetch_add(1, Ordering::Relaxed);
                        }
                    })
                })
                .collect();
            let taker = {
                let (view, start) = (view.clone(), start.clone());
                thread::spawn(move || {
                    start.wait();
                    view.lock(forever()).unwrap();
                })
            };
            for r in racers {
                r.join().unwrap();
            }
            taker.join().unwrap();
            assert_eq!(released.load(Ordering::Relaxed), 1);
            assert!(view.is_locked(), "a second release ended the next hold");
            assert!(view.unlock());
        }
    }
}
