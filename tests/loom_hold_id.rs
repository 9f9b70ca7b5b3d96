//! loom models of exclusive holds with an id (invariant 7 in `core/state.rs`): two
//! releases that name one id race each other and an owner waiting for the lock; one of
//! them ends the hold, the other ends nothing, and the owner's hold (which has no id) is
//! never taken for it. The critical section checks exclusion and the releases' ordering.
//!
//! `RUSTFLAGS="--cfg loom" cargo test --release --test loom_hold_id` (bound 3, set here)
#![cfg(loom)]

mod support;

use ctxlock::{forever, Lock, SharableLock};
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;
use support::critical::{lock_competing_later, Guarded};
use support::model_bounded;

/// The preemptions the models explore: a stale release that finds a barged hold while
/// the woken owner is away takes three (found by taking the id check out of
/// `release_with_id`'s slow path), and each model still runs in well under a second.
const PREEMPTIONS: usize = 3;

fn racing_releases_and_an_owner(lock: Lock, competes_later: bool, barges: bool) {
    let data = Arc::new(Guarded::default());
    let id = lock.try_lock_with_id().expect("a free lock");
    data.critical_section();
    let released = Arc::new(AtomicUsize::new(0));
    let owner = {
        let (lock, data) = (lock.clone(), data.clone());
        thread::spawn(move || {
            if competes_later {
                lock_competing_later(&lock, forever()).unwrap();
            } else {
                lock.lock(forever()).unwrap();
            }
            data.critical_section();
            assert!(lock.unlock(), "the owner's hold was taken");
        })
    };
    let second = {
        let (lock, released) = (lock.clone(), released.clone());
        thread::spawn(move || {
            if lock.unlock_with_id(id) {
                // ORDERING: Relaxed: a count read after the join.
                released.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    if lock.unlock_with_id(id) {
        // ORDERING: as above.
        released.fetch_add(1, Ordering::Relaxed);
    }
    // A hold without an id barged in, perhaps while the woken owner is away (`AWAY`):
    // the release that lost must not end it either.
    let barged = barges && lock.try_lock();
    if barged {
        data.critical_section();
        assert!(lock.unlock(), "the barged hold was taken");
    }
    second.join().unwrap();
    owner.join().unwrap();
    // ORDERING: the joins order it.
    assert_eq!(
        released.load(Ordering::Relaxed),
        1,
        "one hold released twice or never"
    );
    assert_eq!(data.count(), 2 + usize::from(barged));
    assert!(!lock.unlock_with_id(id));
    assert!(!lock.is_locked());
}

#[test]
fn loom_racing_releases_of_one_id_and_a_waiting_owner() {
    model_bounded("racing_id_releases_barging", PREEMPTIONS, || {
        racing_releases_and_an_owner(Lock::new(), false, false)
    });
}

#[test]
fn loom_racing_releases_of_one_id_and_an_owner_competing_later() {
    // The woken owner away competing: the releases' one-CAS branch (`AWAY`).
    model_bounded("racing_id_releases_competing_later", PREEMPTIONS, || {
        racing_releases_and_an_owner(Lock::new(), true, false)
    });
}

#[test]
fn loom_racing_releases_of_one_id_an_owner_competing_later_and_a_barging_hold() {
    // A hold without an id barges in while the woken owner is away: the release that
    // lost finds `WRITER | AWAY` and must leave that hold alone.
    model_bounded("racing_id_releases_barging_hold", PREEMPTIONS, || {
        racing_releases_and_an_owner(Lock::new(), true, true)
    });
}

#[test]
fn loom_an_id_hold_barged_in_while_the_owner_is_away() {
    // A hold with an id barges in while the woken owner is away (`AWAY`): its release
    // takes the one-CAS branch, which must clear the id with `WRITER`, or the slot would
    // read as held for good (found by leaving the id behind: a deadlock here).
    model_bounded("id_hold_barged_in_while_away", PREEMPTIONS, || {
        let lock = Lock::new();
        let data = Arc::new(Guarded::default());
        let first = lock.try_lock_with_id().unwrap();
        let owner = {
            let (lock, data) = (lock.clone(), data.clone());
            thread::spawn(move || {
                lock_competing_later(&lock, forever()).unwrap();
                data.critical_section();
                assert!(lock.unlock(), "the owner's hold was taken");
            })
        };
        assert!(lock.unlock_with_id(first));
        let barged = lock.try_lock_with_id();
        if let Some(id) = barged {
            data.critical_section();
            assert!(lock.unlock_with_id(id));
            assert!(!lock.unlock_with_id(id));
        }
        owner.join().unwrap();
        assert_eq!(data.count(), 1 + usize::from(barged.is_some()));
        assert!(!lock.is_locked());
    });
}

#[test]
fn loom_racing_releases_of_one_id_and_a_waiting_owner_fair() {
    // Hand-off: the release that ends the hold passes the slot on under the queue mutex.
    model_bounded("racing_id_releases_fair", PREEMPTIONS, || {
        racing_releases_and_an_owner(Lock::fair(), false, false)
    });
}

#[test]
fn loom_racing_releases_of_one_id_and_a_waiting_reader() {
    // The id sits in the reader-count bits: the reader let in by the release must count
    // as one reader, and the release that loses must not end its hold.
    model_bounded("racing_id_releases_reader", PREEMPTIONS, || {
        let rw = SharableLock::new();
        let id = rw.exclusive().try_lock_with_id().unwrap();
        let reader = {
            let shared = rw.shared().clone();
            thread::spawn(move || {
                shared.lock(forever()).unwrap();
                assert_eq!(shared.readers(), 1);
                assert!(shared.unlock(), "the reader's hold was taken");
            })
        };
        let second = {
            let exclusive = rw.exclusive().clone();
            thread::spawn(move || exclusive.unlock_with_id(id))
        };
        let first = rw.exclusive().unlock_with_id(id);
        let second = second.join().unwrap();
        reader.join().unwrap();
        assert!(first ^ second, "one hold released twice or never");
        assert!(!rw.shared().is_locked());
        assert!(!rw.exclusive().is_locked());
    });
}
