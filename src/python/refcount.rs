//! Reference counts changed as CPython's own headers change them, for the few counts on
//! the path of every acquire and release.
//!
//! With a GIL, PyO3's `Py_INCREF` and `Py_DECREF` are the headers' inline functions. On
//! the free-threaded build PyO3 calls the interpreter's `_Py_IncRef` and `_Py_DecRef`
//! instead (pyo3-ffi leaves reimplementing the header as a to-do): a call into the
//! interpreter for every count. An `unlock = lock.acquire(); unlock()` pair changes three
//! (the `Unlock`'s reference to its lock, taken and given back, and the `None` that
//! `unlock()` returns), `with lock:` two. Here they are the header's inline code, which
//! every C extension built for the free-threaded interpreter compiles in: an immortal
//! object is left alone; the thread that owns the object (`ob_tid`) changes its local
//! count with a plain store; any other thread adds to the shared count atomically, or
//! lets the interpreter's `_Py_DecRefShared` take a reference away. Only on Linux on
//! x86-64 and aarch64, where the thread's id is read here as CPython reads it and where
//! this is built and tested; elsewhere PyO3's functions are used.

#[cfg(all(Py_GIL_DISABLED, not(Py_LIMITED_API)))]
use std::sync::atomic::{AtomicUsize, Ordering};

use pyo3::ffi;
use pyo3::prelude::*;

/// Whether the counts are changed inline here (else PyO3's functions do it): the
/// free-threaded build, where `thread_id` reads the thread's id as the header does.
#[cfg(all(Py_GIL_DISABLED, not(Py_LIMITED_API)))]
const INLINE: bool = cfg!(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
));

/// Take a reference to `op`.
///
/// # Safety
/// Attached, and `op` a live object.
#[inline(always)]
pub(crate) unsafe fn incref(op: *mut ffi::PyObject) {
    #[cfg(all(Py_GIL_DISABLED, not(Py_LIMITED_API)))]
    if INLINE {
        // SAFETY: a live object (the contract).
        let ob = unsafe { &*op };
        // ORDERING: Relaxed, as the header's: only the owning thread changes the local
        // count (other threads read it only to see whether the object is immortal, which
        // never changes back).
        let local = ob.ob_ref_local.load(Ordering::Relaxed);
        let Some(new_local) = local.checked_add(1) else {
            return; // u32::MAX: immortal
        };
        // SAFETY: a live object (the contract).
        if unsafe { owned_here(op) } {
            // ORDERING: as above.
            ob.ob_ref_local.store(new_local, Ordering::Relaxed);
        } else {
            // ORDERING: the header's sequentially consistent add (on x86-64 and aarch64
            // the same instruction as any other order of an add).
            ob.ob_ref_shared
                .fetch_add(1 << REF_SHARED_SHIFT, Ordering::SeqCst);
        }
        return;
    }
    // SAFETY: this function's contract.
    unsafe { ffi::Py_INCREF(op) }
}

/// Give back a reference to `op`; the last one frees it.
///
/// # Safety
/// Attached, and the caller owns a reference to `op`, which it gives up.
#[inline(always)]
pub(crate) unsafe fn decref(op: *mut ffi::PyObject) {
    #[cfg(all(Py_GIL_DISABLED, not(Py_LIMITED_API)))]
    if INLINE {
        // SAFETY: a live object (the caller's reference).
        let ob = unsafe { &*op };
        // ORDERING: as in `incref`.
        let local = ob.ob_ref_local.load(Ordering::Relaxed);
        if local == u32::MAX {
            return; // immortal
        }
        // SAFETY: a live object (the caller's reference).
        if unsafe { owned_here(op) } {
            // ORDERING: as in `incref`.
            ob.ob_ref_local.store(local - 1, Ordering::Relaxed);
            if local == 1 {
                // SAFETY: attached; the local count reached zero, as the function expects
                // (it frees the object or merges the shared count).
                unsafe { _Py_MergeZeroLocalRefcount(op) };
            }
        } else {
            // SAFETY: attached, and the caller's reference, given up.
            unsafe { _Py_DecRefShared(op) };
        }
        return;
    }
    // SAFETY: this function's contract.
    unsafe { ffi::Py_DECREF(op) }
}

