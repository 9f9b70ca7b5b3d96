//! Callback runner threads: where the user callbacks of a deadline run.
//!
//! The timer thread (and a waiting thread that sees a deadline pass first) only does a
//! token's own work: it sets the flag and reason and runs the internal callbacks (unpark
//! a thread, ring a doorbell, release a lock). User callbacks may block for as long as
//! they like, so each is handed to a runner here: an idle one if there is one, else a new
//! thread. So one blocked callback never delays another (Go runs each `AfterFunc` on its
//! own goroutine), and a quiet process keeps no threads: a runner exits after
//! [`IDLE_EXIT`] without work.
//!
//! Hand-rolled rather than a pool crate: the pools that fit (e.g. `blocking`) cap their
//! threads, which would let that many blocked callbacks delay the next one again, and
//! bring an async executor the core does not need; this is one queue and a condvar.

use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

type Job = Box<dyn FnOnce() + Send>;

/// How long a runner with nothing to do waits for work before its thread exits.
const IDLE_EXIT: Duration = Duration::from_secs(10);

struct Runners {
    state: Mutex<State>,
    /// Signalled once per job queued for an idle runner.
    work: Condvar,
}

struct State {
    /// Jobs not yet taken by a runner.
    queue: VecDeque<Job>,
    /// Runners not running a job: waiting on `work`, just woken, or just started.
    /// Invariant: `queue.len() <= idle`. A job is queued only for a runner counted here
    /// (an idle one, or a new one counted as it is started), and every such runner looks
    /// at the queue before it waits or exits, so no job waits for a busy runner.
    idle: usize,
}

