//! The slot: one state word and one wait queue, shared by `Lock`, both views of
//! `SharableLock`, blocked threads and asyncio tasks (this is ctxlock's `batch_semaphore`).
//!
//! Go's ctxlock acquires by putting the one token into a channel of capacity one inside
//! a `select` on the context; here the uncontended acquire is one CAS on the state word
//! (see `state.rs`) and a release with nobody waiting is one CAS back. Only when the
//! CAS fails does an acquirer take the queue mutex, re-check the state under it
//! (parking_lot's "validate") and queue.
//!
//! Every change of hands that involves the queue goes through [`Slot::settle`], under
//! the queue mutex: it applies the release (if any), asks the grant policy whom to hand
//! the slot to, writes the new state with one CAS, and only then marks the grantees
//! `GRANTED`. A waiter that gives up calls [`Slot::abandon`], which settles too, so a
//! timed-out writer lets the readers it held back in at once (unless another writer
//! still waits, before or after them: they then follow it), and a cancelled head
//! waiter never strands the ones behind it (the bug x/sync's semaphore fixed in 2020).
//!
//! Grant policy (hand-off vs barging):
//! - `Policy::Fair` (fair `Lock`, `SharableLock`): always hand-off, in FIFO order;
//!   SharableLock is phase-fair: an exclusive release grants every queued reader, the
//!   last reader out grants the head writer.
//! - `Policy::Barging` (default `Lock`): a release wakes the head thread to re-compete
//!   (a running thread may take the slot first, which keeps throughput under the GIL),
//!   unless it has waited `FAIR_AFTER` since it first queued, or it is an asyncio task:
//!   then it is handed the slot (CPython 3.13's and parking_lot's eventual fairness).
//!   A woken waiter (`RETRY`) competes at once, out of the queue (parking_lot's way),
//!   unless it said it will compete later (`Compete::Later`: the binding lets a thread
//!   compete only once it holds the GIL again, see `python/blocking.rs`). Such a waiter
//!   keeps its place while it is away: one competitor at a time (later releases wake
//!   nobody else), and the first release after it has waited `FAIR_AFTER` hands it the
//!   slot even if it has not come back yet. While it is away, releases neither read the
//!   clock nor take the queue mutex (under the GIL they come every few hundred
//!   nanoseconds, and a clock read is ~25 ns of each): the woken thread has the timer
//!   thread mark it at `FAIR_AFTER` (`FairMark`) and sets `AWAY` in the state word, so
//!   that an exclusive release frees the slot with one CAS; the mark clears `AWAY`, and
//!   the next release goes through the queue and hands the slot over. The mark is as
//!   punctual as the timer thread: when the scheduler wakes it on the CPU of a thread
//!   that is running Python, it can wait for that thread's time slice to end (up to a
//!   scheduler tick, a few ms), and the waiter waits that much longer than
//!   `FAIR_AFTER`. BENCHMARKS.md ("Where the cost goes", `contended_4`) has what a
//!   check that does not wait for the timer cost.

use std::sync::OnceLock;
use std::time::Duration;

use super::queue::{WaitQueue, WakeList};
use super::raw::{RawWaiter, Status};
use super::state::{
    readers, slot_held, AWAY, HOLD_ID_MASK, ONE_READER, QUEUED, READERS_MASK, SCOPED, WRITER,
    WRITER_QUEUED,
};
use super::sync::Arc;
use super::sync::{lock, AtomicU32, AtomicUsize, Mutex, Ordering};
#[cfg(not(loom))]
use super::timer::{self, Expire};
use super::waiter::{Mode, Waiter, ABANDONED, GRANTED, MARK_ARMED, MARK_DUE, RETRY, WAITING};

/// How long a queued thread may be overtaken by barging before the next release hands
/// the slot to it directly (CPython's `TIME_TO_BE_FAIR_NS`).
#[cfg_attr(loom, allow(dead_code))]
pub(crate) const FAIR_AFTER: Duration = Duration::from_millis(1);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Policy {
    Barging,
    Fair,
}

/// Whom one pass of the grant policy hands the slot to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Grant {
    Nobody,
    /// The head exclusive waiter, by hand-off.
    Writer,
    /// The head exclusive waiter is woken to re-compete (barging policy).
    Retry,
    /// Every queued shared waiter joins the reader group.
    Readers,
}

/// `(tag, holds carrying it)` pairs; see `Slot::holder_tags`.
pub(crate) type HolderTags = Vec<(u64, usize)>;

