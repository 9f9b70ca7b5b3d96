//! The nouns users hold: [`Lock`], [`SharableLock`] and its two [`LockView`]s.
//!
//! All three are thin over one [`Slot`]: a `Lock` is a slot that only ever takes
//! exclusive holds; a `SharableLock` is a slot whose reader group may hold it too (Go's
//! helper goroutine, kept as a count in the state word instead of a thread). A
//! `LockView` is a slot plus the mode it acquires in; it is what every acquire goes
//! through, so the blocking, asynchronous and non-blocking paths are the same code for
//! every kind of lock.

use std::ops::Deref;
use std::task::Waker;

use super::acquire;
use super::cancel::CancelToken;
use super::error::AcquireError;
use super::hold_id;
use super::raw::{Compete, Enqueued, Notify, RawLock};
use super::slot::{Policy, Slot, SlotWaiter};
use super::state::{readers, WRITER};
use super::sync::Arc;
use super::task::TaskWait;
use super::unlock::{Hold, Unlock};
use super::wait::{ThreadWait, Wait};
use super::waiter::{Mode, Waiter};

/// A slot and the mode in which it is acquired. Cloning shares the slot.
#[derive(Clone)]
pub struct LockView {
    slot: Arc<Slot>,
    mode: Mode,
}

/// The in-process kind of lock: a slot in one mode.
impl RawLock for LockView {
    type Waiter = SlotWaiter;

    #[inline]
    fn try_lock(&self) -> bool {
        self.slot.try_lock(self.mode)
    }

    #[inline]
    fn unlock(&self) -> bool {
        self.slot.release(self.mode)
    }

    #[inline]
    fn may_spin(&self) -> bool {
        self.slot.may_spin()
    }

    #[inline]
    fn looks_free(&self) -> bool {
        self.mode == Mode::Exclusive && self.slot.looks_free()
    }

    fn enqueue(&self, notify: Notify, compete: Compete) -> Enqueued<SlotWaiter> {
        let waiter = Arc::new(Waiter::new(self.mode, notify, compete == Compete::Later));
        if self.slot.enqueue(&waiter) {
            return Enqueued::Acquired;
        }
        Enqueued::Queued(SlotWaiter::new(self.slot.clone(), waiter))
    }
}

/// An [`Unlock`] of the in-process kind releases one hold of its view.
impl Hold for LockView {
    #[inline]
    fn release(&self) -> bool {
        self.slot.release(self.mode)
    }
}

impl LockView {
    fn new(slot: Arc<Slot>, mode: Mode) -> Self {
        LockView { slot, mode }
    }

    /// A view of `slot` in `mode` (the named kind's entries are slots; not built under
    /// loom, which does not model the named locks).
    #[cfg_attr(loom, allow(dead_code))]
    pub(crate) fn over(slot: Arc<Slot>, mode: Mode) -> Self {
        LockView { slot, mode }
    }

    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Whether both views act on the same slot.
    pub fn same_slot(&self, other: &LockView) -> bool {
        Arc::ptr_eq(&self.slot, &other.slot)
    }

    /// Acquire without waiting; one CAS when uncontended. Pair with [`LockView::unlock`].
    #[inline]
    pub fn try_lock(&self) -> bool {
        self.slot.try_lock(self.mode)
    }

    /// Acquire, waiting as `wait` allows (the driver's rules, `acquire.rs`).
    ///
    /// # Cancellation
    /// A token that is already cancelled fails at once, even if the lock is free (Go
    /// checks `ctx.Done()` first). A waiter that times out, is cancelled or is
    /// interrupted leaves the queue without the lock; if the lock was handed to it at
    /// that moment, a timeout keeps it and a cancellation or interrupt passes it on.
    pub fn lock<E>(&self, wait: Wait<'_, E>) -> Result<(), AcquireError<E>> {
        acquire::lock(self, wait)
    }

