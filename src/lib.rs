//! ctxlock: locks that take a deadline and a cancellation token, for threads and asyncio.
//!
//! The design is Go's ctxlock, built for speed:
//!
//! | Go ctxlock | here |
//! |---|---|
//! | `Lock`: a channel of capacity one | [`Lock`]: the slot, one CAS on a state word (`core/state.rs`) |
//! | acquire = send inside `select { ctx.Done() }` | [`LockView::lock`]: fast CAS, else queue and park with the token |
//! | unlock = receive | [`LockView::unlock`]: one CAS, or hand-off through the queue |
//! | `SharableLock`: a helper goroutine holds the slot while `readers > 0` | the reader-group count in the state word holds the slot; no thread |
//! | `want`: the count of waiting writers | `WRITER_QUEUED`: set while an exclusive waiter is queued |
//! | `UnlockFunc`, a once-only function | [`Unlock`]: one atomic swap, or the release's own CAS for a hold with an id |
//! | `UnlockOnCancel(ctx)` | [`Unlock::unlock_on_cancel`] |
//! | `context.Context` with cause and deadline | [`CancelToken`] |
//!
//! Blocked threads and asynchronous waiters share one FIFO wait queue per lock
//! (`core/queue.rs`); ownership moves to a waiter only by a CAS on the state word made
//! under the queue mutex, and a waiter leaves without the lock only through one
//! `abandon` path, whatever made it give up (`core/slot.rs`).
//!
//! The core is pure Rust. The Python extension (`ctxlock._ctxlock`) is the `python`
//! feature, built by maturin.

mod core;
#[cfg(feature = "python")]
mod python;

pub use crate::core::acquire;
pub use crate::core::cancel::{CancelToken, Reason, Registration};
pub use crate::core::deadline::{BadTimeout, Timeout};
pub use crate::core::error::AcquireError;
pub use crate::core::fork::after_fork_in_child;
pub use crate::core::lock::{forever, Lock, LockView, SharableLock};
/// Named locks (`LockManager(url)` in Python): the contract, and the scopes by url.
#[cfg(not(loom))]
pub use crate::core::named::{
    as_task, check_name, Failure, Info, Key, Lost, NamedView, ScopedExit, Session, Who,
    MAX_NAME_BYTES,
};
pub use crate::core::park::Interrupt;
/// A PostgreSQL connection url, parsed: the PostgreSQL scope's way to its server.
#[cfg(not(loom))]
pub use crate::core::pg_url::Target as PgTarget;
pub use crate::core::raw::{Compete, Enqueued, Notify, RawLock, RawWaiter, Status};
#[cfg(not(loom))]
pub use crate::core::scopes::{before_exit, connect, ConnectError, SCHEMES};
pub use crate::core::unlock::Hold;
pub use crate::core::wait::{ThreadWait, Wait, Woken};

/// A queued asynchronous acquire of an in-process lock.
pub type TaskWait = crate::core::task::TaskWait<LockView>;
/// The once-only release of an in-process lock's hold.
pub type Unlock = crate::core::unlock::Unlock<LockView>;
pub use crate::core::waiter::Mode;
