//! What the binding needs of a kind of lock, and the [`Owner`] that holds any kind.
//!
//! A kind is the core's [`RawLock`] (the acquire driver's seam) plus the few members
//! every Python lock class shows: its mode, `locked()`, the scoped holds of `with`, and
//! the tags of `async with` holds (see `TaskOwner`). [`DynKind`] is the same, object-safe,
//! so that an `Unlock` or an awaitable can hold a lock of any kind; [`Owner`] is that:
//! the Python lock object and its kind.

use std::ptr::NonNull;

use pyo3::prelude::*;
use pyo3::pyclass::boolean_struct::True;
use pyo3::PyClass;

use crate::core::cancel::Registration;
use crate::core::lock::LockView;
use crate::core::raw::{Compete, Enqueued, Notify, RawLock, RawWaiter};
use crate::core::stats::Statistics;
use crate::core::unlock::Hold;
use crate::core::waiter::Mode;

/// A hold as its owner keeps it: for the in-process kind, the exclusive hold's id (0:
/// none; see `try_take_up`); for a named lock, the fence, which also tells the hold
/// apart.
pub(crate) type Held = u64;

/// What became of a hold a `lost` token is asked for.
pub(crate) use crate::core::named::Lost;

/// One kind of lock as the binding uses it.
pub(crate) trait Kind: RawLock + Clone + 'static {
    fn mode(&self) -> Mode;
    /// Whether it is held (in this mode).
    fn is_locked(&self) -> bool;
    /// Take up a hold just acquired (by a try, a wait or a task's wait): as a scoped
    /// hold (`with`; released by `unlock_scoped`) or as the hold of an `Unlock` (which
    /// keeps what this returns). Fails, holding nothing, if the kind's backend failed
    /// meanwhile.
    fn take_up(&self, scoped: bool) -> Result<Held, String>;
    /// The fast path of an `Unlock`'s acquire: try once, and take up the hold if it was
    /// taken. `None` if the lock is taken (or cannot be acquired: the caller's slow path
    /// says why). A kind may do both in one step.
    #[inline]
    fn try_take_up(&self) -> Option<Result<Held, String>> {
        RawLock::try_lock(self).then(|| self.take_up(false))
    }
    /// The fast path of `with`: try once, and take up the hold as scoped if it was
    /// taken. `None` if the lock is taken (the caller waits). A kind may do both in one
    /// step.
    #[inline]
    fn try_take_up_scoped(&self) -> Option<Result<Held, String>> {
        RawLock::try_lock(self).then(|| self.take_up(true))
    }
    /// Release the hold of an `Unlock`; false if there is none any more.
    fn release_held(&self, held: Held) -> bool;
    /// Whether `release_held(held)` succeeds for one call only, however many race (see
    /// the core's `Hold::release_decides`).
    #[inline]
    fn release_decides(&self, _held: Held) -> bool {
        false
    }
    /// Whether the hold `held` has not ended yet; asked only when `release_decides`.
    fn is_held(&self, _held: Held) -> bool {
        true
    }
    /// The fence of a hold, for kinds that issue them.
    fn fence(&self, held: Held) -> Option<u64>;
    /// The hold's lost token, for kinds that can lose a hold.
    fn lost(&self, held: Held) -> Option<Lost>;
    /// Release one scoped hold; false if there is none.
    fn unlock_scoped(&self) -> bool;
    /// Whether its holds and waits say who took them (then an asynchronous acquire
    /// names its task: see `core::named::as_task`).
    fn names_owners(&self) -> bool {
        false
    }
    fn tag_hold(&self, tag: u64);
    fn untag_hold(&self, tag: u64);
    fn has_tagged_hold(&self, tag: u64) -> bool;
    /// A snapshot for `statistics()`.
    fn statistics(&self) -> Statistics;
    /// Whether `is_locked` and `statistics` may wait for other processes (then they run
    /// with the GIL released: see `acquire::answered`).
    #[inline]
    fn asks_others(&self) -> bool {
        false
    }
    /// Why `locked()` and `statistics()` cannot answer, if they cannot (a named lock of
    /// a closed manager, or of a manager made before `fork()`, in the child).
    #[inline]
    fn unanswerable(&self) -> Option<String> {
        None
    }
}

impl Kind for LockView {
    fn mode(&self) -> Mode {
        LockView::mode(self)
    }

    fn is_locked(&self) -> bool {
        LockView::is_locked(self)
    }

    #[inline]
    fn take_up(&self, scoped: bool) -> Result<Held, String> {
        if scoped {
            LockView::scope_hold(self);
        }
        Ok(0)
    }

