//! Where the objects made on every acquire come from: an `Unlock` per acquire, a
//! `NamedLock` per `mgr.lock(name)`.
//!
//! PyO3's `freelist` option keeps freed objects in a list behind one process-wide mutex:
//! two atomic read-modify-writes per object made and two per object freed, with the GIL
//! too, and without a GIL one cache line that every thread fights over. That was a large
//! part of the uncontended `unlock = lock.acquire(); unlock()` on CPython 3.13+, whose
//! `threading.Lock` allocates nothing. So these classes get their own `tp_alloc` and
//! `tp_free` when the module is made ([`install`]), over a list that needs no atomics:
//!
//! - with a GIL: one list per class, which the GIL guards. CPython calls `tp_alloc` and
//!   `tp_free` only on a thread that holds the GIL.
//! - without a GIL (`Py_GIL_DISABLED`): one list per class per thread, as CPython's own
//!   free lists there. An object freed by another thread than the one that made it goes
//!   to the freeing thread's list. A thread that ends leaves its objects to the others
//!   (`ORPHANS`): its thread-local destructor runs without a Python thread state, so it
//!   cannot free them itself; the next thread that finds its own list empty takes them,
//!   and a thread that frees while more than `ORPHANS_KEPT` wait frees the extra ones.
//!
//! A list reuses an object the way `PyType_GenericAlloc` makes one (zeroed body,
//! `PyObject_Init`, tracked by the cyclic GC); what it cannot serve goes to the type's
//! own `tp_alloc`/`tp_free`, saved at installation. A PyO3 module lives in one
//! interpreter only (PyO3 refuses subinterpreters), so one GIL guards every list.

use std::os::raw::c_void;
use std::ptr;
use std::sync::OnceLock;

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::PyTypeInfo;

/// A class whose objects come from a [`FreeList`].
pub(crate) trait Pooled: PyTypeInfo {
    /// The class's own list.
    fn free_list() -> &'static FreeList;
}

/// Which list is whose: the index of a class's list in each thread's lists.
pub(crate) const UNLOCK: usize = 0;
pub(crate) const NAMED_LOCK: usize = 1;
const CLASSES: usize = 2;

/// Objects kept per list: enough for the holds a thread has at once, and for a few
/// threads taking turns.
const CAPACITY: usize = 32;

/// A class's type object and the slots it had before [`install`] (PyO3's).
struct Saved {
    ty: *mut ffi::PyTypeObject,
    alloc: ffi::allocfunc,
    free: ffi::freefunc,
}

// SAFETY: a type object is never freed and its slots are plain function pointers; the
// pointer is only compared, or used with an attached thread state.
unsafe impl Send for Saved {}
// SAFETY: as for `Send`: nothing in it is ever written after `install`.
unsafe impl Sync for Saved {}

/// One class's free objects: the list, and what to fall back on.
pub(crate) struct FreeList {
    /// The index of the class's list in each thread's lists (one list per class with a
    /// GIL, so unused there).
    #[cfg_attr(not(Py_GIL_DISABLED), allow(dead_code))]
    class: usize,
    saved: OnceLock<Saved>,
    #[cfg(not(Py_GIL_DISABLED))]
    objects: gil::Objects,
}

impl FreeList {
    /// The list of the class with index `class` (`UNLOCK`, `NAMED_LOCK`).
    pub(crate) const fn new(class: usize) -> FreeList {
        assert!(class < CLASSES);
        FreeList {
            class,
            saved: OnceLock::new(),
            #[cfg(not(Py_GIL_DISABLED))]
            objects: gil::Objects::new(),
        }
    }
}

/// A list of freed objects of one class.
///
/// # Invariants
/// `objects[..len]` are distinct objects of the class that were deallocated: their
/// memory is still allocated, the cyclic GC does not track them, nothing refers to them.
struct Slots {
    objects: [*mut ffi::PyObject; CAPACITY],
    len: usize,
}

impl Slots {
    const fn new() -> Slots {
        Slots {
            objects: [ptr::null_mut(); CAPACITY],
            len: 0,
        }
    }

    fn pop(&mut self) -> Option<*mut ffi::PyObject> {
        self.len = self.len.checked_sub(1)?;
        Some(self.objects[self.len])
    }

    /// False (and nothing kept) when full.
    fn push(&mut self, obj: *mut ffi::PyObject) -> bool {
        if self.len == CAPACITY {
            return false;
        }
        self.objects[self.len] = obj;
        self.len += 1;
        true
    }
}

