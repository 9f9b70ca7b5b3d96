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
//!   and a thread that frees while more than `ORPHANS_KEPT` wait frees the extra ones,
//!   each only if no other thread has them at that moment (a free list is never worth a
//!   wait, and a forked child may find their mutex held forever by a thread it lacks).
//!
//! A list reuses an object the way `PyType_GenericAlloc` makes one (zeroed body, new
//! reference counts); what it cannot serve goes to the type's own `tp_alloc`/`tp_free`,
//! saved at installation. A PyO3 module lives in one interpreter only (PyO3 refuses
//! subinterpreters), so one GIL guards every list.
//!
//! An object in a list keeps the reference to its (heap) type that it held alive, so
//! that making and freeing one touches no count but its own. Without a GIL this
//! matters: `PyObject_Init` counts the new reference to a heap type in the calling
//! thread's own array, while the deallocator's `Py_DECREF` of the type (PyO3's, and what
//! an extension can call) is an atomic on the type object, shared by every thread, and
//! hands the type to its owning thread's merge queue. Two threads making and freeing
//! `Unlock`s then contend for the type's cache line on every one.
//!
//! These objects are not tracked by the cyclic GC, wherever they were allocated
//! (`untracked`): PyO3's `tp_traverse` for a class without `__traverse__` visits only the
//! type, so the collector could learn nothing from them, and tracking is a list insertion
//! and removal per object.
//!
//! [`dealloc_object`] frees them without PyO3's deallocator (an attach count kept in a
//! thread-local, a panic guard, and the generic drop) when the class can take its value
//! apart itself (`Pooled::take_apart`); otherwise, and for an `Unlock` that still holds,
//! PyO3's deallocator runs. One difference: PyO3's entry points also give back the
//! references other threads dropped without the interpreter (its pool), and a program
//! that only ever calls the hand-written entry points and frees these objects now
//! leaves them there until it next calls any other method of the module.
//!
//! [`new_object`] makes these objects without PyO3's constructor, which calls
//! `object.__new__` with an empty argument tuple before it reaches `tp_alloc`, and checks
//! for an instance dict these classes do not have: about a tenth of a named lock's
//! `lock(name).acquire(); unlock()`. It writes the value where PyO3 keeps it, an offset
//! measured on an object PyO3 made ([`learn_layout`]), and only once the type's slots
//! show that the rest of the object is the weak reference list, which a zeroed body
//! leaves empty as PyO3 would. Otherwise it goes through PyO3.

use std::os::raw::c_void;
use std::ptr;
use std::sync::OnceLock;

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::pyclass::boolean_struct::True;
use pyo3::PyClass;

/// A class whose objects come from a [`FreeList`].
pub(crate) trait Pooled: PyClass {
    /// The class's own list.
    fn free_list() -> &'static FreeList;

    /// Whether the value of a dead object can be dropped by `take_apart`; if not, the
    /// object goes to PyO3's deallocator.
    fn parts_alone(&self) -> bool;

    /// Drop the value of a dead object (the thread attached, outside PyO3's attach
    /// count), releasing each Python reference it holds by a direct decref: a `Py`
    /// dropped outside that count would have its decref deferred to PyO3's pool.
    fn take_apart(self);
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
    dealloc: ffi::destructor,
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
    /// Where the class's value and its weak reference list sit in its objects, once
    /// `learn_layout` checked them.
    layout: OnceLock<Layout>,
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
            layout: OnceLock::new(),
            #[cfg(not(Py_GIL_DISABLED))]
            objects: gil::Objects::new(),
        }
    }
}

/// Offsets in an object of a class: of its value, and of its weak reference list, the
/// only other field of its body.
#[derive(Clone, Copy)]
struct Layout {
    value: usize,
    weaklist: usize,
}

/// A list of freed objects of one class.
///
/// # Invariants
/// `objects[..len]` are distinct objects of the class that were deallocated: their
/// memory is still allocated, the cyclic GC does not track them, nothing refers to them,
/// and each still holds one reference to the class's type (given up only when the object
/// goes back to the allocator: [`FreeList::give_back`]).
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
        let (Some(alloc), Some(free), Some(dealloc)) =
            ((*ty).tp_alloc, (*ty).tp_free, (*ty).tp_dealloc)
        else {
            return; // never: a ready type has all three (PyO3's or inherited)
        };
        let saved = Saved {
            ty,
            alloc,
            free,
            dealloc,
        };
        if list.saved.set(saved).is_ok() {
            (*ty).tp_alloc = Some(alloc_object::<T>);
            (*ty).tp_free = Some(free_object::<T>);
            (*ty).tp_dealloc = Some(dealloc_object::<T>);
        }
    }
}

