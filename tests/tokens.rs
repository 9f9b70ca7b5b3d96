//! The token tree at any depth, where callbacks run, and callbacks on tokens that
//! nothing else references.
#![cfg(not(loom))] // loom's types only work inside `loom::model`.

mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use ctxlock::{CancelToken, Lock};
use support::{label, reason, wait_until, watchdog, PATIENCE};

/// Deep enough to overflow any thread's stack if a walk or a drop recursed.
const DEPTH: usize = if cfg!(miri) { 2_000 } else { 1_000_000 };

fn chain(root: &CancelToken, depth: usize) -> CancelToken {
    let mut scope = root.clone();
    for _ in 0..depth {
        scope = scope.child(Some((
            Instant::now() + Duration::from_secs(30),
            reason("own"),
        )));
    }
    scope
}

#[test]
fn test_a_deep_chain_is_cancelled_by_a_call() {
    let _watchdog = watchdog("test_a_deep_chain_is_cancelled_by_a_call");
    let root = CancelToken::default();
    let leaf = chain(&root, DEPTH);
    let (tx, rx) = mpsc::channel();
    leaf.on_cancel(move |r| tx.send(label(r)).unwrap());
    assert!(root.cancel(reason("stop")));
    assert_eq!(rx.try_recv(), Ok("stop"));
    assert!(leaf.is_cancelled());
}

#[test]
fn test_a_deep_chain_is_cancelled_by_its_deadline() {
    let _watchdog = watchdog("test_a_deep_chain_is_cancelled_by_its_deadline");
    // If building takes longer than the deadline, the later children are born
    // cancelled: still no failure.
    let root = CancelToken::new(Some((
        Instant::now() + Duration::from_millis(500),
        reason("deadline"),
    )));
    let leaf = chain(&root, DEPTH);
    // The timer thread's stack (2 MiB) is the one a recursive walk overflowed first.
    let until = Some(Instant::now() + PATIENCE);
    assert_eq!(leaf.wait::<()>(until, None), Ok(true));
    assert_eq!(label(&leaf.reason().unwrap()), "deadline");
}

#[test]
fn test_a_deep_chain_is_freed_from_either_end() {
    let _watchdog = watchdog("test_a_deep_chain_is_freed_from_either_end");
    let root = CancelToken::default();
    let leaf = chain(&root, DEPTH);
    drop(leaf); // the whole chain goes with its last handle
    assert_eq!(root.registrations(), 0);
    let root = CancelToken::default();
    let leaf = chain(&root, DEPTH);
    drop(root);
    drop(leaf);
    // A chain kept by callbacks on its unreferenced tokens is freed when they run.
    let root = CancelToken::default();
    let mut scope = root.clone();
    for _ in 0..DEPTH {
        scope = scope.child(None);
        scope.on_cancel(|_| {});
    }
    drop(scope);
    root.cancel(reason("stop"));
    assert_eq!(root.registrations(), 0);
}

/// A token, referenced by nothing, whose deadline's user callback blocks until the
/// returned sender is dropped (at most twice [`PATIENCE`], longer than any wait of the
/// test: a wait for something it delays fails); returns once the callback runs.
fn blocked_callback() -> mpsc::Sender<()> {
    let (release, released) = mpsc::channel::<()>();
    let (started_tx, started) = mpsc::channel();
    let token = CancelToken::new(Some((
        Instant::now() + Duration::from_millis(100),
        reason("blocker"),
    )));
    token
        .on_cancel_user(move |_| {
            started_tx.send(()).unwrap();
            let _ = released.recv_timeout(2 * PATIENCE);
        })
        .expect("registered after the deadline");
    started
        .recv_timeout(PATIENCE)
        .expect("the blocking callback never started");
    release
}