pub(crate) struct Slot {
    /// The lock word; its bits, table and invariants are in `state.rs`.
    state: AtomicUsize,
    queue: Mutex<WaitQueue>,
    policy: Policy,
    /// Scoped reader holds: holds taken for a scope (Python's `with`) that whoever ends a
    /// scope releases, as opposed to holds owned by an `Unlock` (or by a waiter being
    /// settled), which only their owner releases. (The exclusive hold says whether it is
    /// scoped in the state word itself: `SCOPED`, invariant 6 in `state.rs`.)
    /// Invariant: `scoped_readers` never exceeds the number of scoped reader holds in
    /// the state word: it is raised only after such a hold is taken, and lowered (never
    /// below 0) before one is released. So a release of a scoped hold can only ever
    /// give back a scoped hold, never the hold of an `Unlock`: a shared hold has no
    /// identity in the state word, and the count is what tells the two kinds apart.
    /// 32 bits (a lock is one of very many small objects): four billion scoped holds at
    /// once, each a `with` block in progress, cannot exist.
    scoped_readers: AtomicU32,
    /// Tags the embedding layer attaches to holds, with a count each (the Python layer
    /// tags a hold taken by `async with` with its event loop's thread, to detect a
    /// blocking acquire that could never succeed). The core never reads them; touched only off the
    /// uncontended thread paths.
    /// Boxed and absent until the first tag: most locks are never held by a task, and
    /// an empty `Vec` inline would cost every lock 24 bytes. Once made, kept with the
    /// lock (empty when no hold is tagged; about 56 bytes in two allocations): a lock
    /// that a task takes by `async with` once is usually taken so again, and making and
    /// freeing the box and its buffer on every `async with` cost two allocations and two
    /// frees each time.
    holder_tags: Mutex<Option<Box<HolderTags>>>,
    /// How many holds carry a tag: the sum of the counts in `holder_tags`, changed only
    /// with its mutex held (so a load and a store change it: no other writer can come in
    /// between). Every contended blocking acquire asks whether its thread's
    /// tag is on a hold (`has_tagged_hold`); while no hold is tagged, nearly always, one
    /// load answers, instead of a mutex that every waiting thread would take in turn.
    /// 32 bits: fewer holds than that exist at once (a lock is one of very many small
    /// objects, and this fits in the padding after `policy`).
    tagged: AtomicU32,
}

impl Slot {
    pub(crate) fn new(policy: Policy) -> Self {
        Slot {
            state: AtomicUsize::new(0),
            queue: Mutex::new(WaitQueue::default()),
            policy,
            scoped_readers: AtomicU32::new(0),
            holder_tags: Mutex::new(None),
            tagged: AtomicU32::new(0),
        }
    }

    pub(crate) fn policy(&self) -> Policy {
        self.policy
    }

    /// A snapshot of the state word, for `locked()` and statistics.
    pub(crate) fn state(&self) -> usize {
        // ORDERING: a snapshot for reporting; it orders nothing.
        self.state.load(Ordering::Relaxed)
    }

    /// Held, with nobody queued (see [`RawLock::may_spin`]).
    ///
    /// [`RawLock::may_spin`]: super::raw::RawLock::may_spin
    #[inline]
    pub(crate) fn may_spin(&self) -> bool {
        let s = self.state();
        slot_held(s) && s & QUEUED == 0
    }

    /// Nobody holds the slot (see [`RawLock::looks_free`]).
    ///
    /// [`RawLock::looks_free`]: super::raw::RawLock::looks_free
    #[inline]
    pub(crate) fn looks_free(&self) -> bool {
        !slot_held(self.state())
    }

    /// The uncontended acquire: one CAS, no mutex, no clock.
    #[inline]
    pub(crate) fn try_lock(&self, mode: Mode) -> bool {
        match mode {
            Mode::Exclusive => self.try_lock_writer(0),
            Mode::Shared => self.try_join_readers(),
        }
    }

    /// [`Slot::try_lock`] for an exclusive hold with the id `id` (invariant 7 in
    /// `state.rs`; from `hold_id::next`), which only [`Slot::release_with_id`] with the
    /// same id ends.
    #[inline]
    pub(crate) fn try_lock_with_id(&self, id: usize) -> bool {
        debug_assert!(id != 0 && id & !HOLD_ID_MASK == 0, "BUG: not a hold id");
        self.try_lock_writer(id)
    }