    /// The waiting part of [`LockView::lock`] as steps, for a caller that must do
    /// something between being woken to compete and competing (the binding takes the
    /// GIL back first). The caller ran the fast path and the token check. Dropping the
    /// wait before it settled gives up (see [`ThreadWait`]).
    #[cold]
    pub fn wait_steps<'a, E>(
        &'a self,
        wait: Wait<'a, E>,
        compete: Compete,
    ) -> ThreadWait<'a, LockView, E> {
        acquire::wait_steps(self, wait, compete)
    }

    /// Give back a hold taken with `try_lock`/`lock`. False if there was none in this
    /// mode (nothing is changed then). Only the owner of a hold may give it back: a
    /// hold owned by an [`Unlock`] through its `Unlock`, a scoped hold through
    /// [`LockView::unlock_scoped`].
    #[inline]
    pub fn unlock(&self) -> bool {
        self.slot.release(self.mode)
    }

    /// Try once, and keep the hold taken as a scoped hold ([`LockView::scope_hold`]): as
    /// `try_lock` then `scope_hold`, in one step where the lock allows.
    #[inline]
    pub fn try_lock_scoped(&self) -> bool {
        self.slot.try_lock_scoped(self.mode)
    }

    /// Make a hold the caller has just taken (with `try_lock`, `lock`, a task's wait) a
    /// scoped hold: one that ends with a scope, released by [`LockView::unlock_scoped`]
    /// by whoever ends it (Python's `with`), never by `unlock`.
    #[inline]
    pub fn scope_hold(&self) {
        self.slot.scope_hold(self.mode)
    }

    /// Release one scoped hold of this mode. False if there is none (nothing changes
    /// then, whatever other holds there are): holds owned by an [`Unlock`] are never
    /// released here.
    #[inline]
    pub fn unlock_scoped(&self) -> bool {
        self.slot.release_scoped(self.mode)
    }

    /// Acquire without waiting.
    pub fn try_acquire(&self) -> Option<Unlock<LockView>> {
        self.try_lock().then(|| Unlock::new(self.clone()))
    }

    /// Acquire and return the once-only [`Unlock`]; see [`LockView::lock`].
    pub fn acquire<E>(&self, wait: Wait<'_, E>) -> Result<Unlock<LockView>, AcquireError<E>> {
        self.lock(wait).map(|()| Unlock::new(self.clone()))
    }

    /// Queue an asynchronous acquire woken through `waker`; `None` if it acquired at once.
    pub fn lock_task(&self, waker: Waker) -> Option<TaskWait<LockView>> {
        let task = TaskWait::start(self.clone(), waker, None, None);
        task.queued().then_some(task)
    }

    /// Try once for an exclusive hold that gets a new id (invariant 7 in `state.rs`);
    /// the id if taken. Only [`LockView::unlock_with_id`] with that id ends the hold, once
    /// whoever races. Exclusive views only (a reader's hold has no id: `None`), and only
    /// on 64-bit targets, where ids are unique (see `hold_id`).
    #[inline]
    pub fn try_lock_with_id(&self) -> Option<usize> {
        if self.mode != Mode::Exclusive || usize::BITS < 64 {
            return None;
        }
        let id = hold_id::next();
        self.slot.try_lock_with_id(id).then_some(id)
    }

    /// End the exclusive hold with id `id`, if it has not ended yet; true if this call
    /// ended it. False for anything but an id `try_lock_with_id` returned.
    #[inline]
    pub fn unlock_with_id(&self, id: usize) -> bool {
        self.slot.release_with_id(id)
    }

    /// Whether the exclusive hold with id `id` still holds the lock.
    pub fn holds_id(&self, id: usize) -> bool {
        self.slot.holds_id(id)
    }

    /// Whether the slot is held in this view's mode.
    pub fn is_locked(&self) -> bool {
        let s = self.slot.state();
        match self.mode {
            Mode::Exclusive => s & WRITER != 0,
            Mode::Shared => readers(s) > 0,
        }
    }

    /// How many readers hold the slot.
    pub fn readers(&self) -> usize {
        readers(self.slot.state())
    }

    /// How many acquires wait in the queue.
    pub fn queued(&self) -> usize {
        self.slot.queued()
    }

    /// Attach an opaque tag to one hold (the embedding layer's bookkeeping; see `untag_hold`).
    pub fn tag_hold(&self, tag: u64) {
        self.slot.tag_hold(tag)
    }

    /// Take a tag attached by `tag_hold` off one hold.
    pub fn untag_hold(&self, tag: u64) {
        self.slot.untag_hold(tag)
    }

    pub(crate) fn slot(&self) -> &Slot {
        &self.slot
    }

    /// Whether some hold carries `tag`.
    pub fn has_tagged_hold(&self, tag: u64) -> bool {
        self.slot.has_tagged_hold(tag)
    }
}

