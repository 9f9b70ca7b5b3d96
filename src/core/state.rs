//! The lock word: Go's one slot, its reader group and its waiting-writer count, in one
//! `AtomicUsize` (parking_lot's named-bit style).
//!
//! Go's ctxlock keeps a channel of capacity one (the slot), a helper goroutine that
//! holds the slot while `readers > 0`, and a `want` counter of waiting writers that
//! keeps new readers out. Here the slot is held either by one exclusive holder
//! (`WRITER`) or by the reader group (`readers > 0`); `WRITER_QUEUED` is `want > 0`.
//!
//! # State table
//! `WRITER` | readers | `QUEUED` | `WRITER_QUEUED` | `AWAY` | meaning
//! -------- | ------- | -------- | --------------- | ------ | -------
//!    0     |    0    |    0     |        0        |   0    | free: a fast-path CAS takes it
//!    1     |    0    |    0     |        0        |   0    | held exclusively, nobody waits: release is one CAS
//!    0     |   n>0   |    0     |        0        |   0    | held by a reader group of n; readers join with one CAS
//!    1     |    0    |    1     |       0/1       |   0    | held exclusively, waiters queued: release goes through the queue
//!    0     |   n>0   |    1     |        1        |   0    | readers hold, a writer waits: new readers queue (no writer starvation)
//!    0     |    0    |    1     |       0/1       |   0    | only in a barging `Lock`: a woken waiter is re-competing for the slot
//!   0/1    |    0    |    1     |        1        |   1    | only in a barging `Lock`: the head waiter is away competing; release is one CAS
//!
//! While `WRITER` is set no reader holds the slot, and the reader-count bits carry the
//! exclusive hold's id instead (`HOLD_ID_MASK`; 0 for a hold taken without one): the
//! `readers` column reads 0 then.
//!
//! # Invariants
//! 1. `WRITER` ⇒ no reader group (the slot has one holder: a writer or the reader
//!    group); the reader-count bits are then the hold's id (invariant 7).
//! 2. `QUEUED` ⇔ the wait queue is non-empty, and `WRITER_QUEUED` ⇔ it holds an
//!    exclusive waiter. Both bits are set and cleared **only with the queue mutex held**;
//!    the fast paths read them but never change them.
//! 3. Readers are queued only while `WRITER` or `WRITER_QUEUED` is set, so a free slot
//!    never has readers waiting.
//! 4. With hand-off (fair `Lock`, `SharableLock`, any asyncio waiter at the head),
//!    `QUEUED` ⇒ the slot is held: a release with waiters passes the slot on without
//!    ever leaving it free. Only the barging `Lock` has the last two rows of the table.
//! 5. `AWAY` ⇒ the barging policy, and the head waiter was woken to compete later
//!    (`RETRY`, keeping its place), has a timer mark scheduled (none under loom, which
//!    has no time) and has not been marked as having waited `FAIR_AFTER`: the grant
//!    policy would hand the slot to nobody on a release, so an exclusive release may
//!    free the slot with one CAS, without the queue mutex. Like the `QUEUED` bits, `AWAY`
//!    is set and cleared only with the queue mutex held: set where that condition was
//!    just checked (by the woken waiter once its mark is scheduled, and kept by
//!    `Slot::settle`), cleared by whatever may change the head or its status
//!    (`Slot::settle`, `Slot::acquire_or_queue`) and by the mark itself. Clearing it is
//!    always safe: releases then go through the queue.
//! 6. `SCOPED` ⇒ `WRITER`: the exclusive hold is a scoped hold (Python's `with`). Set by
//!    the holder, with the take (`Slot::try_lock_scoped`: one CAS) or right after it
//!    (`Slot::scope_hold`); cleared by the one scoped release that claims it (with the
//!    release itself when nobody waits: one CAS). Callers give a scoped hold back only
//!    through `Slot::release_scoped`, and an `Unlock`'s hold never carries the bit; an
//!    exclusive release that finds it anyway (a caller breaking that rule) clears it with
//!    `WRITER`, so the implication holds on every path. The table's rows with `WRITER`
//!    set hold with or without it.
//! 7. With `WRITER` set, the bits of `HOLD_ID_MASK` are the exclusive hold's id (0:
//!    none); with it clear, they are the reader count. An id is written only together
//!    with `WRITER`, by the take's CAS (`Slot::try_lock_with_id`), and every change that
//!    clears `WRITER` clears the id in the same CAS. Ids come from `hold_id::next`, which
//!    never hands one out twice (for 2^59 of them), so a release that names an id
//!    (`Slot::release_with_id`) finds its own hold or none: a second call of one `Unlock`
//!    can never end a later hold, whoever races. A scoped hold never has an id (`SCOPED`
//!    ⇒ id 0); nor does one handed over by the queue.

/// The slot is held by one exclusive holder.
pub(crate) const WRITER: usize = 1;
/// The wait queue is non-empty; changed only under the queue mutex.
pub(crate) const QUEUED: usize = 1 << 1;
/// An exclusive waiter is queued (Go's `want > 0`); changed only under the queue mutex.
pub(crate) const WRITER_QUEUED: usize = 1 << 2;
/// The head waiter is away competing (barging `Lock`; invariant 5); changed only under
/// the queue mutex.
pub(crate) const AWAY: usize = 1 << 3;
/// The exclusive hold is a scoped hold (invariant 6).
pub(crate) const SCOPED: usize = 1 << 4;
/// One member of the reader group.
pub(crate) const ONE_READER: usize = 1 << 5;
/// The reader-group count.
pub(crate) const READERS_MASK: usize = !(ONE_READER - 1);
/// The exclusive hold's id, in the reader-count bits while `WRITER` is set (invariant 7).
pub(crate) const HOLD_ID_MASK: usize = READERS_MASK;

/// How many readers hold the slot (none while a writer does: its id is in those bits).
#[inline]
pub(crate) const fn readers(state: usize) -> usize {
    if state & WRITER != 0 {
        0
    } else {
        state >> ONE_READER.trailing_zeros()
    }
}

/// Whether anyone (a writer or the reader group) holds the slot.
#[inline]
pub(crate) const fn slot_held(state: usize) -> bool {
    state & (WRITER | READERS_MASK) != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bits_do_not_overlap() {
        let bits = [WRITER, QUEUED, WRITER_QUEUED, AWAY, SCOPED, READERS_MASK];
        for (i, a) in bits.iter().enumerate() {
            for b in &bits[i + 1..] {
                assert_eq!(a & b, 0);
            }
        }
        assert_eq!(bits.iter().fold(0, |all, b| all | b), usize::MAX);
        assert_eq!(readers((3 * ONE_READER) | QUEUED), 3);
        assert!(slot_held(ONE_READER));
        assert!(slot_held(WRITER | QUEUED));
        assert_eq!(readers(SCOPED | AWAY), 0);
        assert!(!slot_held(QUEUED | WRITER_QUEUED));
        // An exclusive hold's id is no reader count.
        assert_eq!(readers(WRITER | (7 * ONE_READER) | QUEUED), 0);
        assert!(slot_held(WRITER | (7 * ONE_READER)));
    }
}