    /// The uncontended exclusive acquire, the hold with the id `id` (0: none).
    #[inline]
    fn try_lock_writer(&self, id: usize) -> bool {
        // ORDERING: Acquire on success pairs with the Release of the previous release, so
        // its critical section happens-before ours. Failure reads nothing we rely on.
        self.state
            .compare_exchange(0, WRITER | id, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
            || (self.policy == Policy::Barging && self.try_barge(id))
    }

    /// [`Slot::try_lock`], the hold taken as scoped ([`Slot::scope_hold`]): for the
    /// exclusive mode in the same CAS when the slot is free and nobody waits.
    #[inline]
    pub(crate) fn try_lock_scoped(&self, mode: Mode) -> bool {
        let taken = match mode {
            Mode::Exclusive => {
                // ORDERING: Acquire on success, as in `try_lock`.
                if self
                    .state
                    .compare_exchange(0, WRITER | SCOPED, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
                {
                    return true;
                }
                self.policy == Policy::Barging && self.try_barge(0)
            }
            Mode::Shared => self.try_join_readers(),
        };
        if taken {
            self.scope_hold(mode);
        }
        taken
    }

    /// Take a free slot even though waiters are queued (barging policy only), with the
    /// hold id `id` (0: none).
    #[cold]
    fn try_barge(&self, id: usize) -> bool {
        // ORDERING: Relaxed load; the CAS below is what takes the slot.
        let mut s = self.state.load(Ordering::Relaxed);
        while !slot_held(s) {
            // A free slot has no readers, so the id's bits are clear.
            // ORDERING: Acquire as in `try_lock`.
            match self.state.compare_exchange_weak(
                s,
                s | WRITER | id,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(actual) => s = actual,
            }
        }
        false
    }

    /// Join the reader group unless a writer holds the slot or waits for it.
    #[inline]
    fn try_join_readers(&self) -> bool {
        // Guess the uncontended state first: one CAS when nobody else is around.
        let mut s = 0;
        loop {
            if s & (WRITER | WRITER_QUEUED) != 0 {
                // In a forked child the queued writer may be a thread of the parent.
                if s & WRITER == 0 && super::fork::generation() != 0 && self.forget_parent() {
                    // ORDERING: as the failure of the CAS below: a fresh guess.
                    s = self.state.load(Ordering::Relaxed);
                    continue;
                }
                return false;
            }
            debug_assert!(readers(s) < READERS_MASK >> 3, "BUG: reader count overflow");
            // ORDERING: Acquire on success pairs with the Release of the writer that freed
            // the slot; failure only feeds the next attempt.
            match self.state.compare_exchange_weak(
                s,
                s + ONE_READER,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(actual) => s = actual,
            }
        }
    }

    /// Give back one hold of `mode`. Returns false (and changes nothing) if the slot
    /// was not held in that mode, which only a misused `__exit__` can cause.
    #[inline]
    pub(crate) fn release(&self, mode: Mode) -> bool {
        match mode {
            Mode::Exclusive => {
                // ORDERING: Release publishes the critical section to the next Acquire CAS.
                match self
                    .state
                    .compare_exchange(WRITER, 0, Ordering::Release, Ordering::Relaxed)
                {
                    Ok(_) => return true,
                    // The head waiter is away competing: the policy would grant nobody,
                    // so free the slot and leave the queue as it is (invariant 5). The
                    // CAS fails if the queue side changed the word meanwhile. (A scoped
                    // hold comes here claimed already; an exclusive release ends
                    // `SCOPED` and the hold's id with `WRITER` all the same: invariants 6
                    // and 7.)
                    // ORDERING: Release, as above.
                    Err(s)
                        if s & (AWAY | WRITER) == AWAY | WRITER
                            && self
                                .state
                                .compare_exchange(
                                    s,
                                    s & !(WRITER | SCOPED | HOLD_ID_MASK),
                                    Ordering::Release,
                                    Ordering::Relaxed,
                                )
                                .is_ok() =>
                    {
                        return true;
                    }
                    Err(_) => {}
                }
            }
            Mode::Shared => {
                let mut s = ONE_READER;
                loop {
                    if readers(s) == 0 || (readers(s) == 1 && s & QUEUED != 0) {
                        break;
                    }
                    // ORDERING: Release publishes the reader's critical section to the
                    // writer that next takes the slot.
                    match self.state.compare_exchange_weak(
                        s,
                        s - ONE_READER,
                        Ordering::Release,
                        Ordering::Relaxed,
                    ) {
                        Ok(_) => return true,
                        Err(actual) => s = actual,
                    }
                }
            }
        }
        self.release_slow(mode)
    }

    /// End the exclusive hold with the id `id` (taken by [`Slot::try_lock_with_id`]);
    /// false, changing nothing, if it has ended already. Of any number of calls naming
    /// one id, racing or not, one releases: the id is in the word the release's CAS
    /// changes, and no later hold has it (invariant 7).
    #[inline]
    pub(crate) fn release_with_id(&self, id: usize) -> bool {
        if id == 0 || id & !HOLD_ID_MASK != 0 {
            return false; // no hold has that id (0 is "none"; other bits are no id)
        }
        // ORDERING: Release publishes the critical section, as in `release`; SeqCst for
        // the handshake an `Unlock` whose hold decides makes with a registration (see
        // `Unlock`'s invariants; on x86-64 and aarch64 the same instruction).
        match self
            .state
            .compare_exchange(WRITER | id, 0, Ordering::SeqCst, Ordering::Relaxed)
        {
            Ok(_) => true,
            Err(s) => self.release_with_id_slow(id, s),
        }
    }

    /// [`Slot::release_with_id`] past its one CAS: waiters queued, the head away, or the
    /// hold gone. `s` is a recent read of the state word.
    #[cold]
    fn release_with_id_slow(&self, id: usize, mut s: usize) -> bool {
        loop {
            if s & (WRITER | HOLD_ID_MASK) != WRITER | id {
                return false; // ended already: this call's, or a racing call's, release
            }
            if s & AWAY == 0 {
                break;
            }
            // The head waiter is away: free the slot in one CAS, as `release` does
            // (invariant 5). ORDERING: as in `release_with_id`.
            match self.state.compare_exchange_weak(
                s,
                s & !(WRITER | SCOPED | HOLD_ID_MASK),
                Ordering::SeqCst,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(actual) => s = actual,
            }
        }
        self.with_queue(|q, wake| self.settle(q, Some(Mode::Exclusive), id, wake))
    }

    /// Whether the exclusive hold with the id `id` still holds the slot (an `Unlock`'s
    /// registration handshake: see `Unlock`'s invariants).
    pub(crate) fn holds_id(&self, id: usize) -> bool {
        // ORDERING: SeqCst, the other half of the handshake with `release_with_id`.
        self.state.load(Ordering::SeqCst) & (WRITER | HOLD_ID_MASK) == WRITER | id
    }

    /// Take the free slot in `mode` by a store, for a caller that knows no other thread
    /// can reach the slot until it releases a mutex it holds (the named locks' table: no
    /// hold, no waiter, no other reference). A compare-and-swap is a locked instruction;
    /// this is a plain one.
    #[cfg_attr(loom, allow(dead_code))]
    #[inline]
    pub(crate) fn take_alone(&self, mode: Mode) {
        // ORDERING: Relaxed: nobody else reads or writes the word before the caller's
        // mutex is released, and that release publishes this store to the next user.
        debug_assert_eq!(self.state.load(Ordering::Relaxed), 0, "BUG: not free");
        self.state.store(held_alone(mode), Ordering::Relaxed);
    }

    /// Give back the slot's only hold, of `mode`, by a store, as [`Slot::take_alone`].
    #[cfg_attr(loom, allow(dead_code))]
    #[inline]
    pub(crate) fn release_alone(&self, mode: Mode) {
        // ORDERING: as in `take_alone`.
        debug_assert_eq!(self.state.load(Ordering::Relaxed), held_alone(mode), "BUG");
        self.state.store(0, Ordering::Relaxed);
    }

    /// [`Slot::release`] when it needs no hand-off: one CAS, nobody woken. False (and
    /// nothing changed) when waiters are queued or this is not a hold of `mode`; then
    /// `release` does it (the caller must not hold a mutex that a wake-up may need).
    /// (Used by the named locks, which loom does not build.)
    #[cfg_attr(loom, allow(dead_code))]
    #[inline]
    pub(crate) fn release_uncontended(&self, mode: Mode) -> bool {
        match mode {
            // ORDERING: Release, as in `release`.
            Mode::Exclusive => self
                .state
                .compare_exchange(WRITER, 0, Ordering::Release, Ordering::Relaxed)
                .is_ok(),
            Mode::Shared => {
                // ORDERING: Relaxed guess; the CAS decides.
                let mut s = self.state.load(Ordering::Relaxed);
                loop {
                    if readers(s) == 0 || s & QUEUED != 0 {
                        return false;
                    }
                    // ORDERING: Release, as in `release`.
                    match self.state.compare_exchange_weak(
                        s,
                        s - ONE_READER,
                        Ordering::Release,
                        Ordering::Relaxed,
                    ) {
                        Ok(_) => return true,
                        Err(actual) => s = actual,
                    }
                }
            }
        }
    }

    /// Make a hold of `mode` the caller has just taken a scoped hold: `SCOPED` for the
    /// exclusive one (invariant 6), one more in `scoped_readers` for a reader.
    #[inline]
    pub(crate) fn scope_hold(&self, mode: Mode) {
        match mode {
            // The caller holds `WRITER`, which only its own release clears, so the bit
            // lands on its hold.
            // ORDERING: Relaxed: the bit lives in the word that holds `WRITER`, so a claim
            // that reads it reads this hold; it publishes nothing.
            Mode::Exclusive => {
                let was = self.state.fetch_or(SCOPED, Ordering::Relaxed);
                debug_assert!(
                    was & (WRITER | SCOPED | HOLD_ID_MASK) == WRITER,
                    "BUG: scope_hold without a fresh exclusive hold that has no id"
                );
            }
            // ORDERING: Release: a `release_scoped` that sees this count sees (Acquire) the
            // state word's change that took the hold, so its release finds the hold.
            Mode::Shared => {
                self.scoped_readers.fetch_add(1, Ordering::Release);
            }
        }
    }

    /// Release one scoped hold of `mode`; false (nothing changed) if there is none.
    #[inline]
    pub(crate) fn release_scoped(&self, mode: Mode) -> bool {
        match mode {
            Mode::Exclusive => self.release_scoped_writer(),
            Mode::Shared => {
                // ORDERING: Acquire pairs with the Release in `scope_hold` (see there); a
                // failed attempt orders nothing.
                let claimed = self
                    .scoped_readers
                    .fetch_update(Ordering::Acquire, Ordering::Relaxed, |n| n.checked_sub(1))
                    .is_ok();
                if !claimed {
                    return false;
                }
                let released = self.release(mode);
                debug_assert!(released, "BUG: a claimed scoped hold was not held");
                released
            }
        }
    }

    /// Release the scoped exclusive hold (invariant 6), if there is one. Nobody waits: the
    /// claim and the release are one CAS.
    #[inline]
    fn release_scoped_writer(&self) -> bool {
        // ORDERING: Release, as in `release`.
        match self
            .state
            .compare_exchange(WRITER | SCOPED, 0, Ordering::Release, Ordering::Relaxed)
        {
            Ok(_) => true,
            Err(s) => self.release_scoped_writer_slow(s),
        }
    }

    /// [`Slot::release_scoped_writer`] past its one CAS (waiters queued, or the head
    /// away): claim the hold by clearing `SCOPED`, so that no other scoped release claims
    /// it too. With the head waiter away the same CAS frees the slot, as `release` would
    /// (invariant 5); otherwise the release goes through the queue. `s` is a recent read
    /// of the state word.
    #[cold]
    fn release_scoped_writer_slow(&self, mut s: usize) -> bool {
        loop {
            if s & SCOPED == 0 {
                return false;
            }
            let away = s & AWAY != 0;
            let (new, order) = if away {
                (s & !(WRITER | SCOPED | HOLD_ID_MASK), Ordering::Release)
            } else {
                (s & !SCOPED, Ordering::Relaxed)
            };
            // ORDERING: Release when this CAS frees the slot, as `release`'s does, to
            // publish the critical section to the next taker. A plain claim publishes
            // nothing (the release that follows does), and needs no Acquire: the bit lives
            // in the word that holds `WRITER`, so the claim reads the hold it ends.
            match self
                .state
                .compare_exchange_weak(s, new, order, Ordering::Relaxed)
            {
                Ok(_) if away => return true,
                Ok(_) => break,
                Err(actual) => s = actual,
            }
        }
        // Claimed with waiters queued: `release`'s one-CAS path would only fail.
        let released = self.release_slow(Mode::Exclusive);
        debug_assert!(released, "BUG: a claimed scoped hold was not held");
        released
    }

    /// A release that must look at the queue (or finds the slot not held).
    #[cold]
    fn release_slow(&self, mode: Mode) -> bool {
        self.with_queue(|q, wake| self.settle(q, Some(mode), 0, wake))
    }

    /// Run `f` under the queue mutex, then deliver the wake-ups it collected, after the
    /// mutex is dropped (see `queue.rs`).
    fn with_queue<R>(&self, f: impl FnOnce(&mut WaitQueue, &mut WakeList) -> R) -> R {
        let mut wake = WakeList::default();
        let result = f(&mut lock(&self.queue), &mut wake);
        wake.wake_all();
        result
    }

    /// Under the queue mutex: take the slot for `w` if the policy allows, else queue
    /// `w` (keeping its old place if it queued before). True if `w` now holds the slot.
    fn acquire_or_queue(&self, q: &mut WaitQueue, w: &Arc<Waiter>) -> bool {
        q.forget_threads_of_parent();
        // ORDERING: Relaxed load; the CAS below decides.
        let mut s = self.state.load(Ordering::Relaxed);
        loop {
            let take = match w.mode {
                Mode::Exclusive => {
                    !slot_held(s) && (self.policy == Policy::Barging || q.is_empty())
                }
                Mode::Shared => s & (WRITER | WRITER_QUEUED) == 0,
            };
            debug_assert!(
                take || slot_held(s) || self.policy == Policy::Barging,
                "BUG: a fair slot is free while waiters are queued"
            );
            let new = match (take, w.mode) {
                (true, Mode::Exclusive) => s | WRITER,
                (true, Mode::Shared) => s + ONE_READER,
                (false, Mode::Exclusive) => s | QUEUED | WRITER_QUEUED,
                (false, Mode::Shared) => s | QUEUED,
            };
            // The head or its status may have changed (a waiter that lost its competition
            // queues again at its old place; a forked child dropped the parent's
            // threads): the next release goes through the queue, whose settle sets
            // `AWAY` again if it still holds (invariant 5).
            let new = new & !AWAY;
            // ORDERING: Acquire when taking the slot, as in `try_lock`. When queueing, the
            // CAS only has to fail if a release slipped in since the load, so that we
            // re-check instead of sleeping on a free slot; the mutex orders the rest.
            match self
                .state
                .compare_exchange_weak(s, new, Ordering::Acquire, Ordering::Relaxed)
            {
                Ok(_) => {
                    if !take {
                        w.set_status(WAITING);
                        q.push(w.clone());
                    }
                    return take;
                }
                Err(actual) => s = actual,
            }
        }
    }

    /// Take `w` out of the queue without the lock (deadline, cancellation, signal,
    /// dropped task). Returns false if `w` was granted first: then it holds the lock and
    /// the caller must keep or release it. The one race-resolution path for every cause.
    pub(crate) fn abandon(&self, w: &Arc<Waiter>) -> bool {
        self.with_queue(|q, wake| {
            // ORDERING: status only changes under the mutex we hold.
            match w.status.load(Ordering::Relaxed) {
                GRANTED => false,
                ABANDONED => true,
                status => {
                    let removed = q.remove(w);
                    debug_assert!(
                        removed || (status == RETRY && !w.keeps_place),
                        "BUG: a queued waiter was not in the queue"
                    );
                    w.set_status(ABANDONED);
                    // A RETRY waiter was the one chosen to compete for a free slot: passing
                    // on the baton is settle's job, as is clearing the QUEUED bits.
                    self.settle(q, None, 0, wake);
                    true
                }
            }
        })
    }

    /// For a waiter woken with `RETRY`: take the slot if it is free (leaving the queue if
    /// it kept its place), else queue at its old place to park again (`WAITING`). True if
    /// `w` now holds the slot, also when a release handed it over meanwhile.
    pub(crate) fn compete(&self, w: &Arc<Waiter>) -> bool {
        self.with_queue(|q, wake| {
            // ORDERING: status only changes under the mutex we hold.
            match w.status.load(Ordering::Relaxed) {
                GRANTED => true,
                status @ (RETRY | WAITING) => {
                    // A RETRY waiter that does not keep its place left the queue when woken.
                    let was_queued = (w.keeps_place || status == WAITING) && q.remove(w);
                    let took = self.acquire_or_queue(q, w);
                    if took && was_queued {
                        // Out of the queue with the slot: make the QUEUED bits agree.
                        self.settle(q, None, 0, wake);
                    }
                    took
                }
                _ => unreachable!("BUG: an abandoned waiter competes"),
            }
        })
    }

    /// Under the queue mutex: apply `release` (if any), run the grant policy, make the
    /// state word agree with the queue, then mark the grantees. Returns false if
    /// `release` names a hold that does not exist (nothing is changed then): with `id`
    /// not 0, an exclusive release ends only the hold with that id.
    fn settle(
        &self,
        q: &mut WaitQueue,
        release: Option<Mode>,
        id: usize,
        wake: &mut WakeList,
    ) -> bool {
        q.forget_threads_of_parent();
        // ORDERING: Relaxed load; the CAS below decides.
        let mut s = self.state.load(Ordering::Relaxed);
        let grant = loop {
            let freed = match release {
                Some(Mode::Exclusive) if s & WRITER == 0 => return false,
                Some(Mode::Exclusive) if id != 0 && s & HOLD_ID_MASK != id => return false,
                Some(Mode::Shared) if readers(s) == 0 => return false,
                Some(Mode::Exclusive) => s & !(WRITER | SCOPED | HOLD_ID_MASK),
                Some(Mode::Shared) => s - ONE_READER,
                None => s,
            };
            // Phase fairness: after an exclusive hold readers go first, after the last
            // reader the head writer does.
            let grant = self.plan(q, freed, release != Some(Mode::Shared));
            let (held, exclusive_left, shared_left) = match grant {
                Grant::Nobody => (freed, q.len() - q.shared_len(), q.shared_len()),
                Grant::Writer => (freed | WRITER, q.len() - q.shared_len() - 1, q.shared_len()),
                Grant::Retry => {
                    // A waiter that keeps its place competes from the queue.
                    let popped = usize::from(!q.head_exclusive().is_some_and(|w| w.keeps_place));
                    (freed, q.len() - q.shared_len() - popped, q.shared_len())
                }
                Grant::Readers => (
                    freed + q.shared_len() * ONE_READER,
                    q.len() - q.shared_len(),
                    0,
                ),
            };
            let mut new = held & !(QUEUED | WRITER_QUEUED | AWAY);
            if grant == Grant::Nobody && self.head_away(q) {
                new |= AWAY;
            }
            if exclusive_left + shared_left > 0 {
                new |= QUEUED;
            }
            if exclusive_left > 0 {
                new |= WRITER_QUEUED;
            }
            // ORDERING: AcqRel at least. Release publishes a releaser's critical section
            // to the next fast-path acquirer, and (with the Release store of GRANTED) to
            // the grantees; Acquire makes the previous holder's writes ours before we pass
            // the slot on from an abandon. SeqCst (the same instruction on x86-64 and
            // aarch64) when it ends a hold with an id, as `release_with_id`'s CAS.
            match self
                .state
                .compare_exchange_weak(s, new, Ordering::SeqCst, Ordering::Relaxed)
            {
                Ok(_) => break grant,
                Err(actual) => s = actual,
            }
        };
        match grant {
            Grant::Nobody => {}
            Grant::Writer => {
                let w = q
                    .pop_exclusive()
                    .expect("BUG: planned a writer grant on an empty queue");
                w.set_status(GRANTED);
                wake.push(w);
            }
            Grant::Retry => {
                let head = q
                    .head_exclusive()
                    .expect("BUG: planned a retry on an empty queue");
                let w = if head.keeps_place {
                    head.clone()
                } else {
                    q.pop_exclusive().expect("BUG: the head vanished")
                };
                w.set_status(RETRY);
                wake.push(w);
            }
            Grant::Readers => {
                for w in q.drain_shared() {
                    w.set_status(GRANTED);
                    wake.push(w);
                }
            }
        }
        true
    }

    /// The grant policy: given the state after any release, whom to hand the slot to.
    fn plan(&self, q: &WaitQueue, s: usize, readers_first: bool) -> Grant {
        if s & WRITER != 0 || q.is_empty() {
            return Grant::Nobody;
        }
        if readers(s) > 0 {
            // The reader group holds the slot: queued readers may join only once no
            // writer waits any more (a waiting writer timed out or was cancelled).
            return if !q.has_exclusive() && q.shared_len() > 0 {
                Grant::Readers
            } else {
                Grant::Nobody
            };
        }
        if q.shared_len() > 0 && (readers_first || !q.has_exclusive()) {
            return Grant::Readers;
        }
        let head = q
            .head_exclusive()
            .expect("BUG: a non-empty queue with no waiter");
        if self.policy == Policy::Fair || head.is_task() {
            return Grant::Writer;
        }
        if head.status() == RETRY {
            // Woken to compete and not back yet (only a waiter that keeps its place is
            // still queued then): one competitor at a time; it is handed the slot by
            // the first release after the timer marked it as having waited FAIR_AFTER.
            // Until then most releases do not come here at all (`AWAY`); those that do
            // ask the timer's mark rather than read the clock.
            return if fair_due(head) {
                Grant::Writer
            } else {
                Grant::Nobody
            };
        }
        if waited_long_enough(head) {
            Grant::Writer
        } else {
            Grant::Retry
        }
    }

    /// The condition of `AWAY` (invariant 5 in `state.rs`), with the queue mutex held:
    /// the head waiter is away competing, its timer mark is armed, and it has not waited
    /// `FAIR_AFTER` yet. Only a waiter that keeps its place is still queued with `RETRY`.
    fn head_away(&self, q: &WaitQueue) -> bool {
        self.policy == Policy::Barging
            && q.head_exclusive().is_some_and(|head| {
                // ORDERING: Relaxed: `mark` changes only under the queue mutex we hold.
                head.status() == RETRY && head.mark.load(Ordering::Relaxed) == MARK_ARMED
            })
    }

    /// A waiter woken to compete later, whose timer mark is now scheduled: record that,
    /// and let releases skip the queue while it is away (`AWAY`) if it still is.
    fn mark_armed(&self, w: &Waiter) {
        let q = lock(&self.queue);
        // ORDERING: Relaxed: `mark` changes only under the queue mutex we hold.
        w.mark.fetch_or(MARK_ARMED, Ordering::Relaxed);
        if self.head_away(&q) {
            // ORDERING: Relaxed: AWAY changes only under the queue mutex; it publishes
            // nothing (a release that reads it frees the slot with its own Release CAS).
            self.state.fetch_or(AWAY, Ordering::Relaxed);
        }
    }

    /// How many waiters are queued (for statistics and tests; see `WaitQueue::live_len`).
    pub(crate) fn queued(&self) -> usize {
        lock(&self.queue).live_len()
    }

    /// Attach `tag` to one hold (see `holder_tags`).
    pub(crate) fn tag_hold(&self, tag: u64) {
        let mut tags = lock(&self.holder_tags);
        // Room for a few tags at once: one per event loop thread whose tasks hold the lock.
        let tags = tags.get_or_insert_with(|| Box::new(Vec::with_capacity(2)));
        match tags.iter_mut().find(|(t, _)| *t == tag) {
            Some((_, n)) => *n += 1,
            None => tags.push((tag, 1)),
        }
        // ORDERING: see `has_tagged_hold`. Every change of the count is made with the
        // mutex held, which orders the changes: no other change can come between this
        // load and this store, so they need not be one read-modify-write.
        self.tagged
            .store(self.tagged.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
    }

    /// Take a tag attached by `tag_hold` off one hold; nothing if no hold carries it.
    pub(crate) fn untag_hold(&self, tag: u64) {
        let mut guard = lock(&self.holder_tags);
        let Some(tags) = guard.as_mut() else { return };
        if let Some(i) = tags.iter().position(|(t, _)| *t == tag) {
            tags[i].1 -= 1;
            if tags[i].1 == 0 {
                tags.swap_remove(i);
            }
            // ORDERING: as in `tag_hold`; the count is at least this hold's 1.
            self.tagged
                .store(self.tagged.load(Ordering::Relaxed) - 1, Ordering::Relaxed);
        }
    }

    /// Whether some hold carries `tag`. A tag attached by a `tag_hold` that happened
    /// before this call (on the caller's own thread, say) is always seen; one attached
    /// meanwhile by another thread may or may not be, as with any race.
    pub(crate) fn has_tagged_hold(&self, tag: u64) -> bool {
        // ORDERING: Relaxed. If `tag_hold(tag)` happened before this call, this load
        // reads its increment or a later value (coherence), and every later decrement
        // undoes an increment made before it (another hold's, or this hold's own untag):
        // so the count read is not 0 while that hold is still tagged. The mutex then
        // decides.
        if self.tagged.load(Ordering::Relaxed) == 0 {
            return false;
        }
        lock(&self.holder_tags)
            .as_ref()
            .is_some_and(|tags| tags.iter().any(|(t, _)| *t == tag))
    }

    /// Drop every tag (a named lock's slot reused for another name).
    #[cfg_attr(loom, allow(dead_code))]
    pub(crate) fn clear_tags(&self) {
        let mut tags = lock(&self.holder_tags);
        if let Some(tags) = tags.as_mut() {
            tags.clear();
        }
        // ORDERING: as in `tag_hold`.
        self.tagged.store(0, Ordering::Relaxed);
    }

    /// The state word and the number of queued waiters, read together under the queue
    /// mutex (for statistics).
    pub(crate) fn snapshot(&self) -> (usize, usize) {
        let queue = lock(&self.queue);
        // ORDERING: `state` is a Relaxed load: a report, which orders nothing and
        // publishes nothing. Under the queue mutex it is consistent with `queue.len()`
        // as far as the queue is concerned (the QUEUED bits change only under it).
        (self.state(), queue.live_len())
    }

    /// Take the slot for `w` if the policy allows, else queue it. True if `w` now holds
    /// the slot.
    pub(crate) fn enqueue(&self, w: &Arc<Waiter>) -> bool {
        let mut q = lock(&self.queue);
        if q.forget_threads_of_parent() {
            drop(q);
            self.agree_after_fork();
            q = lock(&self.queue);
        }
        self.acquire_or_queue(&mut q, w)
    }

    /// In a forked child: drop the blocked threads of the parent from the queue if that
    /// was not done yet, and make the state word agree (`agree_after_fork`). True if
    /// there were any (the caller may then try again).
    #[cold]
    fn forget_parent(&self) -> bool {
        let dropped = lock(&self.queue).forget_threads_of_parent();
        if dropped {
            self.agree_after_fork();
        }
        dropped
    }

    /// After the blocked threads of the parent were dropped from the queue in a forked
    /// child: make the state word agree with the queue (a writer of the parent left
    /// `WRITER_QUEUED` set, which would hold back every reader of the child), granting
    /// whom the policy says, as a release does.
    #[cold]
    fn agree_after_fork(&self) {
        self.with_queue(|q, wake| {
            self.settle(q, None, 0, wake);
        });
    }
}

/// The state word of a slot with one hold of `mode` and nobody queued.
#[cfg_attr(loom, allow(dead_code))]
#[inline]
fn held_alone(mode: Mode) -> usize {
    match mode {
        Mode::Exclusive => WRITER,
        Mode::Shared => ONE_READER,
    }
}

/// A waiter queued in a slot: the slot's side of the seam's [`RawWaiter`].
pub struct SlotWaiter {
    slot: Arc<Slot>,
    pub(crate) waiter: Arc<Waiter>,
    /// The timer's entry for a waiter that went away to compete (see [`FairMark`]):
    /// owned here, so that it ends with the wait.
    #[cfg_attr(loom, allow(dead_code))]
    mark: OnceLock<std::sync::Arc<FairMark>>,
}

impl SlotWaiter {
    pub(crate) fn new(slot: Arc<Slot>, waiter: Arc<Waiter>) -> Self {
        SlotWaiter {
            slot,
            waiter,
            mark: OnceLock::new(),
        }
    }

    /// The waiter saw `RETRY`: if it keeps its place while it is away, have the timer
    /// mark it once it has waited `FAIR_AFTER` (scheduled once per wait), then let
    /// releases skip the queue until then. Done by the woken thread, off the releasing
    /// thread's path; `AWAY` is set only once a mark is scheduled, so that it always
    /// ends, also in a forked child (the timer's entries carry over to it). Under loom,
    /// which has no time, there is no mark: `AWAY` then lasts until the waiter competes
    /// or leaves, which the models check against the releases that skip the queue.
    #[cold]
    fn going_away(&self) {
        if !self.waiter.keeps_place {
            return;
        }
        #[cfg(not(loom))]
        self.mark.get_or_init(|| {
            let mark = std::sync::Arc::new(FairMark {
                slot: self.slot.clone(),
                waiter: self.waiter.clone(),
            });
            let entry: std::sync::Weak<dyn Expire> = std::sync::Arc::downgrade(&mark) as _;
            // The key is not kept: the entry is weak, and at most FAIR_AFTER away.
            let _ = timer::schedule(self.waiter.since + FAIR_AFTER, entry);
            mark
        });
        self.slot.mark_armed(&self.waiter);
    }
}

/// The timer's mark on a waiter away competing: at `since + FAIR_AFTER`, under the queue
/// mutex, it records that the waiter waited long enough and clears `AWAY`, so that the
/// next release goes through the queue and `plan` hands the slot over.
#[cfg_attr(loom, allow(dead_code))]
struct FairMark {
    slot: Arc<Slot>,
    waiter: Arc<Waiter>,
}

#[cfg(not(loom))]
impl Expire for FairMark {
    fn expire(&self) {
        // The queue mutex is held only for short critical sections with no user code in
        // them, so the timer thread waits for it no longer than a release does.
        let _queue = lock(&self.slot.queue);
        // ORDERING: Relaxed: read only under the queue mutex we hold, which orders it.
        self.waiter.mark.fetch_or(MARK_DUE, Ordering::Relaxed);
        // ORDERING: Relaxed: AWAY changes only under the queue mutex; a fast-path release
        // whose CAS races with this one fails and goes through the queue.
        self.slot.state.fetch_and(!AWAY, Ordering::Relaxed);
    }
}

impl RawWaiter for SlotWaiter {
    #[inline]
    fn status(&self) -> Status {
        match self.waiter.status() {
            GRANTED => Status::Granted,
            RETRY => {
                self.going_away();
                Status::Retry
            }
            _ => Status::Waiting,
        }
    }

    fn abandon(&self) -> bool {
        self.slot.abandon(&self.waiter)
    }

    fn compete(&self) -> bool {
        self.slot.compete(&self.waiter)
    }
}

#[cfg(not(loom))]
fn waited_long_enough(w: &Waiter) -> bool {
    fair_due(w) || w.since.elapsed() >= FAIR_AFTER
}

/// Whether the timer marked `w` (see `FairMark`); with the queue mutex held. Never
/// under loom, which schedules no mark.
fn fair_due(w: &Waiter) -> bool {
    // ORDERING: Relaxed: written only under the queue mutex, which the caller holds.
    w.mark.load(Ordering::Relaxed) & MARK_DUE != 0
}

/// loom cannot model time; the model always takes the barging branch, and the
/// hand-off branch is the one the fair policy takes.
#[cfg(loom)]
fn waited_long_enough(_: &Waiter) -> bool {
    false
}

#[cfg(all(test, not(loom)))]
mod size {
    /// Every lock has one `Slot` behind an `Arc`: its size is most of what a lock costs
    /// in memory (the bench's `memory_100k`). 112 bytes + the `Arc`'s two counts fill a
    /// 144-byte allocator chunk; one field more and every lock takes the next one.
    #[test]
    fn a_slot_stays_small() {
        let size = std::mem::size_of::<super::Slot>();
        assert!(size <= 112, "a Slot grew to {size} bytes");
    }
}