/// An exclusive lock: Go's channel of capacity one, with an atomic fast path.
///
/// # Fairness
/// `Lock::new()` lets a running thread re-take a just-released lock (barging), but hands
/// the lock directly to a thread that has waited about 1 ms, and always to an
/// asynchronous waiter. `Lock::fair()` always hands over in FIFO order. A caller that
/// must do something before a woken waiter competes (Python's GIL) waits through
/// [`LockView::wait_steps`].
#[derive(Clone)]
pub struct Lock(LockView);

impl Lock {
    pub fn new() -> Lock {
        Lock(LockView::new(
            Arc::new(Slot::new(Policy::Barging)),
            Mode::Exclusive,
        ))
    }

    pub fn fair() -> Lock {
        Lock(LockView::new(
            Arc::new(Slot::new(Policy::Fair)),
            Mode::Exclusive,
        ))
    }

    pub fn is_fair(&self) -> bool {
        self.0.slot.policy() == Policy::Fair
    }

    pub fn view(&self) -> &LockView {
        &self.0
    }
}

impl Default for Lock {
    fn default() -> Self {
        Lock::new()
    }
}

impl Deref for Lock {
    type Target = LockView;
    fn deref(&self) -> &LockView {
        &self.0
    }
}

/// A phase-fair readers-writer lock: Go's `SharableLock` on one slot.
///
/// # Fairness
/// While an exclusive acquirer waits, new shared acquirers queue behind it, so writers
/// are not starved. When an exclusive holder unlocks, every shared acquirer waiting at
/// that moment joins the reader group before the next exclusive one, so readers are not
/// starved. An exclusive waiter that gives up lets the readers it held back in at once
/// (if another exclusive waiter is still queued, they stay behind it and follow it).
#[derive(Clone)]
pub struct SharableLock {
    shared: LockView,
    exclusive: LockView,
}

impl SharableLock {
    pub fn new() -> SharableLock {
        let slot = Arc::new(Slot::new(Policy::Fair));
        SharableLock {
            shared: LockView::new(slot.clone(), Mode::Shared),
            exclusive: LockView::new(slot, Mode::Exclusive),
        }
    }

    /// The reader-group side (Go's `RLock`).
    pub fn shared(&self) -> &LockView {
        &self.shared
    }

    /// The exclusive side (Go's `Lock`).
    pub fn exclusive(&self) -> &LockView {
        &self.exclusive
    }
}

impl Default for SharableLock {
    fn default() -> Self {
        SharableLock::new()
    }
}

/// For the blocking acquire of a token-less, deadline-less, uninterruptible caller.
pub fn forever() -> Wait<'static, std::convert::Infallible> {
    Wait::default()
}

#[allow(dead_code)]
fn _assert_send_sync() {
    fn is<T: Send + Sync>() {}
    is::<Lock>();
    is::<SharableLock>();
    is::<LockView>();
    is::<CancelToken>();
    is::<Unlock<LockView>>();
}

