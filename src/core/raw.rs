//! The seam every kind of lock plugs into: [`RawLock`] and its [`RawWaiter`].
//!
//! A kind of lock says how to take it without waiting, how to queue a waiter that is
//! woken through a [`Notify`], how a queued waiter learns that it was granted the lock,
//! how it gives up, and how a hold is given back. Everything else, the argument rules
//! (`acquire.rs`), the give-up rule (`give_up.rs`), how a thread waits (`wait.rs`) and
//! how a task waits (`task.rs`), is written once over these two traits. The in-process
//! slot (`LockView`, `lock.rs`) is the first kind.

use std::task::Waker;
use std::time::Instant;

use super::sync::Thread;

/// How a queued waiter is woken.
#[derive(Clone)]
pub enum Notify {
    /// A blocked thread: `unpark`.
    Thread(Thread),
    /// An asynchronous task: its waker (the binding's doorbell).
    Task(Waker),
}

impl Notify {
    pub(crate) fn wake(&self) {
        match self {
            Notify::Thread(t) => t.unpark(),
            Notify::Task(w) => w.wake_by_ref(),
        }
    }

    pub(crate) fn is_task(&self) -> bool {
        matches!(self, Notify::Task(_))
    }
}

/// When a thread woken to compete for a free lock will compete.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compete {
    /// As soon as it is woken: it leaves the queue then (parking_lot's way), so releases
    /// meanwhile stay on the fast path.
    AtOnce,
    /// Only after something that may take a while (the binding takes the GIL back
    /// first): it keeps its place in the queue meanwhile, so the hand-off rule still
    /// reaches it, and releases wake nobody else.
    Later,
}

/// Where a queued waiter stands, as the waiter itself reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// Still waiting.
    Waiting,
    /// The lock was handed to it: the waiter holds it.
    Granted,
    /// Woken to compete for a free lock: call [`RawWaiter::compete`].
    Retry,
}

/// What [`RawLock::enqueue`] did.
pub enum Enqueued<W> {
    /// The lock was free after all: the caller holds it.
    Acquired,
    /// Queued; woken through the `Notify` when its status changes.
    Queued(W),
}

/// One kind of lock, seen by the acquire driver.
///
/// # Contract
/// - `try_lock` and a grant to a waiter are the only ways a hold starts; `unlock` gives
///   back one hold of this lock's mode, false (and nothing changed) if there is none.
/// - A queued waiter ends exactly one way: granted (it holds the lock) or abandoned
///   (it does not). [`RawWaiter::abandon`] decides that race; the driver applies the
///   give-up rule to its answer.
pub trait RawLock: Send + Sync {
    type Waiter: RawWaiter;

    /// Take the lock without waiting.
    fn try_lock(&self) -> bool;

    /// Give back one hold; false if there was none.
    fn unlock(&self) -> bool;

    /// Take the lock if it is free to take, else queue a waiter woken through `notify`.
    /// `compete` says when a thread woken to compete will compete (kinds that only ever
    /// hand over ignore it).
    fn enqueue(&self, notify: Notify, compete: Compete) -> Enqueued<Self::Waiter>;

    /// Why the lock cannot be acquired now, if it cannot (its backend failed or was
    /// closed): the driver fails an acquire with [`AcquireError::Backend`] before it
    /// tries, and a queued waiter gives up when a wake-up finds one. The in-process
    /// kind never fails.
    ///
    /// [`AcquireError::Backend`]: super::error::AcquireError::Backend
    #[inline]
    fn failure(&self) -> Option<String> {
        None
    }

    /// Whether a thread about to queue may spin briefly instead ([`acquire::block`]):
    /// only when the lock is held and nobody is queued, so that the holder is running
    /// and a spinner overtakes no sleeping waiter. Kinds whose holder is elsewhere (a
    /// server, another process) keep the default: never.
    ///
    /// [`acquire::block`]: super::acquire::block
    #[inline]
    fn may_spin(&self) -> bool {
        false
    }

    /// Whether an exclusive hold looks free to take right now, for a woken thread that
    /// lost its competition and watches for the next chance ([`acquire::block`]): a
    /// plain read, which the competition then decides. Kinds that never answer
    /// [`Status::Retry`], and kinds that cannot tell with one read (a named lock, whose
    /// slot is behind its table), keep the default, never: a watch then competes only
    /// once a release has reached the waiter.
    ///
    /// [`acquire::block`]: super::acquire::block
    #[inline]
    fn looks_free(&self) -> bool {
        false
    }
}

/// A queued acquire of one [`RawLock`].
pub trait RawWaiter: Send + Sync {
    /// Where the wait stands (read by the waiter itself, without blocking).
    fn status(&self) -> Status;

    /// Leave the queue. True if it left without the lock; false if the lock had been
    /// handed to it first, in which case the caller holds it.
    fn abandon(&self) -> bool;

    /// After [`Status::Retry`]: take the lock if it is free, else wait again at the
    /// old place. True if the caller now holds the lock. Kinds that never answer
    /// `Retry` keep this default.
    fn compete(&self) -> bool {
        unreachable!("BUG: a waiter that never retries was asked to compete")
    }

    /// Block the calling thread until it is notified or `until` passes (or spuriously).
    /// Kinds whose grant does not come through `Notify::Thread` (a futex word, a socket)
    /// wait their own way.
    fn park(&self, until: Option<Instant>) {
        super::sync::park_until(until);
    }
}

/// A waiter of a kind chosen at run time (an embedding that holds locks of any kind).
impl<W: RawWaiter + ?Sized> RawWaiter for Box<W> {
    #[inline]
    fn status(&self) -> Status {
        (**self).status()
    }

    fn abandon(&self) -> bool {
        (**self).abandon()
    }

    fn compete(&self) -> bool {
        (**self).compete()
    }

    fn park(&self, until: Option<Instant>) {
        (**self).park(until)
    }
}
