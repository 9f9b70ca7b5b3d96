//! Unlock: the once-only release of one acquire (Go's `UnlockFunc`), for any kind of lock.
//!
//! Go builds it from a once-only function; a `sync.Once` would make a second caller
//! wait for the first, while an unlock must never block, so it is one atomic swap here,
//! or none at all when the hold's own release decides which call releases (an exclusive
//! hold with an id: `Hold::release_decides`).
//! What it releases is a [`Hold`]: one hold of some kind of lock, with room for what
//! kinds beyond the in-process one carry (a fence number, a token cancelled when the
//! hold is lost).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use super::cancel::{CancelToken, Registration};

/// One hold of some kind of lock, as an [`Unlock`] releases it.
pub trait Hold: Send + Sync {
    /// Give the hold back; false if there was none (a kind that can lose a hold, a named
    /// lock whose manager closed, has none left).
    fn release(&self) -> bool;

    /// Whether `release` itself succeeds for one call only, however many race (the hold
    /// names itself in the lock's state: the in-process kind's exclusive hold with an
    /// id). Then an [`Unlock`] needs no once-only swap of its own: the release decides.
    /// Such a hold's release must be a sequentially consistent read-modify-write, and
    /// `is_held` a sequentially consistent load of the same word (see `Unlock`'s
    /// invariants).
    fn release_decides(&self) -> bool {
        false
    }

    /// Whether the hold has not ended yet; asked only when `release_decides`.
    fn is_held(&self) -> bool {
        true
    }

    /// The fence number the lock issued with this hold (kinds that issue one, so that
    /// a resource can refuse a stale holder). The in-process kind issues none.
    fn fence(&self) -> Option<u64> {
        None
    }

    /// A token cancelled when the hold is lost without a release (a lease ran out, a
    /// connection dropped). The in-process kind never loses a hold.
    fn lost(&self) -> Option<&CancelToken> {
        None
    }

    /// Drop the `unlock_on_cancel` registrations after the release (an embedding whose
    /// callbacks hold its objects drops them its own way).
    fn unregister(&self, registrations: Vec<Registration>) {
        for r in registrations {
            r.unregister();
        }
    }
}

/// Releases one hold, once. Callable from any thread.
///
/// # Invariants
/// - `released` goes from false to true once, set by the one call that releases `hold`.
///   When the hold decides (`Hold::release_decides`), it is set after the release, by
///   the call whose `release` succeeded and by any that lost to it; otherwise the swap
///   that sets it decides.
/// - `has_registration` is set only after a registration is in `registrations`;
///   registrations are unregistered by the release, or by [`Unlock::add_registration`]
///   if the release came first. Each side writes and then reads, all SeqCst, so at
///   least one of them sees the other's write and no registration is left behind: the
///   release writes `released` (or, when the hold decides, the lock's state, by the
///   release's own read-modify-write) and then reads `has_registration`; a registration
///   writes `has_registration` and then reads `released` (or the lock's state:
///   `Hold::is_held`).
/// - `registrations` is `None` until the first registration (most `Unlock`s never
///   have one, and dropping `None` costs nothing on the acquire/unlock path).
pub struct Unlock<H: Hold> {
    hold: H,
    released: AtomicBool,
    has_registration: AtomicBool,
    registrations: Mutex<Option<Vec<Registration>>>,
}

impl<H: Hold> Unlock<H> {
    /// Own a hold the caller has just taken.
    #[inline]
    pub fn new(hold: H) -> Unlock<H> {
        Unlock {
            hold,
            released: AtomicBool::new(false),
            has_registration: AtomicBool::new(false),
            registrations: Mutex::new(None),
        }
    }

    /// Release if still held; true if this call released.
    #[inline]
    pub fn unlock(&self) -> bool {
        if self.hold.release_decides() {
            return self.unlock_decided_by_hold();
        }
        // ORDERING: the swap decides which call releases (RMWs on one atomic have a
        // single order, so exactly one caller sees `false`); the release itself orders
        // the critical section. SeqCst for the flag handshake with `add_registration`
        // (see the invariants); on x86 it is the same locked instruction.
        if self.released.swap(true, Ordering::SeqCst) {
            return false;
        }
        self.release_claimed();
        true
    }