#[test]
fn test_a_blocked_user_callback_delays_no_other_deadline() {
    let _watchdog = watchdog("test_a_blocked_user_callback_delays_no_other_deadline");
    let release = blocked_callback();
    let (tx, rx) = mpsc::channel();
    let tokens: Vec<CancelToken> = (0..3)
        .map(|_| {
            CancelToken::new(Some((
                Instant::now() + Duration::from_millis(50),
                reason("d"),
            )))
        })
        .collect();
    let mut keeps = Vec::new();
    for (i, t) in tokens.iter().enumerate() {
        let tx = tx.clone();
        let internal = tx.clone();
        t.on_cancel(move |_| internal.send(("internal", i)).unwrap());
        // Each user callback blocks too (until the test ends): none may wait for another.
        let (keep, blocked) = mpsc::channel::<()>();
        keeps.push(keep);
        t.on_cancel_user(move |_| {
            tx.send(("user", i)).unwrap();
            let _ = blocked.recv_timeout(PATIENCE);
        });
    }
    let mut got: Vec<_> = (0..6)
        .map(|_| {
            rx.recv_timeout(PATIENCE)
                .expect("a deadline waited for a callback")
        })
        .collect();
    got.sort();
    let want: Vec<_> = ["internal", "user"]
        .into_iter()
        .flat_map(|k| (0..3).map(move |i| (k, i)))
        .collect();
    assert_eq!(got, want);
    assert!(tokens.iter().all(CancelToken::is_cancelled));
    drop((release, keeps));
}

#[test]
fn test_a_blocked_user_callback_delays_no_flag_waiter_or_release() {
    let _watchdog = watchdog("test_a_blocked_user_callback_delays_no_flag_waiter_or_release");
    let release = blocked_callback();
    let lock = Lock::new();
    let hold = Arc::new(lock.view().acquire(ctxlock::forever()).unwrap());
    let token = CancelToken::new(Some((
        Instant::now() + Duration::from_millis(50),
        reason("d"),
    )));
    hold.unlock_on_cancel(&token);
    // Nobody waits on the token: only the timer can see its deadline.
    wait_until("the token is cancelled", || token.is_cancelled());
    wait_until("the hold is released", || hold.released());
    assert!(!lock.view().is_locked());
    drop(release);
}

#[test]
fn test_an_explicit_cancel_runs_user_callbacks_in_its_thread_after_internal_ones() {
    let parent = CancelToken::default();
    let child = parent.child(None);
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let me = std::thread::current().id();
    for (t, name) in [(&parent, "parent"), (&child, "child")] {
        let o = order.clone();
        t.on_cancel_user(move |_| {
            assert_eq!(std::thread::current().id(), me);
            o.lock().unwrap().push(("user", name));
        });
        let o = order.clone();
        t.on_cancel(move |_| o.lock().unwrap().push(("internal", name)));
    }
    parent.cancel(reason("stop"));
    let order = order.lock().unwrap();
    assert_eq!(order.len(), 4);
    assert!(
        order[..2].iter().all(|(k, _)| *k == "internal"),
        "{order:?}"
    );
    assert_eq!(order[2..], [("user", "parent"), ("user", "child")]);
}

#[test]
fn test_callbacks_of_unreferenced_tokens_still_run() {
    let _watchdog = watchdog("test_callbacks_of_unreferenced_tokens_still_run");
    let parent = CancelToken::default();
    let ran = Arc::new(AtomicBool::new(false));
    let r = ran.clone();
    // ORDERING: SeqCst for these flags: plain test bookkeeping.
    let _ = parent
        .child(None)
        .on_cancel_user(move |_| r.store(true, Ordering::SeqCst));
    assert_eq!(
        parent.registrations(),
        1,
        "the child was freed with its callback"
    );
    parent.cancel(reason("stop"));
    assert!(ran.load(Ordering::SeqCst));
    assert_eq!(parent.registrations(), 0);

    let (tx, rx) = mpsc::channel();
    let deadline = Some((
        Instant::now() + Duration::from_millis(20),
        reason("deadline"),
    ));
    let _ = CancelToken::new(deadline).on_cancel_user(move |r| tx.send(label(r)).unwrap());
    assert_eq!(rx.recv_timeout(PATIENCE), Ok("deadline"));
}

#[test]
fn test_tokens_with_nothing_registered_are_freed() {
    let parent = CancelToken::default();
    let deadline = || Some((Instant::now() + Duration::from_secs(3600), reason("d")));
    drop(parent.child(deadline()));
    assert_eq!(parent.registrations(), 0);
    // Registered, then unregistered: no longer kept.
    let registration = parent.child(deadline()).on_cancel_user(|_| {}).unwrap();
    assert_eq!(parent.registrations(), 1);
    assert!(registration.unregister());
    assert_eq!(parent.registrations(), 0);
    // A root without a deadline cannot be cancelled once its handles are gone: its
    // callback is freed with it.
    let captured = Arc::new(());
    let c = captured.clone();
    let root = CancelToken::default();
    let _ = root.on_cancel_user(move |_| drop(c));
    drop(root);
    assert_eq!(Arc::strong_count(&captured), 1);
}