/// Learn where `T`'s value sits in its objects from `sample`, an object PyO3 made, so
/// that [`new_object`] and [`dealloc_object`] can make and free them; false if it learned
/// nothing (then both leave it to PyO3): unless the type's slots show that what follows
/// the value is only the weak reference list (no instance dict, nothing PyO3 would
/// initialise to other than zero).
pub(crate) fn learn_layout<T: Pooled + PyClass<Frozen = True> + Sync>(
    sample: &Bound<'_, T>,
) -> bool {
    let list = T::free_list();
    let Some(saved) = list.saved.get() else {
        return false;
    };
    let word = std::mem::size_of::<*mut ffi::PyObject>();
    let offset = (sample.get() as *const T as usize).wrapping_sub(sample.as_ptr() as usize);
    let value_end = (offset + std::mem::size_of::<T>()).next_multiple_of(word);
    let header = std::mem::size_of::<ffi::PyObject>();
    // SAFETY: reading plain fields of a live type object (the class's, made by PyO3).
    let fits = unsafe {
        let ty = &*saved.ty;
        ffi::Py_TYPE(sample.as_ptr()) == saved.ty
            && offset >= header
            && ty.tp_itemsize == 0
            && ty.tp_dictoffset == 0
            && ty.tp_weaklistoffset as usize == value_end
            && ty.tp_basicsize as usize == value_end + word
    };
    if fits {
        let _ = list.layout.set(Layout {
            value: offset,
            weaklist: value_end,
        });
    }
    fits
}

