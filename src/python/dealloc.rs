//! What binding code may do while an object is being destroyed, or while a release
//! hands the lock to a task: both can happen in the middle of anything.
//!
//! A deallocator runs wherever the last reference goes: while an exception propagates
//! (`[lock.acquire()][5]`), inside a garbage collection, during interpreter shutdown.
//! A release that grants the lock to an asyncio task rings the task's doorbell, which
//! calls methods of its future; a release from a deallocator does so in that same state.
//! Python code run while an exception is set sees it as its own error (a C method that
//! returns a value with an exception set becomes `SystemError`), and an error it raises
//! or clears replaces the user's. So such code runs inside [`exception_set_aside`], and
//! code that only reports (the `ResourceWarning` of a forgotten `Unlock`) is skipped once
//! the interpreter is finalizing, when the modules it needs may already be torn down.

use pyo3::ffi;
use pyo3::prelude::*;

/// Run `f` with the exception being raised (if any) set aside, and put it back after,
/// also if `f` panics. Whatever `f` leaves set is discarded: `f` reports its own errors
/// (as unraisable) or returns them.
pub(crate) fn exception_set_aside<R>(py: Python<'_>, f: impl FnOnce(Python<'_>) -> R) -> R {
    let _saved = SavedException::take(py);
    f(py)
}

/// The exception that was set when it was taken; restored when dropped.
struct SavedException {
    #[cfg(Py_3_12)]
    exc: *mut ffi::PyObject,
    #[cfg(not(Py_3_12))]
    exc: [*mut ffi::PyObject; 3],
}

impl SavedException {
    fn take(_py: Python<'_>) -> SavedException {
        #[cfg(Py_3_12)]
        {
            // SAFETY: attached (`_py`); returns a new reference or NULL and clears the
            // indicator.
            let exc = unsafe { ffi::PyErr_GetRaisedException() };
            SavedException { exc }
        }
        #[cfg(not(Py_3_12))]
        {
            let mut exc = [std::ptr::null_mut(); 3];
            // SAFETY: attached (`_py`); fills in new references (or NULLs) and clears
            // the indicator.
            unsafe { ffi::PyErr_Fetch(&mut exc[0], &mut exc[1], &mut exc[2]) };
            SavedException { exc }
        }
    }
}

impl Drop for SavedException {
    fn drop(&mut self) {
        // Still attached: `take` borrowed a `Python` token that outlives this guard.
        #[cfg(Py_3_12)]
        // SAFETY: attached. Clearing drops anything `f` left set; setting steals the
        // reference `take` got (a NULL leaves the indicator clear).
        unsafe {
            ffi::PyErr_Clear();
            if !self.exc.is_null() {
                ffi::PyErr_SetRaisedException(self.exc);
            }
        }
        #[cfg(not(Py_3_12))]
        // SAFETY: attached. `PyErr_Restore` steals the three references `take` got,
        // replacing (and dropping) anything `f` left set; all NULL clears the indicator.
        unsafe {
            ffi::PyErr_Restore(self.exc[0], self.exc[1], self.exc[2]);
        }
    }
}

/// Whether the interpreter is shutting down (objects are then destroyed as modules are
/// torn down, and only what must happen should run).
pub(crate) fn finalizing() -> bool {
    #[cfg(Py_3_13)]
    // SAFETY: callable at any time.
    unsafe {
        ffi::Py_IsFinalizing() != 0
    }
    // The same function under its older name (public C API since 3.7, renamed in 3.13).
    #[cfg(all(not(Py_3_13), not(any(PyPy, GraalPy, Py_LIMITED_API))))]
    {
        extern "C" {
            fn _Py_IsFinalizing() -> std::ffi::c_int;
        }
        // SAFETY: callable at any time.
        unsafe { _Py_IsFinalizing() != 0 }
    }
    // Not exposed there: assume not (a warning attempted at shutdown is reported as
    // unraisable if it fails).
    #[cfg(all(not(Py_3_13), any(PyPy, GraalPy, Py_LIMITED_API)))]
    {
        false
    }
}
