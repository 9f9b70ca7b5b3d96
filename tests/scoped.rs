//! Scoped holds (Python's `with`): released only by `unlock_scoped`, which never gives
//! back a hold owned by someone else, in either mode.
//!
//! Tests that block with `forever()` run under `support::watchdog`, and waits for another
//! thread are bounded by `support::PATIENCE`: a lost wake-up fails instead of hanging.
#![cfg(not(loom))] // loom's types only work inside `loom::model`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;

mod support;

use ctxlock::{forever, Lock, SharableLock};
use support::{exclusive_views, wait_until, watchdog};

#[test]
fn test_unlock_scoped_never_releases_an_unscoped_hold() {
    for view in exclusive_views() {
        assert!(view.try_lock());
        assert!(!view.unlock_scoped());
        assert!(view.is_locked());
        assert!(view.unlock());
        assert!(view.try_lock());
        view.scope_hold();
        assert!(view.unlock_scoped());
        assert!(!view.unlock_scoped());
        assert!(!view.is_locked());
    }
}

#[test]
fn test_scoped_readers_are_counted_apart_from_owned_ones() {
    let rw = SharableLock::new();
    let shared = rw.shared();
    assert!(shared.try_lock()); // owned (an Unlock's)
    assert!(shared.try_lock());
    shared.scope_hold();
    assert!(
        !rw.exclusive().unlock_scoped(),
        "the views count separately"
    );
    assert!(shared.unlock_scoped());
    assert!(!shared.unlock_scoped(), "the owned reader hold must stay");
    assert_eq!(shared.readers(), 1);
    assert!(!rw.exclusive().try_lock());
    assert!(shared.unlock());
    assert!(rw.exclusive().try_lock());
    assert!(rw.exclusive().unlock());
}

#[test]
fn test_stray_scoped_releases_never_break_exclusion() {
    let _watchdog = watchdog("test_stray_scoped_releases_never_break_exclusion");
    // Owners take and release their own holds; another thread keeps calling
    // `unlock_scoped` (a misused `__exit__`). Exclusion must hold throughout.
    let lock = Lock::new();
    let inside = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicUsize::new(0));
    let stray = {
        let lock = lock.clone();
        let stop = stop.clone();
        thread::spawn(move || {
            let mut released = 0;
            while stop.load(Ordering::Relaxed) == 0 {
                released += usize::from(lock.unlock_scoped());
                thread::yield_now();
            }
            released
        })
    };
    let owners: Vec<_> = (0..3)
        .map(|_| {
            let lock = lock.clone();
            let inside = inside.clone();
            thread::spawn(move || {
                for _ in 0..2000 {
                    lock.lock(forever()).unwrap();
                    assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "exclusion lost");
                    thread::yield_now();
                    inside.fetch_sub(1, Ordering::SeqCst);
                    assert!(lock.unlock());
                }
            })
        })
        .collect();
    for o in owners {
        o.join().unwrap();
    }
    stop.store(1, Ordering::Relaxed);
    assert_eq!(stray.join().unwrap(), 0);
    assert!(!lock.is_locked());
}

#[test]
fn test_a_scoped_hold_taken_in_one_step_is_released_only_by_unlock_scoped() {
    for view in exclusive_views() {
        assert!(view.try_lock_scoped());
        assert!(
            !view.try_lock_scoped(),
            "a second scoped hold of an exclusive lock"
        );
        assert!(!view.try_lock());
        assert!(view.unlock_scoped());
        assert!(!view.unlock_scoped());
        assert!(!view.is_locked());
        // An owned hold is never taken for a scoped one.
        assert!(view.try_lock());
        assert!(!view.unlock_scoped());
        assert!(view.unlock());
    }
    let rw = SharableLock::new();
    assert!(rw.shared().try_lock()); // owned
    assert!(rw.shared().try_lock_scoped());
    assert!(!rw.exclusive().try_lock_scoped());
    assert!(rw.shared().unlock_scoped());
    assert!(
        !rw.shared().unlock_scoped(),
        "the owned reader was released"
    );
    assert_eq!(rw.shared().readers(), 1);
    assert!(rw.shared().unlock());
}

#[test]
fn test_a_scoped_release_hands_the_lock_to_a_waiting_owner_and_never_takes_its_hold() {
    let _watchdog = watchdog(
        "test_a_scoped_release_hands_the_lock_to_a_waiting_owner_and_never_takes_its_hold",
    );
    for view in exclusive_views() {
        assert!(view.try_lock_scoped());
        let owner = {
            let view = view.clone();
            thread::spawn(move || {
                view.lock(forever()).unwrap();
                view
            })
        };
        // The owner queues behind the scoped hold: its release goes past the one-CAS path.
        wait_until("the waiter queued", || view.queued() > 0);
        assert!(view.unlock_scoped());
        let view = owner.join().unwrap();
        assert!(view.is_locked());
        assert!(
            !view.unlock_scoped(),
            "a scoped release took the owner's hold"
        );
        assert!(view.unlock());
        assert!(!view.is_locked());
    }
}

#[test]
fn test_stray_scoped_releases_never_take_an_owned_hold_among_scoped_ones() {
    let _watchdog =
        watchdog("test_stray_scoped_releases_never_take_an_owned_hold_among_scoped_ones");
    // Owners and `with` holders (a one-step scoped take, or a wait then `scope_hold`)
    // share the lock while another thread keeps calling `unlock_scoped`: it may end a
    // scoped hold (that is what a misused `__exit__` does), never an owned one.
    let lock = Lock::new();
    let stop = Arc::new(AtomicUsize::new(0));
    let stray = {
        let lock = lock.clone();
        let stop = stop.clone();
        thread::spawn(move || {
            while stop.load(Ordering::Relaxed) == 0 {
                lock.unlock_scoped();
                thread::yield_now();
            }
        })
    };
    let workers: Vec<_> = (0..3)
        .map(|i| {
            let lock = lock.clone();
            thread::spawn(move || {
                for round in 0..2000 {
                    match (i + round) % 3 {
                        0 => {
                            lock.lock(forever()).unwrap();
                            thread::yield_now();
                            assert!(lock.unlock(), "an owned hold was released by another");
                        }
                        1 => {
                            if lock.try_lock_scoped() {
                                lock.unlock_scoped();
                            }
                        }
                        _ => {
                            lock.lock(forever()).unwrap();
                            lock.scope_hold();
                            lock.unlock_scoped();
                        }
                    }
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    stop.store(1, Ordering::Relaxed);
    stray.join().unwrap();
    assert!(!lock.unlock_scoped());
    assert!(!lock.is_locked());
}
