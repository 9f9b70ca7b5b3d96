//! loom models of scoped holds (`LockView::scope_hold`/`unlock_scoped`, Python's `with`):
//! a scoped release gives back a scoped hold or nothing, never a hold owned by someone
//! else, and a count it sees always has its hold in the state word.
//!
//! `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 cargo test --release --test loom_scoped`
#![cfg(loom)]

mod support;

use ctxlock::{forever, Lock, SharableLock};
use loom::sync::Arc;
use loom::thread;
use support::critical::{lock_competing_later, Guarded};
use support::{model, model_exhaustive};

#[test]
fn loom_a_stray_scoped_release_races_a_with() {
    // One thread enters a `with`; another calls `__exit__` at the same time. It either
    // finds no scoped hold (and changes nothing) or releases exactly that one.
    model_exhaustive("stray_scoped_release", || {
        let lock = Lock::new();
        let enter = {
            let lock = lock.clone();
            thread::spawn(move || {
                lock.lock(forever()).unwrap();
                lock.scope_hold();
            })
        };
        let stray = {
            let lock = lock.clone();
            thread::spawn(move || lock.unlock_scoped())
        };
        enter.join().unwrap();
        if stray.join().unwrap() {
            assert!(!lock.is_locked(), "a scoped release left the lock held");
        } else {
            assert!(lock.is_locked(), "a failed scoped release changed the lock");
            assert!(lock.unlock_scoped(), "the with's hold was lost");
        }
        assert!(!lock.unlock_scoped());
        assert!(!lock.is_locked());
    });
}

#[test]
fn loom_scoped_releases_never_take_an_owned_reader() {
    // A reader owned by an `Unlock`, and a `with` reader whose exit is called twice.
    model_exhaustive("scoped_releases_and_an_owned_reader", || {
        let rw = SharableLock::new();
        let owned = {
            let shared = rw.shared().clone();
            thread::spawn(move || shared.lock(forever()).unwrap())
        };
        let scoped = {
            let shared = rw.shared().clone();
            thread::spawn(move || {
                shared.lock(forever()).unwrap();
                shared.scope_hold();
                assert!(shared.unlock_scoped());
                shared.unlock_scoped()
            })
        };
        owned.join().unwrap();
        assert!(
            !scoped.join().unwrap(),
            "a second exit released the owned reader"
        );
        assert_eq!(rw.shared().readers(), 1);
        assert!(!rw.exclusive().try_lock());
        assert!(rw.shared().unlock());
        assert!(rw.exclusive().try_lock());
        assert!(rw.exclusive().unlock());
    });
}

/// A scoped hold taken in one CAS (`try_lock_scoped`) and ended by its own thread races
/// an owner that waits for the lock and a stray scoped release: the scoped hold ends
/// exactly once, the owner's hold is never taken for it, and the lock ends free.
fn one_step_scoped_hold(lock: Lock) {
    let owner = {
        let lock = lock.clone();
        thread::spawn(move || {
            lock.lock(forever()).unwrap();
            assert!(lock.unlock(), "a scoped release took the owner's hold");
        })
    };
    let scoped = {
        let lock = lock.clone();
        thread::spawn(move || {
            let took = lock.try_lock_scoped();
            (took, took && lock.unlock_scoped())
        })
    };
    let stray = lock.unlock_scoped();
    let (took, ended_by_itself) = scoped.join().unwrap();
    assert_eq!(
        took,
        stray || ended_by_itself,
        "a scoped release without a scoped hold"
    );
    assert!(
        !(stray && ended_by_itself),
        "one scoped hold released twice"
    );
    owner.join().unwrap();
    assert!(!lock.unlock_scoped());
    assert!(!lock.is_locked());
}

#[test]
fn loom_a_one_step_scoped_hold_races_an_owner_and_a_stray_release() {
    model_exhaustive("one_step_scoped_hold", || one_step_scoped_hold(Lock::new()));
}

#[test]
fn loom_a_one_step_scoped_hold_of_a_fair_lock_races_an_owner_and_a_stray_release() {
    model_exhaustive("one_step_scoped_hold_fair", || {
        one_step_scoped_hold(Lock::fair())
    });
}

/// A `with` as the binding runs it: the one-step take, else a wait that competes `Later`
/// and then `scope_hold`; the critical section; the scoped release.
fn with_block(lock: &Lock, data: &Guarded) {
    if !lock.try_lock_scoped() {
        lock_competing_later(lock, forever()).unwrap();
        lock.scope_hold();
    }
    data.critical_section();
    assert!(lock.unlock_scoped(), "a with's hold was lost");
}

/// Two `with` blocks and an owner on a barging lock, each waiting by competing `Later`:
/// a scoped hold may be barged in while a woken waiter is away, so its release takes the
/// claim's away branch. Exclusion and the critical section's updates must hold, and the
/// lock must end free.
#[test]
fn loom_with_blocks_and_an_owner_competing_later() {
    model("with_blocks_and_an_owner_competing_later", || {
        let lock = Lock::new();
        let data = Arc::new(Guarded::default());
        let others: Vec<_> = (0..2)
            .map(|i| {
                let (lock, data) = (lock.clone(), data.clone());
                thread::spawn(move || {
                    if i == 0 {
                        with_block(&lock, &data);
                    } else {
                        lock_competing_later(&lock, forever()).unwrap();
                        data.critical_section();
                        assert!(lock.unlock(), "the owner's hold was lost");
                    }
                })
            })
            .collect();
        with_block(&lock, &data);
        for t in others {
            t.join().unwrap();
        }
        assert_eq!(data.count(), 3);
        assert!(!lock.unlock_scoped());
        assert!(!lock.is_locked());
        assert_eq!(lock.queued(), 0);
    });
}
