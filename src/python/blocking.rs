//! The single "wait with the GIL released, wake for signals" helper every blocking call uses.
//!
//! The GIL is released only here, after the fast path failed. In the main thread the
//! wait is cut into `SIGNAL_SLICE` slices; after each the thread re-attaches and runs
//! `PyErr_CheckSignals`, so Ctrl-C and other handlers run within about one slice (the
//! parkers swallow EINTR, so a signal alone does not end the park). Other threads wait
//! in one piece: Python runs signal handlers only in the main thread.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use pyo3::prelude::*;

use crate::core::acquire;
use crate::core::cancel::CancelToken;
use crate::core::error::AcquireError;
use crate::core::park::Interrupt;
use crate::core::raw::{Compete, RawLock};
use crate::core::wait::Wait;

/// How often a blocked main thread runs signal handlers.
pub(crate) const SIGNAL_SLICE: Duration = Duration::from_millis(20);

static NEXT_THREAD: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// A process-unique number for the calling thread (never 0).
    // ORDERING: Relaxed: RMWs on one atomic never hand out the same value twice, and
    // the number orders nothing.
    static THREAD: u64 = NEXT_THREAD.fetch_add(1, Ordering::Relaxed);
    /// Whether this is Python's main thread, asked once per thread on the slow path.
    static MAIN: Cell<Option<bool>> = const { Cell::new(None) };
}

/// A process-unique number for the calling thread.
pub(crate) fn thread_ident() -> u64 {
    THREAD.with(|t| *t)
}

fn in_main_thread(py: Python<'_>) -> bool {
    MAIN.with(|main| {
        if let Some(m) = main.get() {
            return m;
        }
        let ask = || -> PyResult<bool> {
            let threading = py.import("threading")?;
            Ok(threading
                .call_method0("current_thread")?
                .is(&threading.call_method0("main_thread")?))
        };
        let m = ask().unwrap_or(false);
        main.set(Some(m));
        m
    })
}

fn check_signals() -> Result<(), PyErr> {
    Python::attach(|py| py.check_signals())
}

/// The interrupt a wait of this thread passes into the core: running signal handlers
/// every `SIGNAL_SLICE` in the main thread, none elsewhere.
fn interrupt(py: Python<'_>) -> Option<Interrupt<PyErr>> {
    in_main_thread(py).then_some(Interrupt {
        every: SIGNAL_SLICE,
        check: check_signals,
    })
}

/// Block until `park` returns, with the GIL released, running signal handlers in the main
/// thread. `park` gets the interrupt to pass into the core's wait.
pub(crate) fn detached<T: Send>(
    py: Python<'_>,
    park: impl FnOnce(Option<Interrupt<PyErr>>) -> T + Send,
) -> T {
    let interrupt = interrupt(py);
    py.detach(move || park(interrupt))
}

/// When a woken thread competes: after taking the GIL back, which may take up to the
/// interpreter's switch interval; without a GIL that is at once.
#[cfg(not(Py_GIL_DISABLED))]
const COMPETE: Compete = Compete::Later;
#[cfg(Py_GIL_DISABLED)]
const COMPETE: Compete = Compete::AtOnce;

/// How many times a thread that found the lock taken yields before it looks again and
/// queues if it is still taken (see `acquire::spin`): as CPython's `PyMutex`, 40 without
/// a GIL and none with one (the holder could not run while the spinner holds the GIL).
/// Spins also let a thread woken to compete that lost watch the lock briefly before it
/// parks again (`acquire::watch`), which without a GIL is where it runs beside the holder.
#[cfg(not(Py_GIL_DISABLED))]
const SPINS: u32 = 0;
#[cfg(Py_GIL_DISABLED)]
const SPINS: u32 = 40;

/// The slow path of a blocking acquire.
///
/// A waiter that a release wakes to compete for the free slot (the barging policy)
/// competes only once it has the GIL back. Were it to take the slot while detached, it
/// could not use it before the GIL's holder let go of the interpreter, and that holder,
/// running the same loop, would block on the very next acquire: every such steal costs
/// two thread switches, and under contention they chain into a convoy of switches
/// (`threading.Lock` behaves so). Competing with the GIL held, a waiter gets the slot
/// when the holder is between holds at an interpreter switch, as plain Python code does.
/// While it waits for the GIL it stays queued, so the first release after it has waited
/// `FAIR_AFTER` hands it the slot (the holder's next acquire then blocks and lets it
/// run): its wait is bounded by about 1 ms, not by the interpreter's switch interval.
pub(crate) fn lock<L: RawLock>(
    py: Python<'_>,
    lock: &L,
    cancel: Option<&CancelToken>,
    deadline: Option<Instant>,
) -> Result<(), AcquireError<PyErr>> {
    let wait = Wait {
        deadline,
        cancel,
        interrupt: interrupt(py),
    };
    acquire::block(lock, wait, COMPETE, SPINS, |waiting| {
        py.detach(|| waiting.step())
    })
}