    /// Without a GIL, an `Unlock`'s exclusive hold taken at once gets an id (the core's
    /// invariant 7), so that its release decides once-only and the `Unlock` needs no
    /// swap of its own: two locked instructions per pair, as `PyMutex`. With a GIL the
    /// GIL serializes the calls and the flag is a plain store, so no id is needed. Only
    /// where a word has the 59 bits that make ids unique (64-bit targets).
    #[inline]
    fn try_take_up(&self) -> Option<Result<Held, String>> {
        #[cfg(all(Py_GIL_DISABLED, target_pointer_width = "64"))]
        if LockView::mode(self) == Mode::Exclusive {
            return LockView::try_lock_with_id(self).map(|id| Ok(id as Held));
        }
        RawLock::try_lock(self).then_some(Ok(0))
    }

    #[inline]
    fn try_take_up_scoped(&self) -> Option<Result<Held, String>> {
        LockView::try_lock_scoped(self).then_some(Ok(0))
    }

    /// `held` is the hold's id, or 0 for a hold without one (taken after a wait, or with
    /// a GIL).
    #[inline]
    fn release_held(&self, held: Held) -> bool {
        if held != 0 {
            LockView::unlock_with_id(self, held as usize)
        } else {
            LockView::unlock(self)
        }
    }

    #[inline]
    fn release_decides(&self, held: Held) -> bool {
        held != 0
    }

    fn is_held(&self, held: Held) -> bool {
        LockView::holds_id(self, held as usize)
    }

    fn fence(&self, _: Held) -> Option<u64> {
        None
    }

    fn lost(&self, _: Held) -> Option<Lost> {
        None
    }

    #[inline]
    fn unlock_scoped(&self) -> bool {
        LockView::unlock_scoped(self)
    }

    fn tag_hold(&self, tag: u64) {
        LockView::tag_hold(self, tag)
    }

    fn untag_hold(&self, tag: u64) {
        LockView::untag_hold(self, tag)
    }

    fn has_tagged_hold(&self, tag: u64) -> bool {
        LockView::has_tagged_hold(self, tag)
    }

    fn statistics(&self) -> Statistics {
        LockView::statistics(self)
    }
}

/// [`Kind`], object-safe: every kind is one.
pub(crate) trait DynKind: Send + Sync {
    fn try_lock(&self) -> bool;
    fn unlock(&self) -> bool;
    fn may_spin(&self) -> bool;
    fn enqueue(&self, notify: Notify, compete: Compete) -> Enqueued<Box<dyn RawWaiter>>;
    fn failure(&self) -> Option<String>;
    fn names_owners(&self) -> bool;
    fn mode(&self) -> Mode;
    fn take_up(&self, scoped: bool) -> Result<Held, String>;
    fn release_held(&self, held: Held) -> bool;
    fn release_decides(&self, held: Held) -> bool;
    fn is_held(&self, held: Held) -> bool;
    fn fence(&self, held: Held) -> Option<u64>;
    fn lost(&self, held: Held) -> Option<Lost>;
    fn tag_hold(&self, tag: u64);
    fn untag_hold(&self, tag: u64);
    fn has_tagged_hold(&self, tag: u64) -> bool;
}

impl<K: Kind> DynKind for K {
    #[inline]
    fn try_lock(&self) -> bool {
        RawLock::try_lock(self)
    }

    #[inline]
    fn unlock(&self) -> bool {
        RawLock::unlock(self)
    }

    #[inline]
    fn may_spin(&self) -> bool {
        RawLock::may_spin(self)
    }

    fn enqueue(&self, notify: Notify, compete: Compete) -> Enqueued<Box<dyn RawWaiter>> {
        match RawLock::enqueue(self, notify, compete) {
            Enqueued::Acquired => Enqueued::Acquired,
            Enqueued::Queued(w) => Enqueued::Queued(Box::new(w)),
        }
    }

    fn failure(&self) -> Option<String> {
        RawLock::failure(self)
    }

    fn names_owners(&self) -> bool {
        Kind::names_owners(self)
    }

    fn mode(&self) -> Mode {
        Kind::mode(self)
    }

    fn take_up(&self, scoped: bool) -> Result<Held, String> {
        Kind::take_up(self, scoped)
    }

    #[inline]
    fn release_held(&self, held: Held) -> bool {
        Kind::release_held(self, held)
    }

    #[inline]
    fn release_decides(&self, held: Held) -> bool {
        Kind::release_decides(self, held)
    }

    fn is_held(&self, held: Held) -> bool {
        Kind::is_held(self, held)
    }

    fn fence(&self, held: Held) -> Option<u64> {
        Kind::fence(self, held)
    }

    fn lost(&self, held: Held) -> Option<Lost> {
        Kind::lost(self, held)
    }

    fn tag_hold(&self, tag: u64) {
        Kind::tag_hold(self, tag)
    }

    fn untag_hold(&self, tag: u64) {
        Kind::untag_hold(self, tag)
    }

    fn has_tagged_hold(&self, tag: u64) -> bool {
        Kind::has_tagged_hold(self, tag)
    }
}