    /// [`Unlock::unlock`] for a caller whose every call on this `Unlock` is serialized
    /// by a lock outside it (the binding's GIL): a load and a store decide as well as a
    /// swap would then, without its locked instruction. Without that outer lock two
    /// callers could both release.
    #[inline]
    pub fn unlock_serialized(&self) -> bool {
        // ORDERING: Relaxed: the outer lock orders these accesses.
        if self.released.load(Ordering::Relaxed) {
            return false;
        }
        self.released.store(true, Ordering::Relaxed);
        self.release_claimed();
        true
    }

    /// [`Unlock::unlock`] when the hold's release decides (`Hold::release_decides`): no
    /// locked instruction but the release's own.
    #[inline]
    fn unlock_decided_by_hold(&self) -> bool {
        // ORDERING: Relaxed: a shortcut for a call after a release it is ordered after
        // (most second calls); a call that misses the flag is refused by the release.
        if self.released.load(Ordering::Relaxed) {
            return false;
        }
        let released = self.hold.release();
        // Set by the caller that released and by one that lost the race as well, so that
        // every call reports `released` once it returns. ORDERING: Relaxed: the flag
        // reports, and orders nothing (the release did).
        self.released.store(true, Ordering::Relaxed);
        if !released {
            return false;
        }
        // ORDERING: SeqCst, after the release's SeqCst read-modify-write: the handshake
        // with `add_registration` (see the invariants).
        if self.has_registration.load(Ordering::SeqCst) {
            self.unregister_all();
        }
        true
    }

    #[inline]
    fn release_claimed(&self) {
        // False for a hold that ended without this `Unlock` (a named lock's, when its
        // manager closed): nothing is left to release, and that is no error.
        let _ = self.hold.release();
        // ORDERING: SeqCst, the other half of the handshake with `add_registration`
        // (see the invariants); a set flag also means the registration is in the mutex.
        if self.has_registration.load(Ordering::SeqCst) {
            self.unregister_all();
        }
    }

    /// Whether the hold was released and no registration was ever added: nothing is
    /// left to do but to drop the hold (see `into_hold`).
    #[inline]
    pub fn is_finished(&self) -> bool {
        // ORDERING: a snapshot, as `released`; the caller owns the `Unlock` when it matters.
        self.released.load(Ordering::Relaxed) && !self.has_registration.load(Ordering::Relaxed)
    }

    /// The hold, for an embedding that drops a finished `Unlock` (`is_finished`) its
    /// own way.
    #[inline]
    pub fn into_hold(self) -> H {
        self.hold
    }

    /// Whether this hold has been released.
    #[inline]
    pub fn released(&self) -> bool {
        // ORDERING: a snapshot; it orders nothing.
        self.released.load(Ordering::Relaxed)
    }

    pub fn hold(&self) -> &H {
        &self.hold
    }

    /// The hold's fence number, if its kind issues one.
    pub fn fence(&self) -> Option<u64> {
        self.hold.fence()
    }

    /// The token cancelled when the hold is lost, if its kind can lose one.
    pub fn lost(&self) -> Option<&CancelToken> {
        self.hold.lost()
    }

    fn registrations(&self) -> MutexGuard<'_, Option<Vec<Registration>>> {
        // Nothing panics under this mutex; a poisoned one still holds a valid Vec.
        self.registrations.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn unregister_all(&self) {
        let taken = self.registrations().take();
        if let Some(taken) = taken {
            self.hold.unregister(taken);
        }
    }

    /// Keep the registration of an `unlock_on_cancel` callback, to unregister it when
    /// this `Unlock` releases (at once if it already has).
    pub fn add_registration(&self, registration: Registration) {
        self.registrations()
            .get_or_insert_with(Vec::new)
            .push(registration);
        // ORDERING: SeqCst store then SeqCst load: the handshake with the release,
        // which swaps `released` and then loads `has_registration` (see the invariants).
        self.has_registration.store(true, Ordering::SeqCst);
        let ended = if self.hold.release_decides() {
            !self.hold.is_held()
        } else {
            self.released.load(Ordering::SeqCst)
        };
        if ended {
            // Released meanwhile (from another thread): leave no callback behind.
            self.unregister_all();
        }
    }
}

impl<H: Hold + 'static> Unlock<H> {
    /// Release when `token` is cancelled, at once if it already is (Go's `UnlockOnCancel`).
    pub fn unlock_on_cancel(self: &Arc<Self>, token: &CancelToken) -> Option<Registration> {
        let me = self.clone();
        token.on_cancel(move |_| {
            me.unlock();
        })
    }
}
