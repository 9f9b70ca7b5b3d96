//! What a child process sees after `fork()`: only the forking thread exists there.
//!
//! The rule, like CPython's for `threading.Lock`: a lock keeps its state, so a lock held
//! by another thread of the parent stays held in the child (acquire it with a deadline),
//! and a hold of the forking thread can be released there. What the core must mend:
//! - threads that were queued on a lock do not exist in the child: waiters queued before
//!   the fork (by a thread: blocked threads) are dropped from the queue the first time
//!   the queue is settled in the child, so a release never hands the lock to a ghost;
//! - the timer thread does not exist either: the child starts its own, with the
//!   parent's pending deadlines;
//! - nor do the callback runner threads: the child gets new runners (so it never
//!   inherits their mutex locked); jobs queued for the old ones run on new threads, or are
//!   dropped unrun if a runner held the old mutex at the fork (`runner.rs`).
//!
//! The embedding calls [`after_fork_in_child`] in the child (the Python layer registers
//! it with `os.register_at_fork`). A lock whose queue mutex was held by another thread
//! at the moment of the fork cannot be mended; those critical sections are a few
//! instructions long.

use std::sync::atomic::{AtomicU64, Ordering};

static GENERATION: AtomicU64 = AtomicU64::new(0);

/// Which process generation this is: bumped in each forked child.
#[inline]
pub(crate) fn generation() -> u64 {
    // ORDERING: only ever changed in a child right after fork, while it has one thread.
    GENERATION.load(Ordering::Relaxed)
}

/// Call in the child process right after `fork()`, before anything else uses ctxlock.
pub fn after_fork_in_child() {
    // ORDERING: see `generation`.
    GENERATION.fetch_add(1, Ordering::Relaxed);
    super::timer::after_fork_in_child();
    super::runner::after_fork_in_child();
}