/// Give `T`'s type the list's `tp_alloc` and `tp_free`. Called while the module is made,
/// before any object of `T` exists; a second call changes nothing.
pub(crate) fn install<T: Pooled>(py: Python<'_>) {
    let ty = T::type_object_raw(py);
    let list = T::free_list();
    // SAFETY: the thread is attached (`py`); `ty` is the class's type object, made by
    // PyO3 and never freed, and no object of it exists yet, so no allocation or free is
    // running through the slots being replaced.
    unsafe {
        let (Some(alloc), Some(free)) = ((*ty).tp_alloc, (*ty).tp_free) else {
            return; // never: a ready type has both (inherited)
        };
        if list.saved.set(Saved { ty, alloc, free }).is_ok() {
            (*ty).tp_alloc = Some(alloc_object::<T>);
            (*ty).tp_free = Some(free_object::<T>);
        }
    }
}

/// `tp_alloc`: a freed object of the class made new, else the type's own allocation.
///
/// # Safety
/// Called by CPython with an attached thread state, for `T`'s type (through its slot).
unsafe extern "C" fn alloc_object<T: Pooled>(
    ty: *mut ffi::PyTypeObject,
    nitems: ffi::Py_ssize_t,
) -> *mut ffi::PyObject {
    let list = T::free_list();
    let Some(saved) = list.saved.get() else {
        // SAFETY: as this function's; the standard allocation.
        return unsafe { ffi::PyType_GenericAlloc(ty, nitems) };
    };
    if nitems == 0 && ty == saved.ty {
        // SAFETY: attached (this function's contract).
        if let Some(obj) = unsafe { list.pop() } {
            // SAFETY: `obj` is a deallocated object of `ty` whose memory is ours (the
            // list's invariant). As `PyType_GenericAlloc`: a zeroed body (the GC's
            // header before it was left clean by the untrack), the type and one
            // reference, and tracked.
            unsafe {
                ptr::write_bytes(obj.cast::<u8>(), 0, (*ty).tp_basicsize as usize);
                ffi::PyObject_Init(obj, ty);
                if ffi::PyType_IS_GC(ty) != 0 {
                    ffi::PyObject_GC_Track(obj.cast());
                }
            }
            return obj;
        }
    }
    // SAFETY: as this function's.
    unsafe { (saved.alloc)(ty, nitems) }
}

/// `tp_free`: keep the object for the next `alloc_object` while the list has room, else
/// the type's own free.
///
/// # Safety
/// Called by CPython or PyO3's `tp_dealloc` with an attached thread state, for an
/// object of `T`'s type whose contents were dropped (as any `tp_free` is).
unsafe extern "C" fn free_object<T: Pooled>(obj: *mut c_void) {
    let list = T::free_list();
    let o = obj.cast::<ffi::PyObject>();
    let Some(saved) = list.saved.get() else {
        // SAFETY: as this function's (never: the slot is set after `saved`).
        return unsafe { ffi::PyObject_GC_Del(obj) };
    };
    // SAFETY: attached, and `o` is a dead object of the class (this function's contract).
    unsafe {
        if ffi::Py_TYPE(o) == saved.ty {
            if ffi::PyType_IS_GC(saved.ty) != 0 {
                // A no-op when the dealloc untracked it already (PyO3's does).
                ffi::PyObject_GC_UnTrack(obj);
            }
            if list.push(o) {
                return;
            }
        }
        (saved.free)(obj)
    }
}

#[cfg(not(Py_GIL_DISABLED))]
mod gil {
    use std::cell::UnsafeCell;

    use pyo3::ffi;

    use super::{FreeList, Slots};

    /// A class's one list; see `FreeList::pop`.
    pub(super) struct Objects(UnsafeCell<Slots>);

    // SAFETY: touched only with the GIL held (`pop` and `push`'s contract), which
    // serialises every access.
    unsafe impl Sync for Objects {}

    impl Objects {
        pub(super) const fn new() -> Objects {
            Objects(UnsafeCell::new(Slots::new()))
        }
    }

    impl FreeList {
        /// # Safety
        /// The caller holds the GIL.
        pub(super) unsafe fn pop(&self) -> Option<*mut ffi::PyObject> {
            // SAFETY: the GIL is held, so this is the only reference to the slots.
            unsafe { (*self.objects.0.get()).pop() }
        }

        /// # Safety
        /// The caller holds the GIL; `obj` is a dead object of the class.
        pub(super) unsafe fn push(&self, obj: *mut ffi::PyObject) -> bool {
            // SAFETY: as in `pop`.
            unsafe { (*self.objects.0.get()).push(obj) }
        }
    }
}