/// A new object of `T` holding the value `make` returns: from the class's list (or its
/// `tp_alloc`), with the value written where PyO3 keeps it; through PyO3's constructor
/// until `learn_layout` has checked the layout. `make` runs exactly once, and never runs
/// Python; on failure its value is dropped after the error was fetched.
///
/// The value is made by `make` once the object is there, so that it can be built in place
/// (the `Unlock` is; the compiler kept a closure that made the `NamedLock` handle out of
/// line, so that one is still made by the caller and moved). A value made by the caller
/// and passed in was built on the stack by narrow stores and then copied by wide loads,
/// which the processor cannot forward from those stores: the copy waited for them to
/// reach the cache, about 3 ns of an uncontended `unlock = lock.acquire(); unlock()` on
/// CPython 3.14 (BENCHMARKS.md, "values built in place").
#[inline]
pub(crate) fn new_object<T>(py: Python<'_>, make: impl FnOnce() -> T) -> PyResult<Bound<'_, T>>
where
    T: Pooled + Into<pyo3::PyClassInitializer<T>>,
{
    let list = T::free_list();
    let (Some(saved), Some(&layout)) = (list.saved.get(), list.layout.get()) else {
        return Bound::new(py, make());
    };
    // SAFETY: attached (`py`), so the list may be used.
    let obj = match unsafe { list.pop() } {
        // SAFETY: a dead object of the class, ours (the list's invariant). Made new as
        // `alloc_object` does, but for the body: the value is written below, and the weak
        // reference list, the rest of it (`learn_layout`), is emptied here.
        Some(obj) => unsafe {
            revive(obj, saved.ty, std::mem::size_of::<ffi::PyObject>());
            ptr::write(
                obj.cast::<u8>()
                    .add(layout.weaklist)
                    .cast::<*mut ffi::PyObject>(),
                ptr::null_mut(),
            );
            obj
        },
        // SAFETY: attached, for the class's own type: the contract of `tp_alloc`, whose
        // objects have a zeroed body.
        None => unsafe { untracked((saved.alloc)(saved.ty, 0)) },
    };
    if obj.is_null() {
        // The value first, so that it exists (and its `Drop` gives back what it owns, an
        // `Unlock`'s hold) whatever the fetch does; dropped once the error is out, since
        // dropping it may run Python (an `Unlock` that holds releases, and may hand the
        // lock to a task).
        let value = make();
        let err = PyErr::fetch(py);
        drop(value);
        return Err(err);
    }
    // SAFETY: `obj` is a new object of `T`'s type whose weak reference list is empty;
    // `layout.value` is where its value goes, inside the object and aligned for `T`
    // (measured on an object of the same type by `learn_layout`, which also checked
    // that the rest of the body is the weak reference list). Writing the value completes
    // it as PyO3's constructor does; the object is then owned by the returned `Bound`.
    unsafe {
        ptr::write(obj.cast::<u8>().add(layout.value).cast::<T>(), make());
        Ok(Bound::from_owned_ptr(py, obj).cast_into_unchecked())
    }
}

/// `tp_dealloc`: the object's value taken apart by its class (`Pooled::take_apart`),
/// its weak references cleared and its memory kept or freed (`tp_free`), as PyO3's
/// deallocator does; PyO3's own when the class cannot take the value apart or the layout
/// was not learned.
///
/// # Safety
/// Called by CPython, attached, for a dead object of `T`'s type (its reference count 0).
unsafe extern "C" fn dealloc_object<T: Pooled>(obj: *mut ffi::PyObject) {
    let list = T::free_list();
    let Some(saved) = list.saved.get() else {
        return; // never: the slot is set after `saved`
    };
    // SAFETY: as this function's; the type's own slots and layout.
    unsafe {
        let ty = ffi::Py_TYPE(obj);
        let Some(&layout) = list.layout.get().filter(|_| ty == saved.ty) else {
            return (saved.dealloc)(obj);
        };
        let value = obj.cast::<u8>().add(layout.value).cast::<T>();
        if !(*value).parts_alone() {
            return (saved.dealloc)(obj);
        }
        // As PyO3's, without its untrack: every object of the class is untracked from
        // its allocation on (`alloc_object`, `new_object`; see the module's docs). The
        // value dropped, then the weak references cleared (their callbacks see a dead
        // object, as with PyO3's), the memory given back, and the reference to the (heap)
        // type the object held dropped. Nothing here may panic (an `extern "C"` function
        // aborts on unwinding): `parts_alone` and `take_apart` only read, move and drop
        // references.
        debug_assert_eq!(ffi::PyObject_GC_IsTracked(obj), 0);
        ptr::read(value).take_apart();
        // An atomic read: without a GIL, a weak reference dying on another thread may
        // write the list meanwhile (under CPython's own lock, which the clear takes).
        let weaklist = obj
            .cast::<u8>()
            .add(layout.weaklist)
            .cast::<*mut ffi::PyObject>();
        let weaklist = std::sync::atomic::AtomicPtr::from_ptr(weaklist);
        // ORDERING: a hint whether to call the clear, which reads the list under its lock.
        if !weaklist
            .load(std::sync::atomic::Ordering::Relaxed)
            .is_null()
        {
            ffi::PyObject_ClearWeakRefs(obj);
        }
        // Kept with its reference to the type (see the module's docs), or given back.
        if !list.push(obj) {
            list.give_back(saved, obj);
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
            // SAFETY: `obj` is a deallocated object of `ty`, ours (the list's invariant).
            unsafe { revive(obj, ty, (*ty).tp_basicsize as usize) };
            return obj;
        }
    }
    // SAFETY: as this function's.
    unsafe { untracked((saved.alloc)(ty, nitems)) }
}

extern "C" {
    /// CPython's (exported by every CPython 3 in `Include/cpython/object.h`; PyO3's
    /// bindings leave it out as private): set a new object's reference counts to one, as
    /// `PyObject_Init` does after it took a reference to the object's type. Also what
    /// keeps reference tracing and debug builds' totals right.
    fn _Py_NewReference(op: *mut ffi::PyObject);
}

/// Make a dead object from a list a live one of `ty`, as `PyType_GenericAlloc` makes one:
/// its first `zeroed` bytes zeroed (at least the header; the GC's header before it was
/// left clean by the untrack), the type and one reference; not tracked (see the module's
/// docs). The object's reference to `ty` is the one it kept in the list.
///
/// # Safety
/// Attached; `obj` is a deallocated object of `ty` from its list, and `zeroed` is at least
/// `size_of::<PyObject>()` and at most `ty`'s basic size.
#[inline]
unsafe fn revive(obj: *mut ffi::PyObject, ty: *mut ffi::PyTypeObject, zeroed: usize) {
    // SAFETY: this function's contract: the header is ours to write, and the reference
    // to `ty` the object kept in the list (the invariant of `Slots`) is its type's now.
    unsafe {
        ptr::write_bytes(obj.cast::<u8>(), 0, zeroed);
        (*obj).ob_type = ty;
        _Py_NewReference(obj);
    }
}

/// `obj` (NULL or a new object of a class with a list) no longer tracked by the cyclic GC,
/// as the objects from the lists are not (see the module's docs).
///
/// # Safety
/// Attached; `obj` is NULL or a new object no other code has seen.
#[inline]
unsafe fn untracked(obj: *mut ffi::PyObject) -> *mut ffi::PyObject {
    if !obj.is_null() {
        // SAFETY: this function's contract; a no-op on an object not tracked.
        unsafe { ffi::PyObject_GC_UnTrack(obj.cast()) };
    }
    obj
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
            // Never tracked (see `dealloc_object`), as the list's invariant needs; PyO3's
            // deallocator untracks too.
            debug_assert_eq!(ffi::PyObject_GC_IsTracked(o), 0);
            // The deallocator that called this one drops the object's reference to the
            // type next: a kept object takes one of its own (the invariant of `Slots`).
            // Only an `Unlock` that still held, or any object while the layout is not
            // learned, comes this way; `dealloc_object` keeps the object's own.
            if list.push(o) {
                ffi::Py_INCREF(saved.ty.cast());
                return;
            }
        }
        (saved.free)(obj)
    }
}

