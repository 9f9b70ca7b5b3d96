//! The one switch between `std` and `loom` (the idea of tokio's `loom/mod.rs`).
//!
//! Every atomic, mutex and `Arc` of the lock state comes from here, so `RUSTFLAGS="--cfg
//! loom"` swaps them all for loom's model-checked versions without touching the code
//! that uses them. Time is not modelled by loom: under `cfg(loom)` a timed park is an
//! untimed one, and the model tests drive timeouts as explicit `abandon` calls.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};
#[cfg(loom)]
pub(crate) use loom::sync::{Arc, Mutex, MutexGuard};
#[cfg(loom)]
pub(crate) use loom::thread::{current, Thread};

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::{Arc, Mutex, MutexGuard};
#[cfg(not(loom))]
pub(crate) use std::thread::{current, Thread};

use std::time::Instant;

/// Park the current thread until it is unparked, `until` passes, or a spurious wake-up.
/// Callers always re-check their condition afterwards.
pub(crate) fn park_until(until: Option<Instant>) {
    #[cfg(loom)]
    {
        let _ = until;
        loom::thread::park();
    }
    #[cfg(not(loom))]
    match until {
        None => std::thread::park(),
        Some(t) => {
            let now = Instant::now();
            if t > now {
                std::thread::park_timeout(t - now);
            }
        }
    }
}

/// Lock a mutex of the core. The core never panics while holding one of its mutexes
/// (no user code runs under them), so a poisoned mutex can only come from a bug in a
/// panicking test; its data is still consistent at every unlock point, so go on.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
