//! `Lock` through the public API: the fast path, exclusion, fairness, deadlines,
//! cancellation tokens, interrupts, `Unlock` and asynchronous (`TaskWait`) waiters.
//!
//! Waits for another thread are bounded by `support::PATIENCE`, and tests that block
//! with `forever()` run under `support::watchdog`, so a lost wake-up fails the test
//! instead of hanging it. No test measures speed.
#![cfg(not(loom))] // loom's types only work inside `loom::model`: see `loom_lock.rs`.

mod support;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Barrier, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use ctxlock::{
    forever, AcquireError, CancelToken, Compete, Interrupt, Lock, TaskWait, Timeout, Unlock, Wait,
    Woken,
};
use support::{
    for_at_most, label, noop_waker, reason, until_cancelled, wait_until, watchdog, CountingWaker,
    PATIENCE,
};

/// Both kinds of `Lock`; most properties hold for either.
fn both() -> [Lock; 2] {
    [Lock::new(), Lock::fair()]
}

/// Counts holders inside a critical section; entering beside another holder fails.
#[derive(Default)]
struct Holders(AtomicUsize);

impl Holders {
    fn enter(&self) {
        // ORDERING: SeqCst; a test counter, kept simple.
        assert_eq!(
            self.0.fetch_add(1, Ordering::SeqCst),
            0,
            "two holders at once"
        );
    }