/// A new reference to `None`. Immortal since CPython 3.12 (there the count is looked at
/// and left alone); counted on 3.11.
#[inline(always)]
pub(crate) fn none(_py: Python<'_>) -> *mut ffi::PyObject {
    // SAFETY: attached (`_py`); `None` lives forever.
    unsafe {
        let none = ffi::Py_None();
        incref(none);
        none
    }
}

/// A new owned reference to the object `obj` borrows.
#[inline(always)]
pub(crate) fn clone_ref<T>(obj: &Bound<'_, T>) -> Py<T> {
    // SAFETY: attached (a `Bound`), and the object is live while borrowed.
    unsafe {
        incref(obj.as_ptr());
        Bound::from_owned_ptr(obj.py(), obj.as_ptr())
            .cast_into_unchecked::<T>()
            .unbind()
    }
}

/// Whether the calling thread owns `op`'s local count (the header's
/// `_Py_IsOwnedByCurrentThread`): its `ob_tid` is the thread's id, which CPython takes
/// to be the thread pointer.
///
/// # Safety
/// `op` is a live object.
#[cfg(all(Py_GIL_DISABLED, not(Py_LIMITED_API)))]
#[inline(always)]
unsafe fn owned_here(op: *mut ffi::PyObject) -> bool {
    // SAFETY: `ob_tid` is an aligned word inside the live object. CPython writes it only
    // when the object is made or its owner thread ends (another thread's object then
    // has no owner); an atomic read of it, Relaxed as the header's plain read, is a plain
    // load.
    let tid = unsafe { AtomicUsize::from_ptr(std::ptr::addr_of_mut!((*op).ob_tid)) }
        .load(Ordering::Relaxed);
    tid == thread_id()
}

/// The calling thread's id as CPython's `_Py_ThreadId` reads it on Linux: the thread
/// pointer.
#[cfg(all(Py_GIL_DISABLED, not(Py_LIMITED_API)))]
#[inline(always)]
fn thread_id() -> usize {
    let tid: usize;
    // SAFETY: reads the thread pointer, as the header does: the first word of the
    // thread control block on x86-64 (`fs:0` holds the pointer itself), the thread
    // pointer register on aarch64; no other state is touched.
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    unsafe {
        std::arch::asm!(
            "mov {}, fs:0",
            out(reg) tid,
            options(nostack, readonly, preserves_flags, pure),
        );
    }
    #[cfg(all(target_os = "linux", target_arch = "aarch64"))]
    // SAFETY: as above.
    unsafe {
        std::arch::asm!(
            "mrs {}, tpidr_el0",
            out(reg) tid,
            options(nostack, nomem, preserves_flags, pure),
        );
    }
    #[cfg(not(all(
        target_os = "linux",
        any(target_arch = "x86_64", target_arch = "aarch64")
    )))]
    {
        tid = 0; // never compared: `INLINE` is false here
    }
    tid
}

/// The header's `_Py_REF_SHARED_SHIFT`: the shared count's low bits are flags.
#[cfg(all(Py_GIL_DISABLED, not(Py_LIMITED_API)))]
const REF_SHARED_SHIFT: isize = 2;

#[cfg(all(Py_GIL_DISABLED, not(Py_LIMITED_API)))]
extern "C" {
    /// The interpreter's end of a local count that reached zero (exported; pyo3-ffi does
    /// not declare it).
    fn _Py_MergeZeroLocalRefcount(op: *mut ffi::PyObject);
    /// The interpreter's decrement by a thread that does not own the object (exported;
    /// pyo3-ffi does not declare it).
    fn _Py_DecRefShared(op: *mut ffi::PyObject);
}