impl FreeList {
    /// Give a dead object of the class that no list keeps back to the allocator, with its
    /// reference to the type (the invariant of `Slots`).
    ///
    /// # Safety
    /// Attached; `obj` is a dead object of the class that holds a reference to its type,
    /// and nothing refers to it.
    #[cold]
    unsafe fn give_back(&self, saved: &Saved, obj: *mut ffi::PyObject) {
        // SAFETY: this function's contract; the type outlives the object's reference,
        // which is dropped after the object's memory is freed, as deallocators do.
        unsafe {
            (saved.free)(obj.cast());
            ffi::Py_DECREF(saved.ty.cast());
        }
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

/// In a forked child: without a GIL, mark the lists of ended threads whose mutex the
/// fork left held (`per_thread`). With a GIL there is nothing to mend: the lists are
/// the GIL's, which the fork leaves to the forking thread.
pub(crate) fn after_fork_in_child() {
    #[cfg(Py_GIL_DISABLED)]
    per_thread::after_fork_in_child();
}

#[cfg(Py_GIL_DISABLED)]
mod per_thread {
    use std::cell::UnsafeCell;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
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
    /// and (`ORPHANED`) how many there are. Each mutex is taken only with `try_lock`,
    /// except by an ending thread (`Local::drop`): a forked child may find one held by a
    /// thread of the parent that does not exist there, and nothing on the path of an
    /// acquire may then wait for it.
    static ORPHANS: [Mutex<Vec<usize>>; CLASSES] = [const { Mutex::new(Vec::new()) }; CLASSES];
    static ORPHANED: [AtomicUsize; CLASSES] = [const { AtomicUsize::new(0) }; CLASSES];
    /// Set in a forked child for a class whose `ORPHANS` mutex a thread of the parent held
    /// at the fork: it stays held forever there, so ending threads leave their objects to
    /// nobody (leaked: memory only) instead of waiting for it.
    static STUCK: [AtomicBool; CLASSES] = [const { AtomicBool::new(false) }; CLASSES];

    /// In a forked child: mark the lists whose mutex the fork left held (see `STUCK`).
    pub(crate) fn after_fork_in_child() {
        for (orphans, stuck) in ORPHANS.iter().zip(&STUCK) {
            if let Err(std::sync::TryLockError::WouldBlock) = orphans.try_lock() {
                // ORDERING: Relaxed: the child's threads are made after this hook ran
                // (thread creation orders it before them).
                stuck.store(true, Ordering::Relaxed);
            }
        }
    }

    /// The thread ends: its objects go to `ORPHANS` (it has no thread state left to free
    /// them with).
    impl Drop for Local {
        fn drop(&mut self) {
            for (class, slots) in self.0.iter_mut().enumerate() {
                let slots = slots.get_mut();
                // ORDERING: see `after_fork_in_child`.
                if slots.len == 0 || STUCK[class].load(Ordering::Relaxed) {
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
                // Busy: another thread frees or adopts them (or a fork left it held).
                let Some(mut orphans) = try_orphans(self.class) else {
                    return;
                };
                let keep = orphans.len().min(ORPHANS_KEPT);
                let extra = orphans.split_off(keep);
                // ORDERING: as in `Local::drop`.
                ORPHANED[self.class].store(orphans.len(), Ordering::Relaxed);
                extra
            };
            for o in extra {
                // SAFETY: attached; each is a dead object of the class that only the
                // list knew of, holding a reference to the type (the invariant of
                // `Slots`, which it came from).
                unsafe { self.give_back(saved, o as *mut ffi::PyObject) };
            }
        }
    }

    /// The orphans of `class`, unless another thread has them (or a fork left their mutex
    /// held): a free list is an optimisation, never worth a wait.
    fn try_orphans(class: usize) -> Option<std::sync::MutexGuard<'static, Vec<usize>>> {
        match ORPHANS[class].try_lock() {
            Ok(orphans) => Some(orphans),
            Err(std::sync::TryLockError::Poisoned(e)) => Some(e.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => None,
        }
    }

    /// Move up to a list's worth of orphans into the thread's empty list.
    #[cold]
    fn adopt(class: usize, slots: &mut Slots) {
        // Busy: the object is made by the type's own allocator this time.
        let Some(mut orphans) = try_orphans(class) else {
            return;
        };
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