#[cfg(Py_GIL_DISABLED)]
mod per_thread {
    use std::cell::UnsafeCell;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex;

    use pyo3::ffi;

    use super::{FreeList, Slots, CLASSES};

    /// Objects of ended threads that wait for another thread, per class, beyond which a
    /// free gives the extra ones back to the allocator.
    const ORPHANS_KEPT: usize = 256;

    /// A thread's lists, one per class.
    struct Local([UnsafeCell<Slots>; CLASSES]);

    thread_local! {
        static LOCAL: Local = const { Local([const { UnsafeCell::new(Slots::new()) }; CLASSES]) };
    }

    /// Objects left by ended threads (addresses: raw pointers are not `Send`), per class,
    /// and how many there are.
    static ORPHANS: [Mutex<Vec<usize>>; CLASSES] = [const { Mutex::new(Vec::new()) }; CLASSES];
    static ORPHANED: [AtomicUsize; CLASSES] = [const { AtomicUsize::new(0) }; CLASSES];

    /// The thread ends: its objects go to `ORPHANS` (it has no thread state left to free
    /// them with).
    impl Drop for Local {
        fn drop(&mut self) {
            for (class, slots) in self.0.iter_mut().enumerate() {
                let slots = slots.get_mut();
                if slots.len == 0 {
                    continue;
                }
                let mut orphans = ORPHANS[class].lock().unwrap_or_else(|e| e.into_inner());
                orphans.extend(slots.objects[..slots.len].iter().map(|&o| o as usize));
                slots.len = 0;
                // ORDERING: a hint for `pop` and `push`; the mutex orders the objects.
                ORPHANED[class].store(orphans.len(), Ordering::Relaxed);
            }
        }
    }

    impl FreeList {
        /// # Safety
        /// The caller is attached to the interpreter.
        pub(super) unsafe fn pop(&self) -> Option<*mut ffi::PyObject> {
            let class = self.class;
            LOCAL
                .try_with(|local| {
                    // SAFETY: the thread's own list, and no other reference to it is live
                    // (nothing here calls back into Python).
                    let slots = unsafe { &mut *local.0[class].get() };
                    if slots.len == 0 {
                        // ORDERING: a hint; the mutex orders the objects themselves.
                        if ORPHANED[class].load(Ordering::Relaxed) > 0 {
                            adopt(class, slots);
                        }
                    }
                    slots.pop()
                })
                .ok()
                .flatten()
        }

        /// # Safety
        /// The caller is attached to the interpreter; `obj` is a dead object of the class.
        pub(super) unsafe fn push(&self, obj: *mut ffi::PyObject) -> bool {
            let class = self.class;
            // ORDERING: a hint, as in `pop`.
            if ORPHANED[class].load(Ordering::Relaxed) > ORPHANS_KEPT {
                // SAFETY: attached (this function's contract).
                unsafe { self.free_orphans() };
            }
            LOCAL
                .try_with(|local| {
                    // SAFETY: as in `pop`.
                    unsafe { (*local.0[class].get()).push(obj) }
                })
                .unwrap_or(false)
        }

        /// Give the orphans beyond `ORPHANS_KEPT` back to the allocator.
        ///
        /// # Safety
        /// The caller is attached to the interpreter.
        #[cold]
        unsafe fn free_orphans(&self) {
            let Some(saved) = self.saved.get() else {
                return;
            };
            let extra: Vec<usize> = {
                let mut orphans = ORPHANS[self.class]
                    .lock()
                    .unwrap_or_else(|e| e.into_inner());
                let keep = orphans.len().min(ORPHANS_KEPT);
                let extra = orphans.split_off(keep);
                // ORDERING: as in `Local::drop`.
                ORPHANED[self.class].store(orphans.len(), Ordering::Relaxed);
                extra
            };
            for o in extra {
                // SAFETY: attached; each is a dead object of the class that only the
                // list knew of (the invariant of `Slots`, which it came from).
                unsafe { (saved.free)(o as *mut std::os::raw::c_void) };
            }
        }
    }

    /// Move up to a list's worth of orphans into the thread's empty list.
    #[cold]
    fn adopt(class: usize, slots: &mut Slots) {
        let mut orphans = ORPHANS[class].lock().unwrap_or_else(|e| e.into_inner());
        while let Some(o) = orphans.pop() {
            if !slots.push(o as *mut ffi::PyObject) {
                orphans.push(o);
                break;
            }
        }
        // ORDERING: as in `Local::drop`.
        ORPHANED[class].store(orphans.len(), Ordering::Relaxed);
    }
}
