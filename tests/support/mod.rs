//! Helpers shared by the Rust integration and loom tests (cargo does not build
//! `tests/support/` as a test of its own). Each test file uses a part of it.
#![allow(dead_code)]

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::task::{Wake, Waker};
use std::time::{Duration, Instant};

use ctxlock::{CancelToken, Reason, Wait};
#[cfg(not(loom))]
use ctxlock::{Lock, LockView, SharableLock};

#[cfg(loom)]
pub mod critical;

/// How long a test waits for something that should happen at once before it fails
/// instead of hanging. Generous: it bounds a hang, it never measures speed.
pub const PATIENCE: Duration = Duration::from_secs(20);

/// How long a whole test may run before [`watchdog`] aborts the test binary.
pub const HANG: Duration = Duration::from_secs(60);

/// Abort the test binary if the test holding the returned guard runs past [`HANG`]:
/// a lost wake-up hangs a `forever()` wait, and a hang must fail, not stall CI.
/// Dropping the guard (the end of the test) stops the watch.
pub fn watchdog(test: &'static str) -> mpsc::Sender<()> {
    let (guard, watched) = mpsc::channel::<()>();
    std::thread::spawn(move || {
        if let Err(RecvTimeoutError::Timeout) = watched.recv_timeout(HANG) {
            eprintln!("{test} still runs after {HANG:?}: a lost wake-up? aborting");
            std::process::abort();
        }
    });
    guard
}

/// A cancellation reason carrying a label.
pub fn reason(label: &'static str) -> Reason {
    Arc::new(label)
}

/// The label of a reason made by [`reason`].
pub fn label(r: &Reason) -> &'static str {
    r.downcast_ref::<&'static str>()
        .copied()
        .expect("a reason made by support::reason")
}

/// Poll `cond` until it holds; panic after [`PATIENCE`] naming `what`.
pub fn wait_until(what: &str, cond: impl Fn() -> bool) {
    let give_up = Instant::now() + PATIENCE;
    while !cond() {
        assert!(Instant::now() < give_up, "gave up waiting until {what}");
        std::thread::sleep(Duration::from_micros(100));
    }
}

/// Wait at most `d` from now: no token, no interrupt.
pub fn for_at_most(d: Duration) -> Wait<'static, Infallible> {
    Wait {
        deadline: Some(Instant::now() + d),
        cancel: None,
        interrupt: None,
    }
}

/// Wait until `token` is cancelled, with no deadline of its own.
pub fn until_cancelled(token: &CancelToken) -> Wait<'_, Infallible> {
    Wait {
        deadline: None,
        cancel: Some(token),
        interrupt: None,
    }
}

/// A waker that counts how often it was woken.
#[derive(Default)]
pub struct CountingWaker(AtomicUsize);

impl CountingWaker {
    pub fn new() -> (Arc<CountingWaker>, Waker) {
        let counter = Arc::new(CountingWaker::default());
        (counter.clone(), Waker::from(counter))
    }

    pub fn wakes(&self) -> usize {
        // ORDERING: Relaxed; the tests read it after the grant they check, which is
        // ordered by the lock's own Release/Acquire.
        self.0.load(Ordering::Relaxed)
    }
}

impl Wake for CountingWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        // ORDERING: Relaxed; a count, it orders nothing.
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

struct NoopWaker;

impl Wake for NoopWaker {
    fn wake(self: Arc<Self>) {}
}

/// A waker that does nothing (`Waker::noop` needs Rust 1.85; the crate's MSRV is 1.83).
pub fn noop_waker() -> Waker {
    Waker::from(Arc::new(NoopWaker))
}

/// Run a loom model of three threads or more and report how many interleavings it
/// explored. The builder reads `LOOM_MAX_PREEMPTIONS` and the other `LOOM_*` settings
/// from the environment.
#[cfg(loom)]
pub fn model<F: Fn() + Sync + Send + 'static>(name: &str, f: F) {
    check(name, loom::model::Builder::new(), f);
}

/// Run a loom model with the preemption bound `bound`, whatever `LOOM_MAX_PREEMPTIONS`
/// says: for a model whose bug needs more preemptions than the default and that is
/// still quick with them.
#[cfg(loom)]
pub fn model_bounded<F: Fn() + Sync + Send + 'static>(name: &str, bound: usize, f: F) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(bound);
    check(name, builder, f);
}

/// Run a loom model of two threads with no preemption bound, whatever
/// `LOOM_MAX_PREEMPTIONS` says: every interleaving, still in milliseconds.
#[cfg(loom)]
pub fn model_exhaustive<F: Fn() + Sync + Send + 'static>(name: &str, f: F) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = None;
    check(name, builder, f);
}

#[cfg(loom)]
fn check<F: Fn() + Sync + Send + 'static>(name: &str, builder: loom::model::Builder, f: F) {
    let bound = builder.preemption_bound;
    let iterations = Arc::new(AtomicUsize::new(0));
    let counted = iterations.clone();
    let started = Instant::now();
    builder.check(move || {
        // ORDERING: Relaxed; loom runs the iterations one after another on this thread.
        counted.fetch_add(1, Ordering::Relaxed);
        f();
    });
    eprintln!(
        "loom model {name} (preemption bound {bound:?}): {} iterations in {:.2?}",
        // ORDERING: Relaxed; `check` has returned, so every increment is ours already.
        iterations.load(Ordering::Relaxed),
        started.elapsed()
    );
}

/// A fresh exclusive view of each in-process kind: a barging `Lock`, a fair one, and a
/// `SharableLock`'s exclusive view.
#[cfg(not(loom))]
pub fn exclusive_views() -> [LockView; 3] {
    [
        Lock::new().view().clone(),
        Lock::fair().view().clone(),
        SharableLock::new().exclusive().clone(),
    ]
}
