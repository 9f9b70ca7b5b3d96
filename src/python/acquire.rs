//! The blocking `acquire(cancel, *, deadline, blocking)` and `with`, for any kind of lock.
//!
//! Every acquire runs the same three steps: parse the arguments (no clock), check the
//! token and try the kind's fast path with the GIL held (the core driver's rules,
//! `core/acquire.rs`); only if that fails does it go to the `#[cold]` contended path,
//! which reads the clock and releases the GIL while it waits. `with lock:` uses the fast
//! path directly and creates no `Unlock` object.

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;

use crate::core::acquire;
use crate::core::cancel::CancelToken;
use crate::core::deadline::Timeout;
use crate::core::error::AcquireError;
use crate::core::raw::RawLock;

use super::args;
use super::blocking;
use super::cancel;
use super::errors::to_pyerr;
use super::kind::{Held, Kind};
use super::task_owner::TaskOwner;

/// `acquire(cancel, *, deadline, blocking)` up to the hold; the caller wraps it. The
/// rules are the core driver's (`core/acquire.rs`); this parses and waits with the GIL
/// released.
#[inline]
pub(crate) fn lock<K: Kind>(
    py: Python<'_>,
    kind: &K,
    cancel: Option<&Bound<'_, PyAny>>,
    deadline: Option<&Bound<'_, PyAny>>,
    blocking: bool,
) -> PyResult<()> {
    if cancel.is_none() && deadline.is_none() && blocking {
        // The plain `acquire()`: nothing to parse or check.
        return lock_plain(py, kind);
    }
    let timeout = args::timeout(deadline, "deadline")?;
    let token = cancel::token(cancel)?.map(|t| &t.get().token);
    // PyO3 passes `deadline=None` as `None`: only a number counts as given.
    acquire::check_args(deadline.is_some(), blocking).map_err(|e| to_pyerr::<PyErr>(py, e))?;
    match acquire::try_first(kind, token, timeout, blocking) {
        Ok(true) => Ok(()),
        Ok(false) => lock_contended(py, kind, token, timeout),
        Err(e) => Err(to_pyerr::<PyErr>(py, e)),
    }
}

/// The wait of an acquire that may wait (the driver's rule 4).
#[cold]
fn lock_contended<K: Kind>(
    py: Python<'_>,
    kind: &K,
    token: Option<&CancelToken>,
    timeout: Timeout,
) -> PyResult<()> {
    acquire::check_backend(kind).map_err(|e| to_pyerr::<PyErr>(py, e))?;
    if acquire::only_a_release_ends(token, timeout) {
        TaskOwner::check(kind)?;
    }
    blocking::lock(py, kind, token, timeout.deadline()).map_err(|e| to_pyerr(py, e))
}

/// The plain `acquire()`: the CAS, else the contended path with no deadline and no token.
#[inline]
fn lock_plain<K: Kind>(py: Python<'_>, kind: &K) -> PyResult<()> {
    if RawLock::try_lock(kind) {
        return Ok(());
    }
    lock_contended(py, kind, None, Timeout::NEVER)
}

/// `__enter__`: the plain acquire, kept as a scoped hold (`LockView::scope_hold`), which
/// only an `__exit__`/`__aexit__` releases.
#[inline]
pub(crate) fn enter<K: Kind>(py: Python<'_>, kind: &K) -> PyResult<()> {
    lock_plain(py, kind)?;
    taken_up(py, kind.take_up(true)).map(drop)
}

/// `try_acquire()`: the driver's rule 1 for the lock and one try; the hold taken up as
/// an `Unlock`'s.
pub(crate) fn try_once<K: Kind>(py: Python<'_>, kind: &K) -> PyResult<Option<Held>> {
    acquire::check_backend::<K, PyErr>(kind).map_err(|e| to_pyerr(py, e))?;
    kind.try_take_up().map(|t| taken_up(py, t)).transpose()
}

/// `locked()`, `statistics()`: `BackendError` if the kind cannot say who holds and
/// waits (see `Kind::unanswerable`).
#[inline]
pub(crate) fn answerable<K: Kind>(py: Python<'_>, kind: &K) -> PyResult<()> {
    match kind.unanswerable() {
        None => Ok(()),
        Some(why) => Err(to_pyerr::<PyErr>(py, AcquireError::Backend(why))),
    }
}

/// `locked()`, `statistics()`: `f`'s answer, once `answerable`. A kind whose answer may
/// wait for other processes (`Kind::asks_others`) is asked with the GIL released: a
/// manager of this process may need the GIL to answer (to wake a task it granted a hold),
/// and nothing else should wait for it meanwhile.
#[inline]
pub(crate) fn answered<K: Kind + Sync, T: Send>(
    py: Python<'_>,
    kind: &K,
    f: impl FnOnce(&K) -> T + Send,
) -> PyResult<T> {
    answerable(py, kind)?;
    if kind.asks_others() {
        Ok(py.detach(|| f(kind)))
    } else {
        Ok(f(kind))
    }
}

/// A hold just acquired, taken up as scoped (`with`) or as an `Unlock`'s (see
/// `Kind::take_up`); a kind whose backend failed meanwhile raises its error.
/// `taken` is what `take_up` returned.
#[inline]
pub(crate) fn taken_up(py: Python<'_>, taken: Result<Held, String>) -> PyResult<Held> {
    taken.map_err(|why| to_pyerr::<PyErr>(py, AcquireError::Backend(why)))
}

/// `__exit__`/`__aexit__`: release a hold taken by `with`/`async with`, never one that
/// belongs to an `Unlock`.
#[inline]
pub(crate) fn exit<K: Kind>(kind: &K) -> PyResult<()> {
    if kind.unlock_scoped() {
        return Ok(());
    }
    if kind.failure().is_some() {
        // The hold ended with its backend (a closed manager): nothing is left to
        // release, and the `with` block's own exception must come out unchanged.
        return Ok(());
    }
    Err(PyRuntimeError::new_err(
        "release of a lock that is not held by a with statement",
    ))
}