/// The lock object a hold belongs to, and its kind. Holding the Python object (a plain
/// reference-count increment under the GIL) instead of cloning a core `Arc` keeps two
/// atomic read-modify-writes off every acquire/unlock pair; the object keeps the kind
/// alive.
pub(crate) struct Owner {
    obj: Py<PyAny>,
    /// Points into `obj`: the kind inside its frozen pyclass.
    kind: NonNull<dyn DynKind>,
}

// SAFETY: `obj` is a `Py` (Send and Sync), and `kind` points at a `DynKind` (Send and
// Sync) inside that object, which is never mutated (frozen) and lives as long as `obj`.
unsafe impl Send for Owner {}
// SAFETY: as for Send.
unsafe impl Sync for Owner {}

impl Owner {
    /// The owner of a hold of `obj`'s lock; `kind` finds the lock inside the object.
    #[inline]
    pub(crate) fn new<T>(
        obj: Py<T>,
        kind: for<'a> fn(&'a T) -> &'a (dyn DynKind + 'static),
    ) -> Owner
    where
        T: PyClass<Frozen = True> + Sync,
    {
        let kind = NonNull::from(kind(obj.get()));
        Owner {
            obj: obj.into_any(),
            kind,
        }
    }

    #[inline]
    pub(crate) fn kind(&self) -> &dyn DynKind {
        // SAFETY: `kind` was borrowed from the frozen object `self.obj` (see `new`), which
        // is never mutated and lives at least as long as `self` holds it.
        unsafe { self.kind.as_ref() }
    }

    pub(crate) fn object(&self) -> &Py<PyAny> {
        &self.obj
    }

    /// The lock object, for a caller that drops the reference its own way.
    pub(crate) fn into_object(self) -> Py<PyAny> {
        self.obj
    }

    pub(crate) fn clone_ref(&self, py: Python<'_>) -> Owner {
        Owner {
            obj: self.obj.clone_ref(py),
            kind: self.kind,
        }
    }
}

/// The core's driver and `TaskWait` run over an `Owner` as over any kind.
impl RawLock for Owner {
    type Waiter = Box<dyn RawWaiter>;

    #[inline]
    fn try_lock(&self) -> bool {
        self.kind().try_lock()
    }

    #[inline]
    fn unlock(&self) -> bool {
        self.kind().unlock()
    }

    #[inline]
    fn may_spin(&self) -> bool {
        self.kind().may_spin()
    }

    fn enqueue(&self, notify: Notify, compete: Compete) -> Enqueued<Box<dyn RawWaiter>> {
        self.kind().enqueue(notify, compete)
    }

    fn failure(&self) -> Option<String> {
        self.kind().failure()
    }
}

/// What a `ctxlock.Unlock` releases: one hold of its owner's lock.
pub(crate) struct OwnedHold {
    pub(crate) owner: Owner,
    pub(crate) held: Held,
    /// Set when the release found the hold ended already (lost: its manager closed).
    pub(crate) ended_before: std::sync::atomic::AtomicBool,
}

impl OwnedHold {
    pub(crate) fn new(owner: Owner, held: Held) -> OwnedHold {
        OwnedHold {
            owner,
            held,
            ended_before: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Whether the hold ended without its release (which then found nothing).
    pub(crate) fn ended_before_release(&self) -> bool {
        // ORDERING: set before `Unlock::released`'s flag is read by the same caller, or
        // under the same GIL; a snapshot otherwise.
        self.ended_before.load(std::sync::atomic::Ordering::Relaxed)
    }
}

impl Hold for OwnedHold {
    #[inline]
    fn release(&self) -> bool {
        let released = self.owner.kind().release_held(self.held);
        // A hold whose release decides ends without this call only by a racing call of
        // the same `Unlock`: not lost.
        if !released && !self.release_decides() {
            // ORDERING: see `ended_before_release`.
            self.ended_before
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
        released
    }

    #[inline]
    fn release_decides(&self) -> bool {
        self.owner.kind().release_decides(self.held)
    }

    fn is_held(&self) -> bool {
        self.owner.kind().is_held(self.held)
    }

    fn fence(&self) -> Option<u64> {
        self.owner.kind().fence(self.held)
    }

    fn unregister(&self, registrations: Vec<Registration>) {
        // The callbacks hold `Py` references: drop them attached, so that their counts
        // fall now even when the release came through an entry point without PyO3's
        // attach count (`vectorcall.rs`). An interpreter that is shutting down cannot be
        // attached to (a `__del__` that releases at exit): then PyO3 defers the drops.
        let mut registrations = Some(registrations);
        Python::try_attach(|_| {
            for r in registrations.take().into_iter().flatten() {
                r.unregister();
            }
        });
        for r in registrations.into_iter().flatten() {
            r.unregister();
        }
    }
}