    fn leave(&self) {
        // ORDERING: SeqCst; as in `enter`.
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A critical section that notices a second holder or a lost update: who is inside, and
/// a counter updated with a plain load and store, so that only the lock keeps two
/// holders' updates from overwriting each other.
#[derive(Default)]
struct Guarded {
    holders: Holders,
    count: AtomicUsize,
}

impl Guarded {
    /// One hold's work: enter, update the count, stay for `busy` spin-loop hints, leave.
    fn critical_section(&self, busy: u32) {
        self.holders.enter();
        // ORDERING: Relaxed load and store, not an RMW: only the lock orders them.
        let n = self.count.load(Ordering::Relaxed);
        // ORDERING: as above.
        self.count.store(n + 1, Ordering::Relaxed);
        for _ in 0..busy {
            std::hint::spin_loop();
        }
        self.holders.leave();
    }

    /// No update was lost: `holds` critical sections ran. Called after the threads that
    /// ran them were joined, which orders the load.
    fn assert_counted(&self, holds: usize) {
        // ORDERING: Relaxed; the join orders it (see above).
        assert_eq!(
            self.count.load(Ordering::Relaxed),
            holds,
            "an update was lost"
        );
    }
}

/// Run `body(t)` on `threads` threads at once, t = 0, 1, ...; returns once all are done.
fn on_threads(threads: usize, body: impl Fn(usize) + Sync) {
    thread::scope(|s| {
        for t in 0..threads {
            let body = &body;
            s.spawn(move || body(t));
        }
    });
}

/// The lock is free, nobody waits, and it can be taken and given back.
fn assert_free(lock: &Lock) {
    assert!(!lock.is_locked(), "the lock is still held");
    assert_eq!(lock.queued(), 0, "a waiter was left in the queue");
    assert!(lock.try_lock(), "a free lock cannot be taken");
    assert!(lock.unlock());
}

#[test]
fn test_uncontended_lock_and_unlock() {
    for lock in both() {
        assert!(!lock.is_locked());
        assert!(lock.try_lock());
        assert!(lock.is_locked());
        assert!(!lock.try_lock(), "a held lock was taken again");
        assert!(lock.unlock());
        assert!(
            !lock.unlock(),
            "unlocking a free lock must report nothing released"
        );
        assert!(!lock.is_locked());

        lock.lock(forever()).unwrap();
        assert!(lock.is_locked());
        assert!(lock.unlock());

        let unlock = lock.try_acquire().expect("free");
        assert!(lock.try_acquire().is_none());
        assert!(unlock.unlock());
        assert_free(&lock);
    }
    assert!(Lock::fair().is_fair() && !Lock::new().is_fair() && !Lock::default().is_fair());
}

#[test]
fn test_clones_share_one_slot() {
    let lock = Lock::new();
    let clone = lock.clone();
    assert!(lock.same_slot(&clone) && !lock.same_slot(&Lock::new()));
    assert!(clone.try_lock());
    assert!(lock.is_locked() && !lock.try_lock());
    assert!(lock.unlock());
    assert!(!clone.is_locked());
}

#[test]
fn test_mutual_exclusion_under_threads() {
    let _watchdog = watchdog("test_mutual_exclusion_under_threads");
    const THREADS: usize = 8;
    const ROUNDS: usize = 2_000;
    for lock in both() {
        let guarded = Guarded::default();
        on_threads(THREADS, |t| {
            for i in 0..ROUNDS {
                // Mix the three ways in: blocking, non-blocking, once-only handle.
                let unlock = match (t + i) % 3 {
                    0 => {
                        lock.lock(forever()).unwrap();
                        None
                    }
                    1 => {
                        while !lock.try_lock() {
                            thread::yield_now();
                        }
                        None
                    }
                    _ => Some(lock.acquire(forever()).unwrap()),
                };
                guarded.critical_section(0);
                match unlock {
                    Some(u) => assert!(u.unlock()),
                    None => assert!(lock.unlock()),
                }
            }
        });
        guarded.assert_counted(THREADS * ROUNDS);
        assert_free(&lock);
    }
}

#[test]
fn test_fair_lock_is_fifo() {
    let _watchdog = watchdog("test_fair_lock_is_fifo");
    const WAITERS: usize = 8;
    let lock = Lock::fair();
    let order = Mutex::new(Vec::new());
    assert!(lock.try_lock());
    thread::scope(|s| {
        for i in 0..WAITERS {
            let (lock, order) = (&lock, &order);
            s.spawn(move || {
                lock.lock(for_at_most(PATIENCE)).expect("never granted");
                order.lock().unwrap().push(i);
                assert!(lock.unlock());
            });
            // The next thread starts only once this one is queued: the order is known.
            wait_until("the waiter queued", || lock.queued() == i + 1);
        }
        assert!(lock.unlock());
    });
    assert_eq!(*order.lock().unwrap(), (0..WAITERS).collect::<Vec<_>>());
    assert_free(&lock);
}

#[test]
fn test_fair_lock_is_fifo_across_threads_and_tasks() {
    let _watchdog = watchdog("test_fair_lock_is_fifo_across_threads_and_tasks");
    // Waiters 0 and 2 are threads, 1 and 3 are tasks; each records itself while it holds.
    let lock = Lock::fair();
    let order = Mutex::new(Vec::new());
    assert!(lock.try_lock());
    thread::scope(|s| {
        let mut tasks = Vec::new();
        for i in 0..4 {
            if i % 2 == 0 {
                let (lock, order) = (&lock, &order);
                s.spawn(move || {
                    lock.lock(for_at_most(PATIENCE)).expect("never granted");
                    order.lock().unwrap().push(i);
                    assert!(lock.unlock());
                });
                wait_until("the thread queued", || lock.queued() == i + 1);
            } else {
                let (_, waker) = CountingWaker::new();
                tasks.push((i, lock.lock_task(waker).expect("held, so it queues")));
                assert_eq!(lock.queued(), i + 1);
            }
        }
        assert!(lock.unlock());
        for (i, task) in tasks {
            wait_until("the task is granted", || task.granted());
            order.lock().unwrap().push(i);
            assert!(lock.unlock());
        }
    });
    assert_eq!(*order.lock().unwrap(), [0, 1, 2, 3]);
    assert_free(&lock);
}

#[test]
fn test_mutual_exclusion_with_waiters_that_spin_and_watch() {
    // The free-threaded binding's way in: spin before queueing, compete at once when
    // woken, and watch the lock after a lost competition (`acquire::block` with spins;
    // one spin here, so that threads queue often and many watches run: from tens to a
    // thousand per run). Some waits have a deadline short enough to pass while they
    // watch, so those give up right after a watch.
    let _watchdog = watchdog("test_mutual_exclusion_with_waiters_that_spin_and_watch");
    const THREADS: usize = 4;
    const ROUNDS: usize = 20_000;
    let lock = Lock::new();
    let guarded = Guarded::default();
    on_threads(THREADS, |t| {
        let mut done = 0;
        let mut i = 0;
        while done < ROUNDS {
            i += 1;
            let wait = if (t + i) % 7 == 0 {
                for_at_most(Duration::from_micros(20))
            } else {
                forever()
            };
            let taken = lock.try_lock()
                || ctxlock::acquire::block(&*lock, wait, Compete::AtOnce, 1, |w| w.step())
                    .map(|()| true)
                    .or_else(|e| match e {
                        AcquireError::Timeout => Ok(false),
                        e => Err(e),
                    })
                    .unwrap();
            if !taken {
                continue; // timed out, and left the queue
            }
            // Hold for a while, so that woken waiters find the lock taken again.
            guarded.critical_section(64);
            assert!(lock.unlock());
            done += 1;
        }
    });
    guarded.assert_counted(THREADS * ROUNDS);
    assert_free(&lock);
}

#[test]
fn test_barging_lock_never_starves_a_waiter() {
    let _watchdog = watchdog("test_barging_lock_never_starves_a_waiter");
    // Holders that re-take the lock the moment they drop it: a barging release only
    // wakes the queued thread to re-compete, and by the time it runs the lock is taken
    // again, so it would wait for ever if the lock did not hand it over after ~1 ms.
    const BARGERS: usize = 2;
    const WAITS: usize = 20;
    let lock = Lock::new();
    let holders = Holders::default();
    let done = AtomicBool::new(false);
    thread::scope(|s| {
        for _ in 0..BARGERS {
            let (lock, holders, done) = (&lock, &holders, &done);
            s.spawn(move || {
                // ORDERING: Relaxed; a stop flag, it orders nothing.
                while !done.load(Ordering::Relaxed) {
                    lock.lock(forever()).unwrap();
                    holders.enter();
                    thread::sleep(Duration::from_micros(50));
                    holders.leave();
                    assert!(lock.unlock());
                }
            });
        }
        wait_until("the bargers hold the lock", || lock.is_locked());
        for _ in 0..WAITS {
            // Bounded: the waiter gets the lock long before PATIENCE runs out.
            lock.lock(for_at_most(PATIENCE))
                .expect("a waiter was starved by barging");
            holders.enter();
            holders.leave();
            assert!(lock.unlock());
        }
        // ORDERING: Relaxed; see the load.
        done.store(true, Ordering::Relaxed);
    });
    assert_free(&lock);
}

#[test]
fn test_barging_lock_hands_over_to_a_thread_that_waited_long_enough() {
    let _watchdog = watchdog("test_barging_lock_hands_over_to_a_thread_that_waited_long_enough");
    // The bound behind the test above, checked without a race: once a queued thread
    // has waited ~1 ms (`FAIR_AFTER`), the next unlock hands it the lock inside the
    // unlock call, so the unlocker's immediate `try_lock` cannot take it back.
    let lock = Lock::new();
    let (let_go, go) = mpsc::channel::<()>();
    assert!(lock.try_lock());
    thread::scope(|s| {
        let lock = &lock;
        let waiter = s.spawn(move || {
            lock.lock(for_at_most(PATIENCE)).expect("never granted");
            // Hold until the unlocker has tried to take the lock back.
            go.recv_timeout(PATIENCE).expect("never let go");
            assert!(lock.unlock());
        });
        wait_until("the waiter queued", || lock.queued() == 1);
        thread::sleep(Duration::from_millis(5));
        assert!(lock.unlock());
        assert!(!lock.try_lock(), "a waiter past FAIR_AFTER was barged");
        let_go.send(()).unwrap();
        waiter.join().unwrap();
    });
    assert_free(&lock);
}

#[test]
fn test_a_waiter_woken_to_compete_later_keeps_its_place_and_age() {
    let _watchdog = watchdog("test_a_waiter_woken_to_compete_later_keeps_its_place_and_age");
    woken_to_compete_keeps_its_age(Compete::Later);
}

#[test]
fn test_a_waiter_woken_to_compete_at_once_keeps_its_age() {
    let _watchdog = watchdog("test_a_waiter_woken_to_compete_at_once_keeps_its_age");
    woken_to_compete_keeps_its_age(Compete::AtOnce);
}

/// `ThreadWait::step` returns `Retry` to a young waiter that an unlock woke to compete,
/// leaving the slot free; the waiter stays queued if it competes `Later`, else leaves
/// the queue. Here the unlocker takes the slot back first, so `compete` fails and the
/// waiter parks again, still with the age it had from its first step: once that passes
/// FAIR_AFTER the next unlock hands it the slot.
fn woken_to_compete_keeps_its_age(compete: Compete) {
    let lock = Lock::new();
    let mut saw_retry = false;
    // The first unlock must come within FAIR_AFTER of the waiter queueing; a slow
    // machine may miss that, so the scenario runs until it happens (a few times at most).
    for _ in 0..20 {
        assert!(lock.try_lock());
        let (stepped, first) = mpsc::channel::<Woken>();
        let (let_go, go) = mpsc::channel::<()>();
        let (lost, competed) = mpsc::channel::<()>();
        thread::scope(|s| {
            let lock = &lock;
            let waiter = s.spawn(move || {
                let mut waiting = lock.wait_steps(for_at_most(PATIENCE), compete);
                let woken = waiting.step().expect("first step failed");
                stepped.send(woken).unwrap();
                if woken == Woken::Retry {
                    go.recv_timeout(PATIENCE).expect("never let go");
                    assert!(!waiting.compete(), "competed for a taken slot and won");
                    lost.send(()).unwrap();
                    assert_eq!(waiting.step().expect("second step failed"), Woken::Acquired);
                    // Hold until the unlocker has tried to take the lock back.
                    go.recv_timeout(PATIENCE).expect("never let go");
                }
                assert!(lock.unlock());
            });
            wait_until("the waiter queued", || lock.queued() == 1);
            assert!(lock.unlock());
            let woken = first.recv_timeout(PATIENCE).unwrap();
            if woken == Woken::Retry {
                saw_retry = true;
                let queued = usize::from(compete == Compete::Later);
                assert_eq!(
                    lock.queued(),
                    queued,
                    "{compete:?}: wrong place after waking"
                );
                assert!(lock.try_lock(), "a Retry left the slot taken");
                thread::sleep(Duration::from_millis(5));
                let_go.send(()).unwrap();
                competed.recv_timeout(PATIENCE).unwrap();
                assert_eq!(lock.queued(), 1, "a waiter that lost did not queue again");
                assert!(lock.unlock());
                assert!(!lock.try_lock(), "the waiter lost its age");
                let_go.send(()).unwrap();
            }
            waiter.join().unwrap();
        });
        assert_free(&lock);
        if saw_retry {
            return;
        }
    }
    panic!("the first unlock never came within FAIR_AFTER of the waiter queueing");
}

/// Long enough past `FAIR_AFTER` (1 ms) for a waiter woken to compete later to be
/// handed the slot: while it is away, the mark that it waited long enough is set by the
/// timer thread, which a loaded machine may run a few milliseconds late.
const PAST_FAIR_AFTER: Duration = Duration::from_millis(50);

#[test]
fn test_a_competing_waiter_is_handed_the_slot_once_it_waited_long_enough() {
    let _watchdog =
        watchdog("test_a_competing_waiter_is_handed_the_slot_once_it_waited_long_enough");
    // A waiter woken to compete that has not come back to compete yet (in the binding:
    // it waits for the GIL) is not woken again by later unlocks, and the first unlock
    // after it has waited FAIR_AFTER hands it the slot: its `compete` then finds it held.
    with_a_competitor_away(|lock| {
        // Barging while the competitor is away: the lock is free to take back until
        // the competitor has waited FAIR_AFTER (a slow machine, or a sanitizer, may get
        // there within these rounds: then an unlock of theirs has handed it over
        // already).
        let mut handed_over = false;
        for _ in 0..100 {
            if !lock.try_lock() {
                handed_over = true;
                break;
            }
            assert!(lock.unlock());
        }
        if !handed_over {
            assert!(lock.try_lock());
            thread::sleep(PAST_FAIR_AFTER);
            assert!(lock.unlock());
            assert!(!lock.try_lock(), "a competitor past FAIR_AFTER was barged");
        }
        assert_eq!(lock.queued(), 0);
    });
}

#[test]
fn test_a_scoped_hold_ended_while_a_competitor_is_away_frees_the_slot() {
    let _watchdog = watchdog("test_a_scoped_hold_ended_while_a_competitor_is_away_frees_the_slot");
    // `with` while a woken competitor is away: the scoped hold is barged in, and its end
    // frees the slot in the claim's own CAS, as an owned release does (invariant 5), so
    // the competitor finds the lock free, or handed over, when it competes.
    with_a_competitor_away(|lock| {
        for _ in 0..100 {
            if !lock.try_lock_scoped() {
                break; // handed over: the competitor waited FAIR_AFTER (a slow machine)
            }
            assert!(lock.unlock_scoped());
            assert!(!lock.unlock_scoped(), "one scoped hold ended twice");
        }
    });
}

#[test]
fn test_a_competing_waiter_past_fair_after_is_handed_the_slot_after_another_waiter_left() {
    let _watchdog = watchdog(
        "test_a_competing_waiter_past_fair_after_is_handed_the_slot_after_another_waiter_left",
    );
    // While a woken competitor is away and young, releases skip the queue. Once it has
    // waited FAIR_AFTER they must not: also when another waiter queued behind it and
    // timed out meanwhile, whose leaving re-plans the queue with the slot still held.
    with_a_competitor_away(|lock| {
        // Taken back unless a slow machine let the competitor age past FAIR_AFTER
        // already (then it was handed the slot).
        if lock.try_lock() {
            thread::sleep(PAST_FAIR_AFTER);
            let r = lock.lock(for_at_most(Duration::from_millis(5)));
            assert!(matches!(r, Err(AcquireError::Timeout)), "{r:?}");
            assert_eq!(lock.queued(), 1);
            assert!(lock.unlock());
            assert!(!lock.try_lock(), "a competitor past FAIR_AFTER was barged");
        }
        assert_eq!(lock.queued(), 0);
    });
}

/// Run `away` while a thread that competes `Later` has been woken to compete and has not
/// come back yet (the lock is free then); then let it compete, which must give it the
/// lock (or find it handed over). The first unlock must come within FAIR_AFTER of the
/// waiter queueing, else it hands over instead of waking it to compete; a slow machine
/// may miss that, so the scenario runs until it happens (a few times at most).
fn with_a_competitor_away(away: impl Fn(&Lock)) {
    let lock = Lock::new();
    for _ in 0..20 {
        assert!(lock.try_lock());
        let (stepped, first) = mpsc::channel::<Woken>();
        let (let_go, go) = mpsc::channel::<()>();
        let retried = thread::scope(|s| {
            let lock = &lock;
            let waiter = s.spawn(move || {
                let mut waiting = lock.wait_steps(for_at_most(PATIENCE), Compete::Later);
                let woken = waiting.step().expect("first step failed");
                stepped.send(woken).unwrap();
                if woken == Woken::Retry {
                    go.recv_timeout(PATIENCE).expect("never let go");
                    assert!(waiting.compete(), "the hand-off was lost");
                }
                assert!(lock.unlock());
            });
            wait_until("the waiter queued", || lock.queued() == 1);
            assert!(lock.unlock());
            let retried = first.recv_timeout(PATIENCE).unwrap() == Woken::Retry;
            if retried {
                away(lock);
                let_go.send(()).unwrap();
            }
            waiter.join().unwrap();
            retried
        });
        assert_free(&lock);
        if retried {
            return;
        }
    }
    panic!("the first unlock never came within FAIR_AFTER of the waiter queueing");
}

/// After a dropped wait: the queue is empty, and a release more than FAIR_AFTER later
/// hands the lock to nobody, so a bounded acquire takes it.
fn assert_not_lost(lock: &Lock) {
    assert_eq!(lock.queued(), 0, "a dropped wait was left in the queue");
    assert!(lock.try_lock(), "a dropped wait kept the lock");
    thread::sleep(Duration::from_millis(5));
    assert!(lock.unlock());
    lock.lock(for_at_most(PATIENCE))
        .expect("the lock was handed to a dropped wait");
    assert!(lock.unlock());
    assert_free(lock);
}

#[test]
fn test_a_thread_wait_dropped_after_retry_gives_up() {
    let _watchdog = watchdog("test_a_thread_wait_dropped_after_retry_gives_up");
    thread_wait_dropped_after_retry(false);
}

#[test]
fn test_a_thread_wait_dropped_after_retry_passes_on_a_grant_it_never_saw() {
    let _watchdog =
        watchdog("test_a_thread_wait_dropped_after_retry_passes_on_a_grant_it_never_saw");
    thread_wait_dropped_after_retry(true);
}

/// A `ThreadWait` that competes `Later`, dropped after `Woken::Retry` without competing
/// (it was still queued, keeping its place): dropping gives up. If `handed_over`, a
/// release first hands it the lock (it has waited past FAIR_AFTER): that hold, which no
/// step reported, is passed on instead of being kept by a wait that no longer exists.
fn thread_wait_dropped_after_retry(handed_over: bool) {
    let lock = Lock::new();
    // The first unlock must come within FAIR_AFTER of the waiter queueing; a slow
    // machine may miss that, so the scenario runs until it happens (a few times at most).
    for _ in 0..20 {
        assert!(lock.try_lock());
        let (stepped, first) = mpsc::channel::<Woken>();
        let (let_go, go) = mpsc::channel::<()>();
        let retried = thread::scope(|s| {
            let lock = &lock;
            let waiter = s.spawn(move || {
                let mut waiting = lock.wait_steps(for_at_most(PATIENCE), Compete::Later);
                let woken = waiting.step().expect("first step failed");
                stepped.send(woken).unwrap();
                if woken == Woken::Retry {
                    go.recv_timeout(PATIENCE).expect("never let go");
                    drop(waiting);
                } else {
                    drop(waiting);
                    assert!(lock.unlock());
                }
            });
            wait_until("the waiter queued", || lock.queued() == 1);
            assert!(lock.unlock());
            let retried = first.recv_timeout(PATIENCE).unwrap() == Woken::Retry;
            if retried {
                assert_eq!(lock.queued(), 1, "a Later waiter left the queue");
                if handed_over {
                    assert!(lock.try_lock(), "a Retry left the slot taken");
                    thread::sleep(PAST_FAIR_AFTER);
                    assert!(lock.unlock());
                    assert!(lock.is_locked(), "not handed to the waiter past FAIR_AFTER");
                    assert_eq!(lock.queued(), 0);
                }
                let_go.send(()).unwrap();
            }
            waiter.join().unwrap();
            retried
        });
        if retried {
            assert_not_lost(&lock);
            return;
        }
        assert_free(&lock);
    }
    panic!("the first unlock never came within FAIR_AFTER of the waiter queueing");
}

#[test]
fn test_a_thread_wait_that_panics_in_a_step_gives_up() {
    let _watchdog = watchdog("test_a_thread_wait_that_panics_in_a_step_gives_up");
    for lock in both() {
        assert!(lock.try_lock());
        thread::scope(|s| {
            let lock = &lock;
            let waiter = s.spawn(move || {
                let mut waiting = lock.wait_steps(
                    Wait::<()> {
                        interrupt: Some(Interrupt {
                            every: Duration::from_millis(1),
                            check: || panic!("a step panics (expected by the test)"),
                        }),
                        ..Wait::default()
                    },
                    Compete::Later,
                );
                let _ = waiting.step();
            });
            assert!(waiter.join().is_err(), "the step did not panic");
        });
        assert!(lock.unlock());
        assert_not_lost(&lock);
    }
}

#[test]
fn test_deadline_timeout_leaves_the_queue_empty_and_the_lock_usable() {
    let _watchdog = watchdog("test_deadline_timeout_leaves_the_queue_empty_and_the_lock_usable");
    for lock in both() {
        assert!(lock.try_lock());
        // A deadline that has passed: one try, no queueing.
        let r = lock.lock(Wait::<std::convert::Infallible> {
            deadline: Timeout::NOW.deadline(),
            ..Wait::default()
        });
        assert!(matches!(r, Err(AcquireError::Timeout)), "{r:?}");
        // A short deadline from another thread, with a waiter queued behind it that
        // must not be stranded when the head times out.
        thread::scope(|s| {
            let timed = s.spawn(|| lock.lock(for_at_most(Duration::from_millis(50))));
            wait_until("the first waiter queued", || lock.queued() == 1);
            let behind = s.spawn(|| {
                lock.lock(forever()).unwrap();
                assert!(lock.unlock());
            });
            let r = timed.join().unwrap();
            assert!(matches!(r, Err(AcquireError::Timeout)), "{r:?}");
            assert!(
                lock.is_locked(),
                "a timed-out waiter released the holder's lock"
            );
            assert!(lock.queued() <= 1, "the timed-out waiter is still queued");
            assert!(lock.unlock());
            behind.join().unwrap();
        });
        assert_free(&lock);
    }
}

#[test]
fn test_timeout_grant_race_never_leaks_the_slot() {
    let _watchdog = watchdog("test_timeout_grant_race_never_leaks_the_slot");
    // The holder unlocks about when the waiter's deadline passes: the waiter either
    // acquires (granted wins over a timeout) or times out; the lock never stays held.
    for lock in both() {
        let holders = Holders::default();
        let (mut acquired, mut timed_out) = (0, 0);
        for i in 0..300 {
            assert!(lock.try_lock());
            holders.enter();
            let waited = thread::scope(|s| {
                let waiter = s.spawn(|| {
                    let r = lock.lock(for_at_most(Duration::from_micros(500)));
                    if r.is_ok() {
                        holders.enter();
                        holders.leave();
                        assert!(lock.unlock());
                    }
                    r
                });
                thread::sleep(Duration::from_micros(300 + 50 * (i % 9)));
                holders.leave();
                assert!(lock.unlock());
                waiter.join().unwrap()
            });
            match waited {
                Ok(()) => acquired += 1,
                Err(AcquireError::Timeout) => timed_out += 1,
                Err(e) => panic!("unexpected {e:?}"),
            }
            assert!(!lock.is_locked(), "the slot leaked (round {i})");
            assert_eq!(lock.queued(), 0, "a waiter leaked (round {i})");
        }
        eprintln!(
            "fair={}: {acquired} acquired, {timed_out} timed out",
            lock.is_fair()
        );
        assert_free(&lock);
    }
}

#[test]
fn test_token_cancel_wakes_a_waiter_with_its_reason() {
    let _watchdog = watchdog("test_token_cancel_wakes_a_waiter_with_its_reason");
    for lock in both() {
        let token = CancelToken::default();
        assert!(lock.try_lock());
        let (tx, rx) = mpsc::channel();
        thread::scope(|s| {
            let (lock, token) = (&lock, &token);
            s.spawn(move || tx.send(lock.lock(until_cancelled(token))).unwrap());
            wait_until("the waiter queued", || lock.queued() == 1);
            assert!(token.cancel(reason("stop")));
            // The waiter has no deadline: only the cancel can end its wait.
            match rx
                .recv_timeout(PATIENCE)
                .expect("the cancel did not wake the waiter")
            {
                Err(AcquireError::Cancelled(r)) => assert_eq!(label(&r), "stop"),
                other => panic!("expected Cancelled, got {other:?}"),
            }
        });
        assert_eq!(lock.queued(), 0);
        assert_eq!(
            token.registrations(),
            0,
            "the waiter's wake-up is still registered"
        );
        assert!(
            lock.is_locked(),
            "a cancelled waiter released the holder's lock"
        );
        assert!(lock.unlock());
        assert_free(&lock);
    }
}

#[test]
fn test_one_cancel_wakes_every_waiter_of_the_token() {
    let _watchdog = watchdog("test_one_cancel_wakes_every_waiter_of_the_token");
    let (a, b) = (Lock::new(), Lock::fair());
    let parent = CancelToken::default();
    let child = parent.child(None);
    assert!(a.try_lock() && b.try_lock());
    thread::scope(|s| {
        let waiters = [(&a, &parent), (&b, &parent), (&a, &child), (&b, &child)]
            .map(|(lock, token)| s.spawn(move || lock.lock(until_cancelled(token))));
        wait_until("all four queued", || a.queued() == 2 && b.queued() == 2);
        parent.cancel(reason("parent"));
        for w in waiters {
            match w.join().unwrap() {
                Err(AcquireError::Cancelled(r)) => assert_eq!(label(&r), "parent"),
                other => panic!("expected Cancelled, got {other:?}"),
            }
        }
    });
    for lock in [&a, &b] {
        assert!(lock.unlock());
        assert_free(lock);
    }
}

#[test]
fn test_token_deadline_cancels_with_its_reason() {
    for lock in both() {
        let token = CancelToken::new(Some((
            Instant::now() + Duration::from_millis(20),
            reason("deadline"),
        )));
        assert!(lock.try_lock());
        match lock.lock(until_cancelled(&token)) {
            Err(AcquireError::Cancelled(r)) => assert_eq!(label(&r), "deadline"),
            other => panic!("expected Cancelled, got {other:?}"),
        }
        assert!(token.is_cancelled());
        assert_eq!(lock.queued(), 0);
        assert!(lock.unlock());
        assert_free(&lock);
    }
}

#[test]
fn test_cancelled_token_fails_at_once_even_if_free() {
    for lock in both() {
        let token = CancelToken::default();
        token.cancel(reason("early"));
        let child = token.child(None);
        for t in [&token, &child] {
            match lock.lock(until_cancelled(t)) {
                Err(AcquireError::Cancelled(r)) => assert_eq!(label(&r), "early"),
                other => panic!("expected Cancelled, got {other:?}"),
            }
            assert!(lock.acquire(until_cancelled(t)).is_err());
            assert!(!lock.is_locked(), "a failed acquire took the lock");
        }
        assert_free(&lock);
    }
}

#[test]
fn test_grant_cancel_race_never_double_holds() {
    let _watchdog = watchdog("test_grant_cancel_race_never_double_holds");
    // The holder unlocks at the same moment as the waiter's token is cancelled, while a
    // third thread tries to barge in. Whatever wins, nobody holds beside anybody and
    // the lock ends free with nobody queued.
    const ROUNDS: usize = 1_000;
    for lock in both() {
        let holders = Holders::default();
        let (mut acquired, mut cancelled) = (0, 0);
        for i in 0..ROUNDS {
            let token = CancelToken::default();
            let go = Barrier::new(3);
            assert!(lock.try_lock());
            holders.enter();
            let got_it = thread::scope(|s| {
                let (lock, holders, token, go) = (&lock, &holders, &token, &go);
                let waiter = s.spawn(move || match lock.lock(until_cancelled(token)) {
                    Ok(()) => {
                        holders.enter();
                        holders.leave();
                        assert!(lock.unlock());
                        true
                    }
                    Err(AcquireError::Cancelled(r)) => {
                        assert_eq!(label(&r), "race");
                        false
                    }
                    Err(e) => panic!("unexpected {e:?}"),
                });
                wait_until("the waiter queued", || lock.queued() == 1);
                s.spawn(move || {
                    go.wait();
                    token.cancel(reason("race"));
                });
                s.spawn(move || {
                    go.wait();
                    if lock.try_lock() {
                        holders.enter();
                        holders.leave();
                        assert!(lock.unlock());
                    }
                });
                go.wait();
                holders.leave();
                assert!(lock.unlock());
                waiter.join().unwrap()
            });
            if got_it {
                acquired += 1;
            } else {
                cancelled += 1;
            }
            assert!(!lock.is_locked(), "the slot leaked (round {i})");
            assert_eq!(lock.queued(), 0, "a waiter leaked (round {i})");
            assert_eq!(token.registrations(), 0);
        }
        eprintln!(
            "fair={}: {acquired} acquired, {cancelled} cancelled",
            lock.is_fair()
        );
        assert_free(&lock);
    }
}

static STOP_WAITING: AtomicBool = AtomicBool::new(false);

/// The interrupt check of `test_interrupt_ends_a_wait`: fails once the flag is set, the
/// way a Python signal handler raises.
fn stop_waiting() -> Result<(), &'static str> {
    // ORDERING: Relaxed; the check runs again every slice until it sees the flag.
    if STOP_WAITING.load(Ordering::Relaxed) {
        Err("signal")
    } else {
        Ok(())
    }
}

#[test]
fn test_interrupt_ends_a_wait_and_leaves_the_lock_consistent() {
    let _watchdog = watchdog("test_interrupt_ends_a_wait_and_leaves_the_lock_consistent");
    for lock in both() {
        // ORDERING: Relaxed; see `stop_waiting`.
        STOP_WAITING.store(false, Ordering::Relaxed);
        assert!(lock.try_lock());
        thread::scope(|s| {
            let waiter = s.spawn(|| {
                lock.lock(Wait {
                    deadline: None,
                    cancel: None,
                    interrupt: Some(Interrupt {
                        every: Duration::from_millis(2),
                        check: stop_waiting,
                    }),
                })
            });
            wait_until("the waiter queued", || lock.queued() == 1);
            // ORDERING: Relaxed; see `stop_waiting`.
            STOP_WAITING.store(true, Ordering::Relaxed);
            match waiter.join().unwrap() {
                Err(AcquireError::Interrupted(e)) => assert_eq!(e, "signal"),
                other => panic!("expected Interrupted, got {other:?}"),
            }
        });
        assert_eq!(lock.queued(), 0);
        assert!(
            lock.is_locked(),
            "an interrupted waiter released the holder's lock"
        );
        assert!(lock.unlock());
        assert_free(&lock);
    }
}

static INTERRUPT_NOW: AtomicBool = AtomicBool::new(false);

fn interrupt_now() -> Result<(), ()> {
    // ORDERING: Relaxed; as in `stop_waiting`.
    if INTERRUPT_NOW.load(Ordering::Relaxed) {
        Err(())
    } else {
        Ok(())
    }
}

#[test]
fn test_interrupt_grant_race_leaves_the_lock_consistent() {
    let _watchdog = watchdog("test_interrupt_grant_race_leaves_the_lock_consistent");
    // An interrupt observed at the moment of a grant passes the lock on (the caller gets
    // `Interrupted` and does not hold it).
    for lock in both() {
        let holders = Holders::default();
        for i in 0..300 {
            // ORDERING: Relaxed; see `stop_waiting`.
            INTERRUPT_NOW.store(false, Ordering::Relaxed);
            assert!(lock.try_lock());
            holders.enter();
            thread::scope(|s| {
                let waiter = s.spawn(|| {
                    let r = lock.lock(Wait {
                        deadline: None,
                        cancel: None,
                        interrupt: Some(Interrupt {
                            every: Duration::from_micros(20),
                            check: interrupt_now,
                        }),
                    });
                    if r.is_ok() {
                        holders.enter();
                        holders.leave();
                        assert!(lock.unlock());
                    }
                });
                wait_until("the waiter queued", || lock.queued() == 1);
                // ORDERING: Relaxed; see `stop_waiting`.
                INTERRUPT_NOW.store(true, Ordering::Relaxed);
                holders.leave();
                assert!(lock.unlock());
                waiter.join().unwrap();
            });
            assert!(!lock.is_locked(), "the slot leaked (round {i})");
            assert_eq!(lock.queued(), 0, "a waiter leaked (round {i})");
        }
        assert_free(&lock);
    }
}

/// What `nest_a_wait` works on: the lock, whether it waits for the lock's release
/// before it begins its own wait, and what its wait returned. Only
/// `test_a_wait_begun_in_an_interrupt_check_makes_the_interrupted_wait_step_aside`
/// sets it.
struct Nested {
    lock: Lock,
    after_release: bool,
    got: Option<bool>,
}

static NESTED: Mutex<Option<Nested>> = Mutex::new(None);
static RELEASED: AtomicBool = AtomicBool::new(false);

/// The interrupt check of that test: the first time it runs, it waits for the lock its
/// own thread is waiting for, as a Python signal handler may, then lets it go.
fn nest_a_wait() -> Result<(), ()> {
    let (lock, after_release) = {
        let mut nested = NESTED.lock().unwrap();
        match nested.as_mut() {
            Some(n) if n.got.is_none() => {
                n.got = Some(false);
                (n.lock.clone(), n.after_release)
            }
            _ => return Ok(()),
        }
    };
    if after_release {
        // ORDERING: Relaxed; the release itself is ordered by the lock.
        wait_until("the lock was released", || RELEASED.load(Ordering::Relaxed));
    }
    let got = lock
        .lock(Wait::<()> {
            deadline: Some(Instant::now() + PATIENCE),
            ..Wait::default()
        })
        .is_ok();
    if got {
        assert!(lock.unlock());
    }
    NESTED.lock().unwrap().as_mut().unwrap().got = Some(got);
    Ok(())
}

#[test]
fn test_a_wait_begun_in_an_interrupt_check_makes_the_interrupted_wait_step_aside() {
    let _watchdog =
        watchdog("test_a_wait_begun_in_an_interrupt_check_makes_the_interrupted_wait_step_aside");
    // The check's wait begins before the release (the interrupted wait leaves the queue
    // at once), or after it (the fair lock was handed to the interrupted wait, which
    // passes it on; the barging lock is free then).
    for after_release in [false, true] {
        for lock in both() {
            assert!(lock.try_lock());
            // ORDERING: Relaxed; see `nest_a_wait`.
            RELEASED.store(false, Ordering::Relaxed);
            *NESTED.lock().unwrap() = Some(Nested {
                lock: lock.clone(),
                after_release,
                got: None,
            });
            thread::scope(|s| {
                let waiter = s.spawn(|| {
                    let r = lock.lock(Wait {
                        deadline: Some(Instant::now() + PATIENCE),
                        cancel: None,
                        interrupt: Some(Interrupt {
                            every: Duration::from_millis(2),
                            check: nest_a_wait,
                        }),
                    });
                    r.is_ok() && lock.unlock()
                });
                wait_until("the check began", || {
                    NESTED.lock().unwrap().as_ref().unwrap().got.is_some()
                });
                if !after_release {
                    // The check's wait is queued by now, nearly always; a release a
                    // little earlier takes the other path, which passes too. Once it is
                    // queued, the interrupted wait steps aside before the check's parks:
                    // waited for, not asserted at once, as a loaded machine may stall
                    // a thread between the two.
                    thread::sleep(Duration::from_millis(50));
                    wait_until("the interrupted wait stepped aside", || lock.queued() == 1);
                }
                assert!(lock.unlock());
                // ORDERING: Relaxed; see `nest_a_wait`.
                RELEASED.store(true, Ordering::Relaxed);
                assert!(
                    waiter.join().unwrap(),
                    "the interrupted wait did not get the lock"
                );
            });
            let got = NESTED.lock().unwrap().take().unwrap().got;
            assert_eq!(got, Some(true), "the check's wait did not get the lock");
            assert_free(&lock);
        }
    }
}

#[test]
fn test_unlock_is_once_only() {
    let _watchdog = watchdog("test_unlock_is_once_only");
    let lock = Lock::new();
    let unlock = lock.acquire(forever()).unwrap();
    assert!(!unlock.released());
    assert!(unlock.unlock());
    assert!(unlock.released());
    // Someone else takes the lock; the spent handle must not release their hold.
    assert!(lock.try_lock());
    assert!(!unlock.unlock());
    assert!(
        lock.is_locked(),
        "a spent Unlock released another holder's lock"
    );
    assert!(lock.unlock());

    // Many threads race to release one hold: exactly one does.
    let unlock = lock.acquire(forever()).unwrap();
    let released = AtomicUsize::new(0);
    thread::scope(|s| {
        for _ in 0..8 {
            s.spawn(|| {
                if unlock.unlock() {
                    // ORDERING: SeqCst; a test counter.
                    released.fetch_add(1, Ordering::SeqCst);
                }
            });
        }
    });
    // ORDERING: the scope joined every thread.
    assert_eq!(released.load(Ordering::SeqCst), 1);
    assert_free(&lock);
}

#[test]
fn test_unlock_on_cancel_releases_when_the_token_is_cancelled() {
    let _watchdog = watchdog("test_unlock_on_cancel_releases_when_the_token_is_cancelled");
    let lock = Lock::new();
    let token = CancelToken::default();
    let unlock = Arc::new(lock.acquire(forever()).unwrap());
    let registration = unlock.unlock_on_cancel(&token);
    assert!(registration.is_some());
    assert!(lock.is_locked());
    // A waiter blocked on the lock gets it when the token releases the holder's hold.
    thread::scope(|s| {
        let waiter = s.spawn(|| {
            lock.lock(forever()).unwrap();
            assert!(lock.unlock());
        });
        wait_until("the waiter queued", || lock.queued() == 1);
        token.cancel(reason("done"));
        assert!(unlock.released());
        waiter.join().unwrap();
    });
    assert_free(&lock);

    // Already cancelled: released at once, nothing registered.
    let unlock = Arc::new(lock.acquire(forever()).unwrap());
    assert!(unlock.unlock_on_cancel(&token).is_none());
    assert!(unlock.released() && !lock.is_locked());

    // Unregistered: the cancel no longer releases.
    let token = CancelToken::default();
    let unlock = Arc::new(lock.acquire(forever()).unwrap());
    assert!(unlock
        .unlock_on_cancel(&token)
        .expect("not cancelled")
        .unregister());
    token.cancel(reason("ignored"));
    assert!(!unlock.released() && lock.is_locked());
    assert!(unlock.unlock());

    // Released by hand first: the later cancel must not release the next holder's hold.
    let token = CancelToken::default();
    let unlock = Arc::new(lock.acquire(forever()).unwrap());
    let _registration = unlock.unlock_on_cancel(&token);
    assert!(unlock.unlock());
    let next: Unlock = lock.acquire(forever()).unwrap();
    token.cancel(reason("late"));
    assert!(
        lock.is_locked(),
        "a spent Unlock released the next holder's lock"
    );
    assert!(next.unlock());
    assert_free(&lock);
}

#[test]
fn test_lock_task_on_a_free_lock_acquires_at_once() {
    for lock in both() {
        let (woken, waker) = CountingWaker::new();
        assert!(
            lock.lock_task(waker).is_none(),
            "a free lock made a task queue"
        );
        assert!(lock.is_locked());
        assert_eq!(woken.wakes(), 0);
        assert!(lock.unlock());
        assert_free(&lock);
    }
}

#[test]
fn test_queued_task_is_granted_on_unlock_and_woken() {
    // Both policies hand the lock to a task directly (a task cannot re-compete).
    for lock in both() {
        assert!(lock.try_lock());
        let (woken, waker) = CountingWaker::new();
        let task = lock.lock_task(waker).expect("held, so it queues");
        assert_eq!(lock.queued(), 1);
        assert!(!task.granted());
        assert!(task.view().same_slot(&lock));
        assert_eq!(woken.wakes(), 0, "woken before anything happened");
        assert!(lock.unlock());
        assert!(task.granted());
        assert_eq!(woken.wakes(), 1);
        assert_eq!(lock.queued(), 0);
        assert!(lock.is_locked(), "the lock was not handed to the task");
        assert!(!lock.try_lock(), "the lock was taken from under the task");
        // Granted: abandon cannot give it back; the caller owns it and unlocks it.
        assert!(!task.abandon());
        assert!(lock.is_locked());
        assert!(task.view().unlock());
        assert_free(&lock);
    }
}

#[test]
fn test_abandoned_task_leaves_without_the_lock() {
    for lock in both() {
        assert!(lock.try_lock());
        let (first_woken, waker) = CountingWaker::new();
        let first = lock.lock_task(waker).expect("held, so it queues");
        let (second_woken, waker) = CountingWaker::new();
        let second = lock.lock_task(waker).expect("held, so it queues");
        assert!(
            first.abandon(),
            "a waiting task must leave without the lock"
        );
        assert!(first.abandon(), "abandoning twice must stay a no-op");
        assert_eq!(lock.queued(), 1);
        assert!(lock.is_locked(), "abandon released the holder's lock");
        // The next unlock skips the task that left.
        assert!(lock.unlock());
        assert!(!first.granted() && second.granted());
        assert_eq!((first_woken.wakes(), second_woken.wakes()), (0, 1));
        assert!(lock.unlock());
        assert_free(&lock);
    }
}

#[test]
fn test_task_abandon_unlock_race_decides_exactly_once() {
    let _watchdog = watchdog("test_task_abandon_unlock_race_decides_exactly_once");
    // The task gives up on one thread while the holder unlocks on another: either it
    // left (and the lock is free) or it was granted (and owns the lock), never neither.
    for lock in both() {
        let (mut left, mut granted) = (0, 0);
        for i in 0..2_000 {
            assert!(lock.try_lock());
            let (_, waker) = CountingWaker::new();
            let task = lock.lock_task(waker).expect("held, so it queues");
            let go = Barrier::new(2);
            let abandoned = thread::scope(|s| {
                let (task, go) = (&task, &go);
                let abandoning = s.spawn(move || {
                    go.wait();
                    task.abandon()
                });
                go.wait();
                assert!(lock.unlock());
                abandoning.join().unwrap()
            });
            if abandoned {
                left += 1;
                assert!(!task.granted());
            } else {
                granted += 1;
                assert!(task.granted() && lock.is_locked(), "round {i}");
                assert!(lock.unlock());
            }
            assert!(!lock.is_locked(), "the slot leaked (round {i})");
            assert_eq!(lock.queued(), 0, "a waiter leaked (round {i})");
        }
        eprintln!("fair={}: {left} left, {granted} granted", lock.is_fair());
    }
}

#[test]
fn test_dropping_a_queued_task_leaves_the_queue() {
    for lock in both() {
        assert!(lock.try_lock());
        let task = lock.lock_task(noop_waker()).expect("held, so it queues");
        assert_eq!(lock.queued(), 1);
        drop(task);
        assert_eq!(lock.queued(), 0, "a dropped task stayed queued");
        assert!(lock.unlock());
        assert_free(&lock);
    }
}

/// A queued task with a token and a deadline (`TaskWait::start`).
fn task_with(lock: &Lock, cancel: Option<CancelToken>, deadline: Option<Instant>) -> TaskWait {
    TaskWait::start(lock.view().clone(), noop_waker(), cancel, deadline)
}

#[test]
fn test_task_is_woken_by_its_token_from_another_thread() {
    for lock in both() {
        assert!(lock.try_lock());
        let token = CancelToken::default();
        let (woken, waker) = CountingWaker::new();
        let task = TaskWait::start(lock.view().clone(), waker, Some(token.clone()), None);
        assert!(task.queued());
        assert_eq!(token.registrations(), 1, "the waker is not on the token");
        thread::scope(|s| {
            s.spawn(|| token.cancel(reason("cancel")));
        });
        assert_eq!(woken.wakes(), 1);
        match task.finish::<()>() {
            Err(AcquireError::Cancelled(r)) => assert_eq!(label(&r), "cancel"),
            other => panic!("expected Cancelled, got {other:?}"),
        }
        assert_eq!(lock.queued(), 0);
        assert!(lock.unlock());
        assert_free(&lock);
    }
}

#[test]
fn test_task_token_cancelled_before_it_queued_rings_at_once() {
    let lock = Lock::fair();
    assert!(lock.try_lock());
    let token = CancelToken::default();
    token.cancel(reason("early"));
    let (woken, waker) = CountingWaker::new();
    let task = TaskWait::start(lock.view().clone(), waker, Some(token.clone()), None);
    assert_eq!(woken.wakes(), 1);
    assert!(matches!(
        task.finish::<()>(),
        Err(AcquireError::Cancelled(_))
    ));
    assert!(lock.unlock());
    assert_free(&lock);
}

#[test]
fn test_task_is_woken_at_its_deadline_and_times_out() {
    let _watchdog = watchdog("test_task_is_woken_at_its_deadline_and_times_out");
    for lock in both() {
        assert!(lock.try_lock());
        let token = CancelToken::default();
        let (woken, waker) = CountingWaker::new();
        let at = Instant::now() + Duration::from_millis(20);
        let task = TaskWait::start(lock.view().clone(), waker, Some(token.clone()), Some(at));
        assert_eq!(token.registrations(), 1, "no child token for the deadline");
        wait_until("the deadline rang", || woken.wakes() == 1);
        assert!(Instant::now() >= at, "rang before the deadline");
        assert!(matches!(task.finish::<()>(), Err(AcquireError::Timeout)));
        assert!(
            !token.is_cancelled(),
            "the wait's deadline cancelled the token"
        );
        // The timer thread holds the child token while it expires it (it rang the
        // doorbell from there), so the child goes when that call returns, perhaps just
        // after the wait ended: bounded, not at once.
        wait_until("the child token went with the wait", || {
            token.registrations() == 0
        });
        // Without a token: a fresh one keeps the deadline.
        let (woken, waker) = CountingWaker::new();
        let at = Instant::now() + Duration::from_millis(20);
        let task = TaskWait::start(lock.view().clone(), waker, None, Some(at));
        wait_until("the deadline rang", || woken.wakes() == 1);
        assert!(matches!(task.finish::<()>(), Err(AcquireError::Timeout)));
        assert_eq!(lock.queued(), 0);
        assert!(lock.unlock());
        assert_free(&lock);
    }
}

#[test]
fn test_task_at_its_tokens_deadline_sees_the_token_cancelled() {
    let _watchdog = watchdog("test_task_at_its_tokens_deadline_sees_the_token_cancelled");
    let lock = Lock::fair();
    assert!(lock.try_lock());
    let soon = Instant::now() + Duration::from_millis(20);
    let token = CancelToken::new(Some((soon, reason("deadline"))));
    let (woken, waker) = CountingWaker::new();
    let far = Instant::now() + Duration::from_secs(3600);
    let task = TaskWait::start(lock.view().clone(), waker, Some(token.clone()), Some(far));
    wait_until("the token's deadline rang", || woken.wakes() == 1);
    assert!(token.is_cancelled());
    match task.finish::<()>() {
        Err(AcquireError::Cancelled(r)) => assert_eq!(label(&r), "deadline"),
        other => panic!("expected Cancelled, got {other:?}"),
    }
    assert!(lock.unlock());
    assert_free(&lock);
}

#[test]
fn test_settled_task_unregisters_from_its_token() {
    for lock in both() {
        let token = CancelToken::default();
        // Granted, then finished.
        assert!(lock.try_lock());
        let task = task_with(&lock, Some(token.clone()), None);
        assert!(lock.unlock());
        assert!(task.finish::<()>().is_ok());
        assert_eq!(token.registrations(), 0, "finish left the waker registered");
        assert!(lock.unlock());
        // Given up, and dropped unsettled.
        assert!(lock.try_lock());
        let task = task_with(&lock, Some(token.clone()), None);
        task.give_up();
        assert_eq!(
            token.registrations(),
            0,
            "give_up left the waker registered"
        );
        let task = task_with(&lock, Some(token.clone()), Some(Instant::now() + PATIENCE));
        assert_eq!(token.registrations(), 1);
        drop(task);
        assert_eq!(token.registrations(), 0, "drop left the waker registered");
        assert!(lock.unlock());
        assert_free(&lock);
        // A grant that races the cancel is passed on; the token is not touched.
        assert!(lock.try_lock());
        let cancelled = CancelToken::default();
        let task = task_with(&lock, Some(cancelled.clone()), None);
        assert!(lock.unlock());
        cancelled.cancel(reason("late"));
        assert!(matches!(
            task.finish::<()>(),
            Err(AcquireError::Cancelled(_))
        ));
        assert_free(&lock);
    }
}

#[test]
fn test_hold_tags_count_per_tag_and_come_back_after_every_untag() {
    // The embedding's tags (`async with` marks its hold with the loop's thread): each
    // tag is counted, an untag takes one off, an untag of a tag no hold carries changes
    // nothing, and the lock reads as untagged once every tag is off, however often the
    // same lock is tagged and untagged again.
    let lock = Lock::new();
    assert!(!lock.has_tagged_hold(1));
    for _ in 0..3 {
        lock.tag_hold(1);
        lock.tag_hold(1);
        lock.tag_hold(2);
        lock.untag_hold(3);
        assert!(lock.has_tagged_hold(1) && lock.has_tagged_hold(2));
        assert!(!lock.has_tagged_hold(3));
        lock.untag_hold(1);
        assert!(
            lock.has_tagged_hold(1),
            "one of tag 1's two holds is still tagged"
        );
        lock.untag_hold(2);
        assert!(!lock.has_tagged_hold(2));
        lock.untag_hold(1);
        assert!(!lock.has_tagged_hold(1));
        lock.untag_hold(1);
        assert!(!lock.has_tagged_hold(1) && !lock.has_tagged_hold(2));
    }
}