impl Runners {
    const fn new() -> Runners {
        Runners {
            state: Mutex::new(State {
                queue: VecDeque::new(),
                idle: 0,
            }),
            work: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Only this file's code runs under the mutex (jobs run outside it), and it does
        // not panic, so the state is consistent at every unlock point.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The parent process's runners (and a process that never forks).
static FIRST: Runners = Runners::new();

/// The runners of this process. A pointer rather than a plain static so that a forked
/// child can replace them (`after_fork_in_child`): a runner of the parent may hold the
/// mutex at the fork, and the child must not inherit a mutex that nobody will unlock.
/// Invariant: it always points to a `Runners` that is never freed (`FIRST`, or one that
/// a child leaked); a runner thread keeps the `Runners` it was started for.
static RUNNERS: AtomicPtr<Runners> = AtomicPtr::new(ptr::addr_of!(FIRST).cast_mut());

fn runners() -> &'static Runners {
    // ORDERING: Acquire pairs with the AcqRel swap in `after_fork_in_child`, so a child's
    // new runners are initialized before they are used.
    let r = RUNNERS.load(Ordering::Acquire);
    // SAFETY: RUNNERS always points to a `Runners` that is never freed (its invariant),
    // and a `Runners` is only ever used through shared references.
    unsafe { &*r }
}

/// Run `job` on a runner thread: an idle one, or a new one if all are busy. If no thread
/// can be started, `job` runs here, in the caller's thread.
pub(crate) fn run_elsewhere(job: Job) {
    let runners = runners();
    let mut state = runners.lock();
    state.queue.push_back(job);
    if state.queue.len() <= state.idle {
        drop(state);
        runners.work.notify_one();
        return;
    }
    state.idle += 1;
    let started = std::thread::Builder::new()
        .name("ctxlock-callback".into())
        .spawn(move || run(runners));
    if started.is_err() {
        state.idle -= 1;
        // Ours: under the mutex since the push, and no runner could take it (the invariant
        // held before the push, and every other queued job has its own idle runner).
        let job = state.queue.pop_back();
        drop(state);
        if let Some(job) = job {
            run_one(job);
        }
    }
}

fn run_one(job: Job) {
    // A panicking callback must not take the runner's count with it; the panic hook has
    // already reported it.
    let _ = catch_unwind(AssertUnwindSafe(job));
}

/// A runner thread's loop: take jobs until there has been none for [`IDLE_EXIT`].
fn run(runners: &'static Runners) {
    let mut state = runners.lock();
    loop {
        if let Some(job) = state.queue.pop_front() {
            state.idle -= 1;
            drop(state);
            run_one(job);
            state = runners.lock();
            state.idle += 1;
            continue;
        }
        let (s, waited) = runners
            .work
            .wait_timeout(state, IDLE_EXIT)
            .unwrap_or_else(|e| e.into_inner());
        state = s;
        if waited.timed_out() && state.queue.is_empty() {
            state.idle -= 1;
            return;
        }
    }
}

/// In a forked child: the runner threads are gone. The child gets new, empty runners
/// (the old ones stay leaked). Jobs queued in the parent and not yet taken run on new
/// threads of the child, unless a runner of the parent held the old mutex at the fork:
/// then they cannot be reached and are dropped unrun (leaked with the old state). Either
/// way the child's own callbacks run.
pub(crate) fn after_fork_in_child() {
    let new: &'static Runners = Box::leak(Box::new(Runners::new()));
    // ORDERING: AcqRel: Release publishes the new runners to `runners`' Acquire (the child
    // has one thread now, but a test calls this beside other threads); Acquire makes the
    // old runners' fields visible to us.
    let old = RUNNERS.swap(ptr::from_ref(new).cast_mut(), Ordering::AcqRel);
    // SAFETY: as in `runners`; the old runners stay allocated forever.
    let old = unsafe { &*old };
    let Ok(mut state) = old.state.try_lock() else {
        return;
    };
    let pending = std::mem::take(&mut state.queue);
    drop(state);
    for job in pending {
        run_elsewhere(job);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    #[test]
    fn a_blocked_job_never_delays_the_next() {
        let (release_tx, release_rx) = mpsc::channel::<()>();
        let (started_tx, started_rx) = mpsc::channel();
        let (done_tx, done_rx) = mpsc::channel();
        let started = started_tx.clone();
        run_elsewhere(Box::new(move || {
            started.send(()).unwrap();
            let _ = release_rx.recv_timeout(Duration::from_secs(20));
        }));
        started_rx.recv_timeout(Duration::from_secs(10)).unwrap();
        for i in 0..3 {
            let done = done_tx.clone();
            run_elsewhere(Box::new(move || done.send(i).unwrap()));
        }
        let mut got: Vec<i32> = (0..3)
            .map(|_| done_rx.recv_timeout(Duration::from_secs(10)).unwrap())
            .collect();
        got.sort();
        assert_eq!(got, [0, 1, 2]);
        drop(release_tx);
    }

    /// A runner of the parent held the runners' mutex at the fork: the child must still
    /// run callbacks (before, `run_elsewhere` blocked forever on the inherited mutex).
    #[test]
    fn a_mutex_held_at_fork_does_not_block_the_child() {
        let (held_tx, held_rx) = mpsc::channel();
        let (release_tx, release_rx) = mpsc::channel::<()>();
        let old = runners();
        let holder = std::thread::spawn(move || {
            let guard = old.lock();
            held_tx.send(()).unwrap();
            let _ = release_rx.recv_timeout(Duration::from_secs(20));
            drop(guard);
        });
        held_rx.recv_timeout(Duration::from_secs(10)).unwrap();
        after_fork_in_child();
        let (done_tx, done_rx) = mpsc::channel();
        // From another thread, so that a `run_elsewhere` that blocks fails the test
        // instead of hanging it.
        std::thread::spawn(move || run_elsewhere(Box::new(move || done_tx.send(()).unwrap())));
        let ran = done_rx.recv_timeout(Duration::from_secs(10));
        drop(release_tx);
        holder.join().unwrap();
        ran.expect("a job never ran after the fork");
    }
}
