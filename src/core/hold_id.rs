//! Ids for exclusive holds (invariant 7 in `state.rs`): what lets an `Unlock`'s release
//! name its own hold, so that its compare-and-swap, not a once-only flag, decides which of
//! two racing calls releases.
//!
//! An id must never be handed out twice while a call that names it may still be running:
//! a stale call would then end somebody else's hold. On a 64-bit target no id is handed
//! out twice at all until 2^59 of them have been, or 2^43 blocks reserved (centuries at
//! any rate of acquires, or of threads). Each thread takes its ids from a block of `BLOCK`
//! consecutive ones that it reserved from a process-wide counter, so the common case is
//! a thread-local increment, and the process-wide counter is touched once per `BLOCK`
//! ids. On a 32-bit target the word has 27 bits for them, which a few thousand threads
//! use up: callers use ids only on 64-bit targets (the Python binding does).

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

use super::state::ONE_READER;

/// Ids a thread reserves at once.
const BLOCK: u64 = 1 << 16;

/// The next block to reserve. Block 0 is never reserved, so no id is 0 ("no id").
static BLOCKS: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// The thread's next id; a multiple of `BLOCK` when its block is used up (or it has
    /// none yet: 0).
    static NEXT: Cell<u64> = const { Cell::new(0) };
}

/// A new id, already in the state word's `HOLD_ID_MASK` bits: on a 64-bit target never 0,
/// and never equal to one handed out before (see the module's docs).
#[inline]
pub(crate) fn next() -> usize {
    NEXT.with(|next| {
        let mut id = next.get();
        if id % BLOCK == 0 {
            // ORDERING: Relaxed: only the values matter (each reserved once, by the RMW's
            // single order); no memory is published with them.
            id = BLOCKS.fetch_add(1, Ordering::Relaxed).wrapping_mul(BLOCK);
        }
        next.set(id.wrapping_add(1));
        // Shifted into the reader-count bits; the top bits fall off only after 2^59 ids.
        (id as usize).wrapping_mul(ONE_READER)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::state::HOLD_ID_MASK;

    #[test]
    fn ids_are_never_0_nor_repeated_across_threads_and_blocks() {
        let mine: Vec<usize> = (0..(BLOCK as usize + 10)).map(|_| next()).collect();
        let theirs: Vec<usize> = std::thread::spawn(|| (0..1000).map(|_| next()).collect())
            .join()
            .unwrap();
        let mut all: Vec<usize> = mine.iter().chain(&theirs).copied().collect();
        assert!(all.iter().all(|&id| id != 0 && id & !HOLD_ID_MASK == 0));
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), mine.len() + theirs.len());
    }
}
