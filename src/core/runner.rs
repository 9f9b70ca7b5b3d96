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

static RUNNERS: Runners = Runners {
    state: Mutex::new(State {
        queue: VecDeque::new(),
        idle: 0,
    }),
    work: Condvar::new(),
};

fn lock() -> MutexGuard<'static, State> {
    // Only this file's code runs under the mutex (jobs run outside it), and it does not
    // panic, so the state is consistent at every unlock point.
    RUNNERS.state.lock().unwrap_or_else(|e| e.into_inner())
}

/// Run `job` on a runner thread: an idle one, or a new one if all are busy. If no thread
/// can be started, `job` runs here, in the caller's thread.
pub(crate) fn run_elsewhere(job: Job) {
    let mut state = lock();
    state.queue.push_back(job);
    if state.queue.len() <= state.idle {
        drop(state);
        RUNNERS.work.notify_one();
        return;
    }
    state.idle += 1;
    let started = std::thread::Builder::new()
        .name("ctxlock-callback".into())
        .spawn(run);
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
fn run() {
    let mut state = lock();
    loop {
        if let Some(job) = state.queue.pop_front() {
            state.idle -= 1;
            drop(state);
            run_one(job);
            state = lock();
            state.idle += 1;
            continue;
        }
        let (s, waited) = RUNNERS
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

/// In a forked child: the runner threads are gone. Jobs queued for them run on new ones.
pub(crate) fn after_fork_in_child() {
    // If a runner of the parent held the mutex at the fork, nothing can be mended (the
    // critical sections are a few instructions long).
    let Ok(mut state) = RUNNERS.state.try_lock() else {
        return;
    };
    state.idle = 0;
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
}