#[cfg(all(test, not(loom)))]
mod tests {
    //! An `Unlock` whose hold decides (`Hold::release_decides`): once-only without its
    //! own swap, and the registration handshake over the lock's state word.

    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Barrier};
    use std::thread;

    use super::{Lock, LockView};
    use crate::core::cancel::{CancelToken, Reason};
    use crate::core::unlock::{Hold, Unlock};

    const ROUNDS: usize = if cfg!(miri) { 10 } else { 2_000 };

    /// A hold as the Python binding keeps it without a GIL: an exclusive hold with an id,
    /// whose release decides once-only.
    struct WithId(LockView, usize);

    impl Hold for WithId {
        fn release(&self) -> bool {
            self.0.unlock_with_id(self.1)
        }

        fn release_decides(&self) -> bool {
            true
        }

        fn is_held(&self) -> bool {
            self.0.holds_id(self.1)
        }
    }

    fn unlock_with_id(view: &LockView) -> Unlock<WithId> {
        let id = view.try_lock_with_id().expect("a free lock");
        Unlock::new(WithId(view.clone(), id))
    }

    #[test]
    fn an_unlock_whose_hold_decides_releases_once() {
        let lock = Lock::new();
        let unlock = unlock_with_id(lock.view());
        assert!(!unlock.released());
        assert!(unlock.unlock());
        assert!(unlock.released());
        assert!(!unlock.unlock());
        assert!(lock.try_lock());
        assert!(!unlock.unlock(), "a stale Unlock ended a later hold");
        assert!(lock.is_locked());
        assert!(lock.unlock());
    }

    #[test]
    fn a_call_that_missed_the_released_flag_is_refused_by_the_id() {
        // A second call that read `released` before the first call set it: modelled by a
        // second `Unlock` of the same hold, whose flag is still false.
        let lock = Lock::new();
        let id = lock.try_lock_with_id().unwrap();
        let first = Unlock::new(WithId(lock.view().clone(), id));
        let second = Unlock::new(WithId(lock.view().clone(), id));
        assert!(first.unlock());
        assert!(lock.try_lock());
        assert!(
            !second.unlock(),
            "a call that missed the flag ended a later hold"
        );
        assert!(
            second.released(),
            "a refused call reports the release it lost to"
        );
        assert!(lock.is_locked());
        assert!(lock.unlock());
    }

    #[test]
    fn racing_calls_of_an_unlock_whose_hold_decides_release_once() {
        // Two calls race while a third thread takes the lock as soon as it is free: one
        // call releases, and the third's hold survives the other.
        let lock = Lock::new();
        for _ in 0..ROUNDS {
            let unlock = Arc::new(unlock_with_id(lock.view()));
            let start = Arc::new(Barrier::new(3));
            let taker = {
                let (lock, start) = (lock.clone(), start.clone());
                thread::spawn(move || {
                    start.wait();
                    lock.lock(crate::core::lock::forever()).unwrap();
                })
            };
            let calls: Vec<_> = (0..2)
                .map(|_| {
                    let (unlock, start) = (unlock.clone(), start.clone());
                    thread::spawn(move || {
                        start.wait();
                        unlock.unlock()
                    })
                })
                .collect();
            let released: usize = calls
                .into_iter()
                .map(|c| usize::from(c.join().unwrap()))
                .sum();
            taker.join().unwrap();
            assert_eq!(released, 1);
            assert!(unlock.released());
            assert!(lock.is_locked(), "the call that lost ended the next hold");
            assert!(lock.unlock());
        }
    }

    fn reason() -> Reason {
        Arc::new("test")
    }

    #[test]
    fn a_registration_of_an_unlock_whose_hold_decides_never_outlives_the_release() {
        // Registered before the release, or after it, or racing it: once the Unlock has
        // released, cancelling the token runs no callback.
        for order in 0..3 {
            for _ in 0..if order == 2 { ROUNDS } else { 1 } {
                let lock = Lock::new();
                let unlock = Arc::new(unlock_with_id(lock.view()));
                let token = CancelToken::new(None);
                let ran = Arc::new(AtomicBool::new(false));
                let register = {
                    let (unlock, token, ran) = (unlock.clone(), token.clone(), ran.clone());
                    move || {
                        let r = token
                            .on_cancel(move |_| ran.store(true, Ordering::Relaxed))
                            .expect("not cancelled yet");
                        unlock.add_registration(r);
                    }
                };
                match order {
                    0 => {
                        register();
                        assert!(unlock.unlock());
                    }
                    1 => {
                        assert!(unlock.unlock());
                        register();
                    }
                    _ => {
                        let t = thread::spawn(register);
                        assert!(unlock.unlock());
                        t.join().unwrap();
                    }
                }
                token.cancel(reason());
                assert!(
                    !ran.load(Ordering::Relaxed),
                    "a registration outlived the release"
                );
            }
        }
    }
}
