//! The binding's one piece of asyncio bookkeeping on a lock: which event loops' tasks
//! hold it by `async with` (see [`TaskOwner`]).

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;

use super::blocking::thread_ident;
use super::kind::DynKind;

/// Self-deadlock detection: a hold taken by `async with` in a task is tagged with the
/// thread of the task's event loop, from `__aenter__` until its `__aexit__`.
///
/// The rule: a blocking acquire raises `RuntimeError` instead of waiting exactly when
/// its wait could never end: it has no deadline and no token, it runs on a thread whose
/// event loop has a task holding the lock by `async with`, and it has to wait. That
/// hold ends only with the task's `__aexit__`, which runs on this loop, which this wait
/// blocks. Nothing else is a provable deadlock, so nothing else raises: a wait with a
/// deadline or a token ends (with `LockTimeout` or `Cancelled`), and a hold owned by an
/// `Unlock` may be released from any thread (the task may have handed it to one). Which
/// waits only a release can end is the core driver's to say
/// (`core::acquire::only_a_release_ends`); the tags are this file's.
pub(crate) struct TaskOwner;

impl TaskOwner {
    /// Tag a hold just taken by `async with`.
    pub(crate) fn set(kind: &(impl DynKind + ?Sized)) {
        kind.tag_hold(thread_ident());
    }

    /// Untag a hold that `__aexit__` (on the loop's thread) released.
    pub(crate) fn clear(kind: &(impl DynKind + ?Sized)) {
        kind.untag_hold(thread_ident());
    }

    pub(crate) fn check(kind: &(impl DynKind + ?Sized)) -> PyResult<()> {
        if kind.has_tagged_hold(thread_ident()) {
            return Err(PyRuntimeError::new_err(
                "deadlock: a blocking acquire with no deadline and no token on an event \
                 loop's thread, while a task of that loop holds the lock by `async with`; \
                 use `await lock.acquire_async()` in the event loop",
            ));
        }
        Ok(())
    }
}
