//! The in-process scope of named locks (`LockManager("memory:")`): a lock per name that
//! exists only while somebody holds or waits for it (and a bounded number of idle ones).
//!
//! A [`MemoryScope`] is a table of entries, split in shards by the name's hash; an entry
//! is a [`Slot`] (the in-process kind: queue, phase-fair shared/exclusive, hand-off) plus
//! what the contract adds to a named lock: the records of its holds (fence, owner,
//! since) and of its waiters, for `query()` and `close()`. A [`MemoryClient`] is one
//! manager, a [`Session`]: every manager of the scope sees the same entries.
//!
//! Fences come from a counter per shard, under the shard's mutex: a name always falls in
//! the same shard, so its fences increase in grant order even after its entry was freed
//! and made again (a per-entry counter would start over).
//!
//! No wake-up runs under a shard mutex (a task's doorbell may need the interpreter,
//! whose holder may be waiting for this mutex): a release that must hand the slot over
//! does so after the mutex is let go, with the entry pinned.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, OnceLock};

use hashbrown::hash_table::{self, HashTable};

use super::cancel::{CancelToken, Reason};
use super::lock::LockView;
use super::named::{now, now_coarse, Failure, Info, Key, Lost, ScopedExit, Session, Who};
use super::raw::{Compete, Enqueued, Notify, RawLock, RawWaiter, Status};
use super::slot::{Policy, Slot, SlotWaiter};
use super::stats::Statistics;
use super::sync::{lock, AtomicU64, Mutex, MutexGuard, Ordering};
use super::waiter::{Mode, Waiter, GRANTED};

/// Shards of a scope's table: enough that threads locking different names rarely meet
/// on one mutex, few enough that `query()` walks them quickly.
const SHARDS: usize = 64;

/// Idle entries a shard keeps for reuse, so that a name used once does not cost
/// allocations and frees (an entry and its slot are about 250 bytes: 64 × 8 of them
/// are 128 KB at most).
const SPARE_ENTRIES: usize = 8;

/// Idle entries a shard keeps in its table (see `Entry`): 64 × 32 names that were used
/// and may be again, about 0.5 MB at most, however many names are used.
const IDLE_ENTRIES: usize = 32;

struct HoldRecord {
    /// The hold's fence, unique in its shard: also how its `Unlock` finds it.
    fence: u64,
    mode: Mode,
    /// Taken by a scope (`with`): released by whoever ends a scope, not by an `Unlock`.
    scoped: bool,
    client: u64,
    who: Who,
    since: f64,
    /// Made when first asked for (most holds never are); cancelled if the hold is lost.
    lost: Option<CancelToken>,
}

/// A scoped hold (`with`) that ended before its exit: its grant in the wider scope was
/// lost (`MemoryClient::end_holds`). Kept until that exit comes, so that the exit finds
/// it instead of giving back the hold of another `with` of the client still running.
struct EndedScoped {
    mode: Mode,
    client: u64,
    who: Who,
}

struct WaitRecord {
    id: u64,
    mode: Mode,
    client: u64,
    who: Who,
    since: f64,
    /// Woken when its client closes, so that the wait sees the failure.
    waiter: Arc<Waiter>,
}

/// The lock of one name while anybody holds or waits for it.
///
/// # Invariants
/// - An entry is in its shard's table while `pins > 0`; an idle one (`pins == 0`:
///   nobody holds or waits for it) may stay, at most `IDLE_ENTRIES` per shard, so that a
///   name used again and again is not made and freed each time.
/// - `pins` counts the holds of `slot` (each hold started by a try or a grant pins the
///   entry until it is released), its queued waiters and its `ended` records. So when
///   `pins` falls to 0, nobody holds or waits for the slot, and the entry may go: nobody
///   can be left on a slot that a later acquire of the same name would not find.
/// - `holds` has one record per hold that the caller took up (`NamedView::record`);
///   a hold in between (just granted, or passed on by a waiter that gave up) has none.
/// - `ended` has one record per `with` whose hold ended without its exit, until that
///   exit, or its client's `close`, takes it out.
struct Entry {
    name: Arc<str>,
    hash: u64,
    slot: Arc<Slot>,
    pins: usize,
    holds: Vec<HoldRecord>,
    waits: Vec<WaitRecord>,
    ended: Vec<EndedScoped>,
}

#[derive(Default)]
struct Table {
    entries: HashTable<Entry>,
    /// The last fence issued by this shard.
    fence: u64,
    /// Where the hold recorded last in this shard was (see `Recent`).
    recent: Recent,
    /// The last wait id issued by this shard.
    wait_id: u64,
    /// Entries that went idle, kept for reuse with their slot and record vectors, so
    /// that a name used once costs no allocation (see `SPARE_ENTRIES`).
    spare: Vec<Entry>,
    /// Entries in `entries` with no pin (see `Entry`).
    idle: usize,
    /// The process generation the records are of (see `fork.rs` and `locked`).
    generation: u64,
}

/// The fence of the hold a shard recorded last, and the bucket its entry was in then.
/// Its release, when no other hold was recorded in the shard in between (an uncontended
/// acquire and release), goes to that bucket without a probe and a comparison of names.
///
/// A hint only: the entry may have moved since (the table grew) or gone. A release uses
/// it only if the entry in that bucket has a record of the hold's fence and the same
/// hash. The shard's own fences are unique in it, so that entry is the hold's; fences
/// from a wider scope are per name, so then the names are compared too (`Recent::bucket`).
#[derive(Clone, Copy, Default)]
struct Recent {
    fence: u64,
    bucket: usize,
}

impl Recent {
    /// The bucket of the entry of `key` with a hold of `fence` that is not scoped, if
    /// this hint is of that hold and still right.
    #[inline]
    fn bucket(
        self,
        entries: &HashTable<Entry>,
        key: &Key,
        fence: u64,
        unique: bool,
    ) -> Option<usize> {
        if self.fence != fence {
            return None;
        }
        let entry = entries.get_bucket(self.bucket)?;
        let ours = entry.hash == key.hash()
            && (unique || *entry.name == *key.name())
            && entry.holds.iter().any(|h| h.fence == fence && !h.scoped);
        ours.then_some(self.bucket)
    }
}

/// Lock a shard's table. In a forked child, the first time: drop the wait records (and
/// their pins) of threads queued before the fork, which do not exist here; the slot's
/// queue drops their waiters the same way (`queue.rs`). Tasks are kept, as there.
fn locked(shard: &Mutex<Table>) -> MutexGuard<'_, Table> {
    let mut table = lock(shard);
    let now = super::fork::generation();
    if table.generation != now {
        table.generation = now;
        table.forget_ghosts(now);
    }
    table
}

/// The entry of `key`'s name. The whole hash first: the table's probe matches 7 bits of
/// it, and a false match would otherwise cost a comparison of the names.
fn same(key: &Key) -> impl Fn(&Entry) -> bool + '_ {
    let (name, hash) = (key.name(), key.hash());
    move |e| e.hash == hash && *e.name == *name
}

impl Table {
    /// See `locked`.
    #[cold]
    fn forget_ghosts(&mut self, now: u64) {
        let mut ghosts = Vec::new();
        for e in self.entries.iter_mut() {
            let before = e.waits.len();
            // A ghost the lock was handed to before the fork keeps its record: it holds
            // the lock, as a thread of the parent that held it does (`fork.rs`).
            e.waits.retain(|w| {
                w.waiter.generation == now || w.waiter.is_task() || w.waiter.status() == GRANTED
            });
            if e.waits.len() < before {
                ghosts.push((
                    Key::with_hash(e.name.clone(), e.hash),
                    before - e.waits.len(),
                ));
            }
        }
        for (key, n) in ghosts {
            for _ in 0..n {
                self.unpin(&key);
            }
        }
    }

    fn find(&mut self, key: &Key) -> Option<&mut Entry> {
        self.entries.find_mut(key.hash(), same(key))
    }

    /// The entry of `key`, made if absent; pinned once more. With its bucket.
    fn pin<'t>(
        entries: &'t mut HashTable<Entry>,
        spare: &mut Vec<Entry>,
        idle: &mut usize,
        key: &Key,
        policy: Policy,
    ) -> (usize, &'t mut Entry) {
        // `find_entry` rather than `entry`: a name in use is found without also looking
        // for the slot an insertion would take.
        let found = match entries.find_entry(key.hash(), same(key)) {
            Ok(found) => {
                if found.get().pins == 0 {
                    *idle -= 1;
                }
                found
            }
            Err(absent) => {
                let entry = match spare.pop() {
                    Some(mut e) => {
                        e.name = key.to_arc();
                        e.hash = key.hash();
                        // Tags left by a hold of its last name: an `async with` exit
                        // releases, then untags under that name (finding nothing once
                        // the entry went to spare), and a hold that close() ended is
                        // untagged, if ever, under that name too.
                        e.slot.clear_tags();
                        e
                    }
                    None => Entry {
                        name: key.to_arc(),
                        hash: key.hash(),
                        slot: Arc::new(Slot::new(policy)),
                        pins: 0,
                        holds: Vec::new(),
                        waits: Vec::new(),
                        ended: Vec::new(),
                    },
                };
                absent
                    .into_table()
                    .insert_unique(key.hash(), entry, |e| e.hash)
            }
        };
        let bucket = found.bucket_index();
        let entry = found.into_mut();
        entry.pins += 1;
        (bucket, entry)
    }

    /// Drop one pin of `key`'s entry (see [`unpin_found`]).
    fn unpin(&mut self, key: &Key) {
        let Table {
            entries,
            spare,
            idle,
            ..
        } = self;
        match entries.find_entry(key.hash(), same(key)) {
            Ok(found) => unpin_found(found, spare, idle),
            Err(_) => debug_assert!(false, "BUG: unpin of a name with no entry"),
        }
    }
}

/// Whether nobody but the caller can reach `entry`'s slot until the caller lets go of the
/// shard's mutex: no hold or waiter but the caller's `own` pins, and no other reference
/// to the slot (a waiter that left may keep one for a moment: see `unpin_found`). Then
/// the slot is taken and released by plain stores (`Slot::take_alone`).
#[inline]
fn alone(entry: &Entry, own: usize) -> bool {
    if entry.pins != own || Arc::strong_count(&entry.slot) != 1 {
        return false;
    }
    // ORDERING: pairs with the Release decrement of the last other `Arc` of the slot, so
    // that its owner's last use of the slot happened before the caller's stores.
    std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
    true
}

/// Drop one pin of an entry already found. When it was the last, the entry stays idle
/// if its shard has room for one more, else it goes (to `spare`, if that has room).
fn unpin_found(
    mut found: hash_table::OccupiedEntry<'_, Entry>,
    spare: &mut Vec<Entry>,
    idle: &mut usize,
) {
    let entry = found.get_mut();
    entry.pins -= 1;
    if entry.pins > 0 {
        return;
    }
    debug_assert!(entry.holds.is_empty() && entry.waits.is_empty() && entry.ended.is_empty());
    // Only a slot nobody else can reach may be kept: a waiter that left may still hold a
    // reference for a moment.
    let reusable = Arc::strong_count(&entry.slot) == 1;
    if reusable && *idle < IDLE_ENTRIES {
        *idle += 1;
        return;
    }
    let (entry, _) = found.remove();
    if reusable && spare.len() < SPARE_ENTRIES {
        spare.push(entry);
    }
}

/// Every named lock of the in-process scope: one per process ([`MemoryScope::get`]);
/// every manager of `"memory:"` is a client of the same locks.
/// A wider scope's source of fences: the next fence of a hold of the key just taken.
type Fences = dyn Fn(&Key) -> u64 + Send + Sync;

pub struct MemoryScope {
    shards: Box<[Mutex<Table>]>,
    clients: AtomicU64,
    /// Where fences come from when not from the shards' counters: a scope that is one
    /// process's part of a wider one (`file.rs`) takes them from the wider scope.
    fences: Option<Box<Fences>>,
    /// The slots' grant policy: FIFO hand-off, as a lock shared by name is expected to
    /// be, except where the scope is one process's part of a wider one (see `private`).
    policy: Policy,
}

impl MemoryScope {
    pub(crate) fn new() -> MemoryScope {
        MemoryScope {
            shards: (0..SHARDS).map(|_| Mutex::new(Table::default())).collect(),
            clients: AtomicU64::new(0),
            fences: None,
            policy: Policy::Fair,
        }
    }

    /// One process's part of a wider scope (`file.rs`): its fences come from `fences`
    /// (called under a shard's mutex, with the hold taken; its values must be unique and
    /// increasing), and a released name may be taken again by a running thread before a
    /// waiter wakes (`Policy::Barging`, as `threading.Lock`): the wider scope's hold is
    /// then passed on without a context switch, and the slot's own ~1 ms "time to be
    /// fair" still bounds how long a waiter can be passed over.
    pub(crate) fn private(fences: impl Fn(&Key) -> u64 + Send + Sync + 'static) -> MemoryScope {
        MemoryScope {
            fences: Some(Box::new(fences)),
            policy: Policy::Barging,
            ..MemoryScope::new()
        }
    }

    /// Whether this is one process's part of a wider scope (`private`): a cohort's.
    fn is_private(&self) -> bool {
        self.fences.is_some()
    }

    /// The in-process scope.
    pub fn get() -> Arc<MemoryScope> {
        static MEMORY: OnceLock<Arc<MemoryScope>> = OnceLock::new();
        MEMORY.get_or_init(|| Arc::new(MemoryScope::new())).clone()
    }

    fn shard(&self, hash: u64) -> &Mutex<Table> {
        // A table takes the bucket from the low bits of the hash and its 7-bit tag from
        // the top ones: the shard comes from bits in between, so that inside a shard
        // neither is left with fewer bits that differ (with the top bits picking the
        // shard, the tags of one shard differed in one bit, and half the probes compared
        // a name that was not the one looked for).
        &self.shards[(hash >> 40) as usize % SHARDS]
    }

    /// Every hold and waiter of every client whose name starts with `prefix`.
    fn query(&self, prefix: &str) -> Vec<Info> {
        let pid = std::process::id();
        let private = self.is_private();
        let mut out = Vec::new();
        for shard in self.shards.iter() {
            let table = locked(shard);
            for e in table.entries.iter() {
                if e.pins == 0 || !e.name.starts_with(prefix) {
                    continue;
                }
                out.extend(e.holds.iter().map(|h| Info {
                    name: e.name.clone(),
                    mode: h.mode,
                    held: true,
                    who: h.who.clone(),
                    pid,
                    host: None,
                    since: h.since,
                }));
                // A wait the lock was handed to, whose waiter has not taken it up yet (a
                // task runs when its event loop comes to it), is a hold already. In a
                // cohort's part of a wider scope it is not: the gate is entered after.
                out.extend(e.waits.iter().map(|w| Info {
                    name: e.name.clone(),
                    mode: w.mode,
                    held: !private && w.waiter.status() == GRANTED,
                    who: w.who.clone(),
                    pid,
                    host: None,
                    since: w.since,
                }));
            }
        }
        out.sort_by(|a, b| a.name.cmp(&b.name).then(a.since.total_cmp(&b.since)));
        out
    }

    /// How many names have an entry (idle ones included; at most `IDLE_ENTRIES` per
    /// shard more than those held or waited for); for tests of the memory rule.
    #[cfg(test)]
    pub fn entries(&self) -> usize {
        self.shards.iter().map(|s| locked(s).entries.len()).sum()
    }

    /// The most idle entries the scope keeps.
    #[cfg(test)]
    pub const IDLE: usize = SHARDS * IDLE_ENTRIES;
}

/// One manager of a scope.
///
/// # Invariants
/// `closed` goes from false to true once, before `close` walks the shards; every
/// record is added under its shard's mutex after reading `closed` there. So a record is
/// either seen by `close` (which ends it) or was never added (its adder saw `closed`).
pub struct MemoryClient {
    scope: Arc<MemoryScope>,
    id: u64,
    closed: AtomicBool,
    /// The call of `close_all` that ends the holds, and whether it has: a later call
    /// waits for it (see `close_all`).
    closing: std::sync::Mutex<Closing>,
    closed_all: std::sync::Condvar,
}

#[derive(Default)]
struct Closing {
    /// The thread of the call that ends the holds, once it started.
    closer: Option<u64>,
    /// Every hold has ended.
    done: bool,
}

/// The calling thread, as `Closing::closer` names it.
fn this_thread() -> u64 {
    // SAFETY: `pthread_self` has no preconditions and always succeeds.
    unsafe { libc::pthread_self() as u64 }
}

impl MemoryClient {
    pub fn new(scope: Arc<MemoryScope>) -> Arc<MemoryClient> {
        // ORDERING: a unique number; nothing else is published with it.
        let id = scope.clients.fetch_add(1, Ordering::Relaxed) + 1;
        Arc::new(MemoryClient {
            scope,
            id,
            closed: AtomicBool::new(false),
            closing: Default::default(),
            closed_all: Default::default(),
        })
    }

    pub fn is_closed(&self) -> bool {
        // ORDERING: SeqCst, the flag of the invariant: set before the shards are walked.
        self.closed.load(Ordering::SeqCst)
    }

    /// End every hold of this client (each `lost` token is cancelled with `reason`, and
    /// the lock goes to the next waiter) and fail its waiters; later acquires fail.
    /// Returns how many holds ended. Idempotent: a later call ends none, and returns
    /// once the first has ended them all (at once if it is made by the first call's own
    /// thread, from a `lost` token's callback).
    fn close_all(&self, reason: Reason) -> usize {
        self.close_then(reason, || ())
    }

    /// [`MemoryClient::close_all`], running `then` once the holds have ended here and
    /// before their `lost` tokens are cancelled. A cohort gives its wider holds back
    /// there (`Cohort::close`): a token's callback (run by `cancel`, in this thread) that
    /// acquires the name, from another manager or process, must find it free, not wait
    /// for a release that only this call, blocked in the callback, would make.
    pub(crate) fn close_then(&self, reason: Reason, then: impl FnOnce()) -> usize {
        let closing = || self.closing.lock().unwrap_or_else(|e| e.into_inner());
        // ORDERING: SeqCst: see the invariants; read under each shard's mutex.
        if self.closed.swap(true, Ordering::SeqCst) {
            let me = this_thread();
            let mut c = closing();
            while !c.done && c.closer != Some(me) {
                c = self.closed_all.wait(c).unwrap_or_else(|e| e.into_inner());
            }
            return 0;
        }
        closing().closer = Some(this_thread());
        let (ended, lost) = self.end_all();
        then();
        for t in lost {
            t.cancel(reason.clone());
        }
        closing().done = true;
        self.closed_all.notify_all();
        ended
    }

    /// The work of the first `close_all`: the holds end; their `lost` tokens (those made)
    /// are returned, for the caller to cancel.
    fn end_all(&self) -> (usize, Vec<CancelToken>) {
        let mut ended = 0;
        let mut lost_tokens = Vec::new();
        for shard in self.scope.shards.iter() {
            let mut releases = Vec::new();
            let mut wake = Vec::new();
            let mut ended_records = Vec::new();
            {
                let mut table = locked(shard);
                for e in table.entries.iter_mut() {
                    let mut i = 0;
                    while i < e.holds.len() {
                        if e.holds[i].client == self.id {
                            let h = e.holds.swap_remove(i);
                            releases.push((
                                Key::with_hash(e.name.clone(), e.hash),
                                e.slot.clone(),
                                h.mode,
                                h.lost,
                            ));
                        } else {
                            i += 1;
                        }
                    }
                    wake.extend(
                        e.waits
                            .iter()
                            .filter(|w| w.client == self.id)
                            .map(|w| w.waiter.clone()),
                    );
                    // Their exits find the client closed and give back nothing.
                    let before = e.ended.len();
                    e.ended.retain(|x| x.client != self.id);
                    ended_records.extend(
                        (e.ended.len()..before).map(|_| Key::with_hash(e.name.clone(), e.hash)),
                    );
                }
                for key in ended_records.drain(..) {
                    table.unpin(&key);
                }
            }
            // Out of the mutex: a hand-off or a token's callbacks may wake tasks.
            for w in wake {
                w.wake();
            }
            for (key, slot, mode, lost) in releases {
                self.view(&key, mode).release_handing_off(slot);
                lost_tokens.extend(lost);
                ended += 1;
            }
        }
        (ended, lost_tokens)
    }

    fn failure(&self) -> Option<Failure> {
        self.is_closed().then(Failure::closed)
    }
}

/// A client of the process-wide scope dropped without `close`: its holds end as `close`
/// ends them. Only scoped holds can be left then (a `with` entered and never exited): an
/// `Unlock`, a waiter or a handle keeps its manager, and so the client, alive. Without
/// this such a name would stay held for the life of the process, by nobody. A private
/// scope's client (a cohort's, `private`) is left alone: nothing else can reach its
/// scope, and its cohort gives back the wider holds as the manager goes.
impl Drop for MemoryClient {
    fn drop(&mut self) {
        if !self.scope.is_private() && !self.is_closed() {
            let reason: Reason = Arc::new(Failure(
                "the LockManager was garbage-collected without close()".to_owned(),
            ));
            self.close_all(reason);
        }
    }
}

/// A name of the memory scope in one mode, as one client acquires it (made per call).
struct View<'a> {
    client: &'a MemoryClient,
    key: &'a Key,
    mode: Mode,
}

impl View<'_> {
    fn table(&self) -> &Mutex<Table> {
        self.client.scope.shard(self.key.hash())
    }

    /// Take up a hold this view just acquired (by a try or a grant): record it and give
    /// it its fence. If the client closed meanwhile, the hold is given back and the
    /// acquire fails.
    pub fn record(&self, scoped: bool, who: Who) -> Result<u64, Failure> {
        let since = now_coarse();
        let mut table = locked(self.table());
        if self.client.is_closed() {
            drop(table);
            self.unlock();
            return Err(Failure::closed());
        }
        let Table {
            entries,
            fence,
            recent,
            ..
        } = &mut *table;
        let Ok(found) = entries.find_entry(self.key.hash(), same(self.key)) else {
            panic!("BUG: a hold of a name with no entry");
        };
        let bucket = found.bucket_index();
        let fence = self.push_hold(fence, found.into_mut(), scoped, who, since);
        if !scoped {
            *recent = Recent { fence, bucket };
        }
        Ok(fence)
    }

    /// Record a hold of this view in `entry` with the shard's next fence (`last`).
    fn push_hold(
        &self,
        last: &mut u64,
        entry: &mut Entry,
        scoped: bool,
        who: Who,
        since: f64,
    ) -> u64 {
        let fence = match &self.client.scope.fences {
            Some(next) => next(self.key),
            None => {
                *last += 1;
                *last
            }
        };
        // Built in place: `push` built the record on the stack and copied it into the
        // vector with wide loads that had to wait for the narrow stores just made (see
        // `freelist::new_object`); `extend` from `once_with` writes each field where it goes.
        entry.holds.extend(std::iter::once_with(|| HoldRecord {
            fence,
            mode: self.mode,
            scoped,
            client: self.client.id,
            who,
            since,
            lost: None,
        }));
        fence
    }

    /// Release a hold of this mode, and its pin, if `pick` says there is one
    /// (`Released`): it takes the hold's record out (or finds none to take, for a hold
    /// without one). `Ended`: it took out an `ended` record, whose pin goes. `NotHeld`:
    /// there is none (released already, or ended by `close`). `fence`: the hold's, when
    /// the caller knows it (the shard's `Recent` hint may then find the entry).
    fn release_record(
        &self,
        fence: Option<u64>,
        pick: impl FnOnce(&mut Entry) -> ScopedExit,
    ) -> ScopedExit {
        let mut table = locked(self.table());
        let Table {
            entries,
            spare,
            idle,
            recent,
            ..
        } = &mut *table;
        let unique = self.client.scope.fences.is_none();
        let bucket = fence
            .and_then(|f| recent.bucket(entries, self.key, f, unique))
            .or_else(|| entries.find_bucket_index(self.key.hash(), same(self.key)));
        let Some(Ok(mut found)) = bucket.map(|b| entries.get_bucket_entry(b)) else {
            return ScopedExit::NotHeld;
        };
        match pick(found.get_mut()) {
            ScopedExit::Released => {}
            ScopedExit::Ended => {
                unpin_found(found, spare, idle);
                return ScopedExit::Ended;
            }
            ScopedExit::NotHeld => return ScopedExit::NotHeld,
        }
        let entry = found.get();
        let released = if alone(entry, 1) {
            entry.slot.release_alone(self.mode);
            true
        } else {
            entry.slot.release_uncontended(self.mode)
        };
        if released {
            unpin_found(found, spare, idle);
            return ScopedExit::Released;
        }
        let slot = found.get().slot.clone();
        drop(table);
        self.release_handing_off(slot);
        ScopedExit::Released
    }

    /// Give back one hold of this mode that waiters may be queued for, and its pin. The
    /// hand-off wakes them out of the shard mutex, with the entry still pinned by this
    /// hold.
    fn release_handing_off(&self, slot: Arc<Slot>) {
        let released = slot.release(self.mode);
        debug_assert!(released, "BUG: a named hold was not held");
        drop(slot);
        locked(self.table()).unpin(self.key);
    }

    /// Try once; on success run `then` on the shard (still locked) and return its value.
    /// Nothing is taken if the client is closed.
    #[inline]
    fn try_lock_with<T>(
        &self,
        then: impl FnOnce(&mut u64, &mut Recent, usize, &mut Entry) -> T,
    ) -> Option<T> {
        let mut table = locked(self.table());
        if self.client.is_closed() {
            return None;
        }
        let Table {
            entries,
            spare,
            fence,
            recent,
            idle,
            ..
        } = &mut *table;
        let (bucket, entry) = Table::pin(entries, spare, idle, self.key, self.client.scope.policy);
        let taken = if alone(entry, 1) {
            entry.slot.take_alone(self.mode);
            true
        } else {
            entry.slot.try_lock(self.mode)
        };
        if taken {
            return Some(then(fence, recent, bucket, entry));
        }
        table.unpin(self.key);
        None
    }

    /// [`RawLock::try_lock`] and [`NamedView::record`] in one step (the uncontended
    /// acquire of an `Unlock`): the fence if it took the lock. `None` if the lock is
    /// taken or the client closed (the driver says which).
    #[inline]
    pub fn try_lock_recorded(&self, who: Who) -> Option<Result<u64, Failure>> {
        let since = now_coarse();
        self.try_lock_with(|last, recent, bucket, entry| {
            let fence = self.push_hold(last, entry, false, who, since);
            *recent = Recent { fence, bucket };
            Ok(fence)
        })
    }

    /// Release the hold with this fence (an `Unlock`'s).
    pub fn release(&self, fence: u64) -> bool {
        let exit = self.release_record(Some(fence), |e| {
            match e.holds.iter().position(|h| h.fence == fence && !h.scoped) {
                Some(i) => {
                    e.holds.swap_remove(i);
                    ScopedExit::Released
                }
                None => ScopedExit::NotHeld,
            }
        });
        exit == ScopedExit::Released
    }

    /// Release one scoped hold of this mode taken through this client: `who`'s if it
    /// has one (its task's, else its thread's), else any; or take out the `ended` record
    /// of `who`'s `with` whose hold was lost. (Never another client's: its `with` would
    /// lose its hold, and a `close` of this client would end it. The task's first: tasks
    /// of one loop share a thread, and may leave in any order.)
    ///
    /// A closer match wins; of equal matches, an ended record goes before a live hold.
    /// Equal matches cannot be told apart (two tasks of one name, nested `with`s of one
    /// thread, an exit made from another thread than its `with`), and giving back a live
    /// hold whose `with` still runs would let a second holder in, where keeping it a
    /// little longer (until its own exit, which then takes the live hold) lets nobody in.
    pub fn release_scoped(&self, who: &Who) -> ScopedExit {
        let (mode, client) = (self.mode, self.client.id);
        // How closely a record matches `who`: 0 its task, 1 its thread, 2 any.
        let level = |w: &Who| match (w.thread == who.thread, w.task == who.task) {
            (true, true) => 0u8,
            (true, false) => 1,
            (false, _) => 2,
        };
        // The closest match, the latest of equals: (level, index).
        fn closest(levels: impl Iterator<Item = Option<u8>>) -> Option<(u8, usize)> {
            let mut best: Option<(u8, usize)> = None;
            for (i, l) in levels.enumerate() {
                if let Some(l) = l {
                    if best.is_none_or(|(b, _)| l <= b) {
                        best = Some((l, i));
                    }
                }
            }
            best
        }
        self.release_record(None, |e| {
            let ours = |m: Mode, c: u64| m == mode && c == client;
            let live = closest(
                e.holds
                    .iter()
                    .map(|h| (h.scoped && ours(h.mode, h.client)).then(|| level(&h.who))),
            );
            let ended = closest(
                e.ended
                    .iter()
                    .map(|x| ours(x.mode, x.client).then(|| level(&x.who))),
            );
            let take_live = match (live, ended) {
                (Some((l, _)), Some((x, _))) => l < x,
                (live, _) => live.is_some(),
            };
            match (take_live, live, ended) {
                (true, Some((_, i)), _) => {
                    e.holds.remove(i);
                    ScopedExit::Released
                }
                (false, _, Some((_, i))) => {
                    e.ended.remove(i);
                    ScopedExit::Ended
                }
                _ => ScopedExit::NotHeld,
            }
        })
    }

    /// The `lost` token of the hold with this fence.
    pub fn lost(&self, fence: u64) -> Lost {
        let mut table = locked(self.table());
        let Some(entry) = table.find(self.key) else {
            return Lost::Ended;
        };
        match entry.holds.iter_mut().find(|h| h.fence == fence) {
            Some(h) => Lost::Live(h.lost.get_or_insert_with(|| CancelToken::new(None)).clone()),
            None => Lost::Ended,
        }
    }

    /// A snapshot of this name in this mode, across every client of the scope.
    pub fn statistics(&self) -> Statistics {
        self.with_slot(LockView::statistics).unwrap_or_default()
    }

    /// Whether a hold of this name carries `tag` (the embedding's `async with` holds) and
    /// some `with` hold of the name is still live. A tag stays on the slot until its
    /// `with` exits; when `close()` ended that hold first, the tag alone blocks nothing.
    fn has_live_tagged_hold(&self, tag: u64) -> bool {
        let slot = locked(self.table())
            .find(self.key)
            .filter(|e| e.holds.iter().any(|h| h.scoped))
            .map(|e| e.slot.clone());
        slot.is_some_and(|slot| LockView::over(slot, self.mode).has_tagged_hold(tag))
    }

    /// Run `f` on the slot of this name, if it has an entry (for the embedding's tags).
    pub fn with_slot<T>(&self, f: impl FnOnce(&LockView) -> T) -> Option<T> {
        let slot = locked(self.table())
            .find(self.key)
            .map(|e| e.slot.clone())?;
        Some(f(&LockView::over(slot, self.mode)))
    }
}

/// What the acquire driver does on a name of this scope: the slot of its entry, pinned.
impl View<'_> {
    #[inline]
    fn try_lock(&self) -> bool {
        self.try_lock_with(|_, _, _, _| ()).is_some()
    }

    /// A hold with no record (one a waiter that gave up passes on).
    fn unlock(&self) -> bool {
        self.release_record(None, |_| ScopedExit::Released) == ScopedExit::Released
    }

    fn enqueue(
        &self,
        client: Arc<MemoryClient>,
        notify: Notify,
        compete: Compete,
    ) -> Enqueued<Box<dyn RawWaiter>> {
        let who = Who::thread();
        let (slot, id) = {
            let mut table = locked(self.table());
            table.wait_id += 1;
            let id = table.wait_id;
            let Table {
                entries,
                spare,
                idle,
                ..
            } = &mut *table;
            let policy = self.client.scope.policy;
            (
                Table::pin(entries, spare, idle, self.key, policy)
                    .1
                    .slot
                    .clone(),
                id,
            )
        };
        let view = LockView::over(slot, self.mode);
        let inner = match view.enqueue(notify, compete) {
            Enqueued::Acquired => return Enqueued::Acquired,
            Enqueued::Queued(w) => w,
        };
        {
            let mut table = locked(self.table());
            let entry = table.find(self.key).expect("BUG: a waiter with no entry");
            entry.waits.push(WaitRecord {
                id,
                mode: self.mode,
                client: self.client.id,
                who,
                since: now(),
                waiter: inner.waiter.clone(),
            });
        }
        // A close that walked the shards before the record was in: wake ourselves, so
        // the wait sees the failure (see `Client`'s invariants).
        if self.client.is_closed() {
            inner.waiter.wake();
        }
        Enqueued::Queued(Box::new(MemoryWaiter {
            client,
            key: self.key.clone(),
            mode: self.mode,
            inner,
            id,
            recorded: AtomicBool::new(true),
        }))
    }
}

/// A queued acquire of a named lock: the slot's waiter and its record.
struct MemoryWaiter {
    client: Arc<MemoryClient>,
    key: Key,
    mode: Mode,
    inner: SlotWaiter,
    id: u64,
    /// True while its wait record is in the entry.
    recorded: AtomicBool,
}

impl MemoryWaiter {
    fn view(&self) -> View<'_> {
        View {
            client: &self.client,
            key: &self.key,
            mode: self.mode,
        }
    }

    /// Take the wait record out (once); with `unpin`, the waiter's pin too (it left
    /// without the lock).
    fn settle(&self, unpin: bool) {
        // ORDERING: decides which call takes the record out; the shard mutex orders the
        // record itself.
        if !self.recorded.swap(false, Ordering::AcqRel) {
            debug_assert!(!unpin, "BUG: a waiter settled twice");
            return;
        }
        let view = self.view();
        let mut table = locked(view.table());
        if let Some(e) = table.find(view.key) {
            if let Some(i) = e.waits.iter().position(|w| w.id == self.id) {
                e.waits.swap_remove(i);
            }
        }
        if unpin {
            table.unpin(view.key);
        }
    }
}

impl RawWaiter for MemoryWaiter {
    fn status(&self) -> Status {
        let s = self.inner.status();
        if s == Status::Granted {
            self.settle(false);
        }
        s
    }

    fn abandon(&self) -> bool {
        let left = self.inner.abandon();
        self.settle(left);
        left
    }

    fn compete(&self) -> bool {
        let took = self.inner.compete();
        if took {
            self.settle(false);
        }
        took
    }
}

/// A manager of the in-process scope.
impl Session for MemoryClient {
    #[inline]
    fn try_lock(&self, key: &Key, mode: Mode) -> bool {
        self.view(key, mode).try_lock()
    }

    #[inline]
    fn try_lock_recorded(&self, key: &Key, mode: Mode, who: Who) -> Option<Result<u64, Failure>> {
        self.view(key, mode).try_lock_recorded(who)
    }

    fn unlock(&self, key: &Key, mode: Mode) -> bool {
        self.view(key, mode).unlock()
    }

    fn enqueue(
        self: Arc<Self>,
        key: &Key,
        mode: Mode,
        notify: Notify,
        compete: Compete,
    ) -> Enqueued<Box<dyn RawWaiter>> {
        View {
            client: &self,
            key,
            mode,
        }
        .enqueue(self.clone(), notify, compete)
    }

    fn record(&self, key: &Key, mode: Mode, scoped: bool, who: Who) -> Result<u64, Failure> {
        self.view(key, mode).record(scoped, who)
    }

    #[inline]
    fn release(&self, key: &Key, mode: Mode, fence: u64) -> bool {
        self.view(key, mode).release(fence)
    }

    fn release_scoped(&self, key: &Key, mode: Mode, who: &Who) -> ScopedExit {
        self.view(key, mode).release_scoped(who)
    }

    fn lost(&self, key: &Key, fence: u64) -> Lost {
        self.view(key, Mode::Exclusive).lost(fence)
    }

    fn statistics(&self, key: &Key, mode: Mode) -> Statistics {
        self.view(key, mode).statistics()
    }

    fn tag_hold(&self, key: &Key, mode: Mode, tag: u64) {
        self.view(key, mode).with_slot(|v| v.tag_hold(tag));
    }

    fn untag_hold(&self, key: &Key, mode: Mode, tag: u64) {
        self.view(key, mode).with_slot(|v| v.untag_hold(tag));
    }

    fn has_tagged_hold(&self, key: &Key, mode: Mode, tag: u64) -> bool {
        self.view(key, mode).has_live_tagged_hold(tag)
    }

    fn query(&self, prefix: &str) -> Vec<Info> {
        self.scope.query(prefix)
    }

    fn close(&self, reason: Reason) -> usize {
        self.close_all(reason)
    }

    #[inline]
    fn failure(&self) -> Option<Failure> {
        MemoryClient::failure(self)
    }

    fn unanswerable(&self) -> Option<Failure> {
        MemoryClient::failure(self)
    }
}

impl MemoryClient {
    /// End this client's recorded holds of `key` with a fence up to `through`: each
    /// `lost` token is cancelled with `reason` and the name goes to the next local
    /// waiter. For a wider scope whose own hold of the name ended without a release (a
    /// lost database session): its fences grow from one server hold to the next, so the
    /// holds of a later one are left alone. A scoped hold leaves an ended record for its
    /// `with`'s exit, except the one whose fence is `being_recorded`: its acquire, still
    /// running, fails, so no exit will come for it (and no other exit may take a record
    /// of it meanwhile). Returns how many ended.
    pub(crate) fn end_holds(
        &self,
        key: &Key,
        reason: &Reason,
        through: u64,
        being_recorded: Option<u64>,
    ) -> usize {
        let mut releases = Vec::new();
        {
            let mut table = locked(self.scope.shard(key.hash()));
            if let Some(e) = table.entries.find_mut(key.hash(), same(key)) {
                let mut i = 0;
                while i < e.holds.len() {
                    if e.holds[i].client == self.id && e.holds[i].fence <= through {
                        let h = e.holds.swap_remove(i);
                        if h.scoped && being_recorded != Some(h.fence) {
                            // Its `with` will exit: see `EndedScoped`. The record pins
                            // the entry as the hold did (whose pin goes below).
                            e.ended.push(EndedScoped {
                                mode: h.mode,
                                client: h.client,
                                who: h.who,
                            });
                            e.pins += 1;
                        }
                        releases.push((e.slot.clone(), h.mode, h.lost));
                    } else {
                        i += 1;
                    }
                }
            }
        }
        let ended = releases.len();
        // Out of the mutex, as in `end_all`.
        for (slot, mode, lost) in releases {
            self.view(key, mode).release_handing_off(slot);
            if let Some(t) = lost {
                t.cancel(reason.clone());
            }
        }
        ended
    }

    /// Whether anybody holds `key` (in either mode, recorded or not) or waits for it.
    pub(crate) fn in_demand(&self, key: &Key) -> bool {
        self.view(key, Mode::Exclusive)
            .with_slot(|v| v.slot().snapshot() != (0, 0))
            .unwrap_or(false)
    }

    #[inline]
    fn view<'a>(&'a self, key: &'a Key, mode: Mode) -> View<'a> {
        View {
            client: self,
            key,
            mode,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::lock::forever;
    use crate::core::named::NamedView;

    fn scope() -> Arc<MemoryScope> {
        // Each test has its own scope, so that tests running at once do not meet.
        Arc::new(MemoryScope::new())
    }

    /// Two clients (managers) of `scope`.
    fn two_clients(scope: &Arc<MemoryScope>) -> (Arc<MemoryClient>, Arc<MemoryClient>) {
        (
            MemoryClient::new(scope.clone()),
            MemoryClient::new(scope.clone()),
        )
    }

    fn view(client: &Arc<MemoryClient>, name: &str, mode: Mode) -> NamedView {
        NamedView::new(client.clone(), Key::new(Arc::from(name)), mode)
    }

    /// A key of the first shard (bits 40 and up of the hash pick it: `low` is below them).
    fn key_in_shard_0(name: &str, low: u64) -> Key {
        Key::with_hash(Arc::from(name), low)
    }

    /// Fill the first shard's idle entries, so that the next entry to go idle goes to
    /// spare.
    fn fill_idle(client: &Arc<MemoryClient>) {
        for i in 0..IDLE_ENTRIES as u64 {
            let name = format!("idle{i}");
            let v = NamedView::new(client.clone(), key_in_shard_0(&name, i), Mode::Exclusive);
            let fence = v.try_lock_recorded(Who::thread()).unwrap().unwrap();
            assert!(v.release(fence));
        }
    }

    #[test]
    fn a_name_nobody_holds_has_no_entry() {
        let scope = scope();
        let client = MemoryClient::new(scope.clone());
        for i in 0..1000 {
            let v = view(&client, &format!("n{i}"), Mode::Exclusive);
            crate::core::acquire::lock(&v, forever()).unwrap();
            let fence = v.record(false, Who::thread()).unwrap();
            assert!(v.release(fence));
            assert!(!v.release(fence), "released twice");
            assert!(scope.entries() <= MemoryScope::IDLE);
        }
        assert!(scope.query("").is_empty());
    }

    thread_local! {
        /// The view `wait_then_panic` waits on, once.
        static CHECKED: std::cell::RefCell<Option<NamedView>> = const { std::cell::RefCell::new(None) };
    }

    /// An interrupt check that waits briefly for a held lock (so the interrupted wait
    /// steps aside), then panics.
    fn wait_then_panic() -> Result<(), ()> {
        if let Some(v) = CHECKED.with(|c| c.borrow_mut().take()) {
            let wait = crate::core::wait::Wait::<()> {
                deadline: Some(std::time::Instant::now() + std::time::Duration::from_millis(5)),
                ..Default::default()
            };
            let timed_out = crate::core::acquire::lock(&v, wait);
            assert!(matches!(
                timed_out,
                Err(crate::core::error::AcquireError::Timeout)
            ));
            panic!("the check panics (expected by the test)");
        }
        Ok(())
    }

    #[test]
    fn a_wait_whose_check_panics_after_it_stepped_aside_gives_up_once() {
        let client = MemoryClient::new(scope());
        let held = view(&client, "n", Mode::Exclusive);
        assert!(held.try_lock());
        let unwound = std::thread::scope(|s| {
            s.spawn(|| {
                CHECKED.with(|c| *c.borrow_mut() = Some(view(&client, "n", Mode::Exclusive)));
                let wait = crate::core::wait::Wait::<()> {
                    interrupt: Some(crate::core::park::Interrupt {
                        every: std::time::Duration::from_millis(1),
                        check: wait_then_panic,
                    }),
                    ..Default::default()
                };
                let _ = crate::core::acquire::lock(&view(&client, "n", Mode::Exclusive), wait);
            })
            .join()
            .is_err()
        });
        assert!(unwound, "the check did not panic");
        assert!(held.unlock());
        let again = view(&client, "n", Mode::Exclusive);
        assert!(again.try_lock(), "the lock was not left free");
        assert!(again.unlock());
    }

    #[test]
    fn a_borrowed_view_waits_and_gives_its_session_back() {
        let scope = scope();
        let session: Arc<dyn Session> = MemoryClient::new(scope.clone());
        let name = String::from("borrowed");
        // SAFETY: `name` and `session` outlive every view made of them here (the threads
        // are joined inside the scope).
        let borrowed =
            || unsafe { NamedView::borrowed(&session, Key::borrowed(&name), Mode::Exclusive) };
        let holder = borrowed();
        assert!(holder.try_lock());
        let fence = holder.record(false, Who::thread()).unwrap();
        std::thread::scope(|s| {
            let waiter = s.spawn(|| {
                let v = borrowed();
                crate::core::acquire::lock(&v, forever()).unwrap();
                let fence = v.record(false, Who::thread()).unwrap();
                assert!(v.release(fence));
            });
            while holder.statistics().waiting == 0 {
                std::thread::yield_now();
            }
            assert!(holder.release(fence));
            waiter.join().unwrap();
        });
        assert!(!holder.is_locked());
        assert_eq!(Arc::strong_count(&session), 1, "a wait kept the session");
        assert!(scope.query("").is_empty());
    }

    #[test]
    fn fences_increase_across_clients_and_entries() {
        let scope = scope();
        let (a, b) = two_clients(&scope);
        let mut last = 0;
        for i in 0..100 {
            let c = if i % 2 == 0 { &a } else { &b };
            let v = view(c, "x", Mode::Exclusive);
            assert!(v.try_lock());
            let fence = v.record(false, Who::thread()).unwrap();
            assert!(fence > last);
            last = fence;
            assert!(v.release(fence));
            assert!(scope.entries() <= 1);
        }
    }

    #[test]
    fn a_release_finds_its_entry_after_the_table_moved_it() {
        // The last hold recorded in shard 0 is `x`'s; then 300 more names of the shard
        // are taken without a record (so `Recent` still names `x`'s hold), and the
        // shard's table grows, moving its entries. `x`'s release must find `x`.
        // A hash whose bucket changes as the table grows (the low bits pick it).
        const X: u64 = 0xff_ffff;
        let scope = scope();
        let (a, b) = two_clients(&scope);
        let x = NamedView::new(a.clone(), key_in_shard_0("x", X), Mode::Exclusive);
        let fence = x.try_lock_recorded(Who::thread()).unwrap().unwrap();
        let others: Vec<NamedView> = (1..=300)
            .map(|i| {
                NamedView::new(
                    a.clone(),
                    key_in_shard_0(&format!("n{i}"), i),
                    Mode::Exclusive,
                )
            })
            .collect();
        for v in &others {
            assert!(v.try_lock());
        }
        assert!(x.release(fence));
        assert!(!x.release(fence), "released twice");
        let x_of_b = NamedView::new(b.clone(), key_in_shard_0("x", X), Mode::Exclusive);
        assert!(x_of_b.try_lock(), "x is still held");
        assert!(x_of_b.unlock());
        for v in &others {
            assert!(v.is_locked(), "{} was released by x's release", v.name());
            assert!(v.unlock());
        }
        assert!(scope.query("").is_empty());
    }

    #[test]
    fn a_release_with_a_wider_scopes_fence_takes_its_own_names_hold() {
        // Fences from a wider scope are per name: two names of one hash in one shard may
        // have holds of the same fence. The last recorded, `y`'s, must not be released
        // for `x`'s.
        let scope = Arc::new(MemoryScope::private(|_| 7));
        let client = MemoryClient::new(scope.clone());
        let x = NamedView::new(client.clone(), key_in_shard_0("x", 5), Mode::Exclusive);
        let y = NamedView::new(client.clone(), key_in_shard_0("y", 5), Mode::Exclusive);
        assert_eq!(x.try_lock_recorded(Who::thread()).unwrap().unwrap(), 7);
        assert_eq!(y.try_lock_recorded(Who::thread()).unwrap().unwrap(), 7);
        assert!(x.release(7));
        assert!(!x.is_locked());
        assert!(y.is_locked(), "y's hold was released for x's");
        assert!(y.release(7));
        assert!(scope.query("").is_empty());
    }

    #[test]
    fn a_scoped_release_takes_only_a_hold_of_its_own_client() {
        let scope = scope();
        let (a, b) = two_clients(&scope);
        let (va, vb) = (view(&a, "x", Mode::Shared), view(&b, "x", Mode::Shared));
        let me = Who::thread();
        for v in [&va, &vb] {
            assert!(v.try_lock());
            v.record(true, me.clone()).unwrap();
        }
        assert_eq!(b.close_all(Arc::new("closed")), 1);
        assert_eq!(
            vb.release_scoped(&me),
            ScopedExit::NotHeld,
            "released a's hold through b"
        );
        assert!(va.is_locked());
        assert_eq!(va.release_scoped(&me), ScopedExit::Released);
        assert!(!va.is_locked());
        assert!(scope.query("").is_empty());
    }

    #[test]
    fn the_exit_of_a_with_whose_hold_ended_gives_back_no_other_hold() {
        let scope = scope();
        let client = MemoryClient::new(scope.clone());
        let key = Key::new(Arc::from("x"));
        let lost = || -> Reason { Arc::new("lost") };
        let who = |thread: u64, task: Option<&str>| Who {
            thread,
            task: task.map(Arc::from),
        };
        // A `with` hold of `by`, taken and recorded, then ended as its wider grant is
        // lost: its fence.
        let hold_and_lose = |v: &NamedView, by: Who| {
            assert!(v.try_lock());
            let fence = v.record(true, by).unwrap();
            assert_eq!(client.end_holds(&key, &lost(), fence, None), 1);
            fence
        };
        for mode in [Mode::Exclusive, Mode::Shared] {
            let v = view(&client, "x", mode);
            // Thread 1's `with` hold ends (its wider grant was lost).
            hold_and_lose(&v, who(1, None));
            assert!(!v.is_locked());
            // Another `with` of the client: thread 2's, then a task on thread 1.
            assert!(v.try_lock());
            v.record(true, who(2, None)).unwrap();
            // Thread 1 exits: its ended record, not thread 2's hold. Then an exit made
            // from a third thread finds nothing ended and gives back the live hold.
            assert_eq!(v.release_scoped(&who(1, None)), ScopedExit::Ended);
            assert!(
                v.is_locked(),
                "{mode:?}: thread 1's exit released thread 2's hold"
            );
            assert_eq!(v.release_scoped(&who(3, None)), ScopedExit::Released);
            assert_eq!(v.release_scoped(&who(2, None)), ScopedExit::NotHeld);
            // A task's ended hold on a thread that also runs a live `with` of another
            // task: the task's exit takes its own record, the other task keeps its hold.
            hold_and_lose(&v, who(1, Some("t1")));
            assert!(v.try_lock());
            v.record(true, who(1, Some("t2"))).unwrap();
            assert_eq!(v.release_scoped(&who(1, Some("t1"))), ScopedExit::Ended);
            assert!(v.is_locked());
            // An exit from elsewhere prefers an ended record to a live hold.
            assert!(v.try_lock() || mode == Mode::Exclusive);
            if mode == Mode::Shared {
                let fence = v.record(true, who(4, None)).unwrap();
                // t2's hold too is of that grant; both end.
                assert_eq!(client.end_holds(&key, &lost(), fence, None), 2);
                assert!(v.try_lock());
                v.record(true, who(5, None)).unwrap();
                assert_eq!(v.release_scoped(&who(9, None)), ScopedExit::Ended);
                assert_eq!(v.release_scoped(&who(9, None)), ScopedExit::Ended);
                assert!(
                    v.is_locked(),
                    "an exit from elsewhere released thread 5's hold"
                );
                assert_eq!(v.release_scoped(&who(5, None)), ScopedExit::Released);
            } else {
                assert_eq!(v.release_scoped(&who(1, Some("t2"))), ScopedExit::Released);
            }
            assert!(!v.is_locked());
            assert_eq!(v.release_scoped(&who(1, None)), ScopedExit::NotHeld);
            assert!(scope.query("").is_empty());
        }
        // Two tasks of one name on one thread (anyio names every task by its function):
        // the first's hold ended, the second holds. Whichever exits first takes the ended
        // record; the live hold goes with the other exit.
        for mode in [Mode::Exclusive, Mode::Shared] {
            let v = view(&client, "x", mode);
            hold_and_lose(&v, who(1, Some("worker")));
            assert!(v.try_lock());
            v.record(true, who(1, Some("worker"))).unwrap();
            assert_eq!(v.release_scoped(&who(1, Some("worker"))), ScopedExit::Ended);
            assert!(v.is_locked(), "{mode:?}: a tie released the live hold");
            assert_eq!(
                v.release_scoped(&who(1, Some("worker"))),
                ScopedExit::Released
            );
            assert!(!v.is_locked());
        }
        // A hold ended as it was recorded (its acquire fails, so no exit comes) leaves no
        // ended record: a later exit from another thread finds the live hold.
        let v = view(&client, "x", Mode::Shared);
        assert!(v.try_lock());
        let fence = v.record(true, who(1, None)).unwrap();
        assert_eq!(client.end_holds(&key, &lost(), fence, Some(fence)), 1);
        assert!(v.try_lock());
        v.record(true, who(2, None)).unwrap();
        assert_eq!(v.release_scoped(&who(3, None)), ScopedExit::Released);
        assert!(!v.is_locked());
        assert!(scope.query("").is_empty());
        // An ended record pins its entry until its exit, or its client's close.
        let v = view(&client, "x", Mode::Exclusive);
        hold_and_lose(&v, who(1, None));
        let pins = || locked(scope.shard(key.hash())).find(&key).map(|e| e.pins);
        assert_eq!(pins(), Some(1));
        client.close_all(Arc::new("closed"));
        assert_eq!(pins().unwrap_or(0), 0);
        assert_eq!(v.release_scoped(&who(1, None)), ScopedExit::NotHeld);
    }

    #[test]
    fn a_reused_entry_keeps_no_tag_of_the_name_it_had() {
        let scope = scope();
        let (a, b) = two_clients(&scope);
        let key = key_in_shard_0;
        fill_idle(&a);
        // An `async with` hold of "x", tagged, ended by close before its exit untags it.
        let x = NamedView::new(a.clone(), key("x", 1000), Mode::Exclusive);
        assert!(x.try_lock());
        x.record(true, Who::thread()).unwrap();
        x.tag_hold(7);
        assert_eq!(a.close_all(Arc::new("closed")), 1);
        // "y" gets the entry "x" had: a hold of "y" carries no tag of "x".
        let y = NamedView::new(b.clone(), key("y", 2000), Mode::Exclusive);
        assert!(y.try_lock());
        y.record(true, Who::thread()).unwrap();
        assert!(!y.has_tagged_hold(7), "y inherited x's tag");
        assert_eq!(y.release_scoped(&Who::thread()), ScopedExit::Released);
    }

    #[test]
    fn a_tag_whose_hold_close_ended_blocks_nothing() {
        let scope = scope();
        let (a, b) = two_clients(&scope);
        // An `async with` hold of "x" through a, tagged: b's view of the name sees it.
        let k = key_in_shard_0("x", 1000);
        let (xa, xb) = (
            NamedView::new(a.clone(), k.clone(), Mode::Exclusive),
            NamedView::new(b.clone(), k, Mode::Exclusive),
        );
        assert!(xa.try_lock());
        xa.record(true, Who::thread()).unwrap();
        xa.tag_hold(7);
        assert!(xb.has_tagged_hold(7));
        // a closes before the `with` exits: the tag stays until the exit, and blocks
        // nothing (b takes the name, and a wait behind b's hold would not be a deadlock).
        assert_eq!(a.close_all(Arc::new("closed")), 1);
        assert!(xb.try_lock());
        assert!(!xb.has_tagged_hold(7), "a closed client's tag still counts");
        // The exit releases nothing of b's, and untags.
        assert_ne!(xa.release_scoped(&Who::thread()), ScopedExit::Released);
        xa.untag_hold(7);
        assert!(xb.unlock());
    }

    #[test]
    fn a_closed_client_answers_nothing_while_another_holds() {
        let scope = scope();
        let (a, b) = two_clients(&scope);
        let k = key_in_shard_0("x", 1000);
        let xb = NamedView::new(b.clone(), k.clone(), Mode::Exclusive);
        assert!(xb.try_lock());
        xb.record(false, Who::thread()).unwrap();
        let xa = NamedView::new(a.clone(), k, Mode::Exclusive);
        assert!(xa.unanswerable().is_none());
        assert!(xa.is_locked());
        a.close_all(Arc::new("closed"));
        // Not "unlocked": a closed client says it cannot answer.
        assert_eq!(xa.unanswerable(), Some(Failure::closed()));
        assert!(xb.unanswerable().is_none());
        assert!(xb.is_locked());
    }

    #[test]
    fn an_async_with_exit_leaves_no_tag_on_a_spare_entry() {
        let scope = scope();
        let client = MemoryClient::new(scope.clone());
        let key = key_in_shard_0;
        fill_idle(&client);
        // `async with` on "x" and its `__aexit__`: release, then untag (the entry has
        // gone to spare by then, so the untag finds nothing).
        let x = NamedView::new(client.clone(), key("x", 1000), Mode::Exclusive);
        assert!(x.try_lock());
        x.record(true, Who::thread()).unwrap();
        x.tag_hold(7);
        assert_eq!(x.release_scoped(&Who::thread()), ScopedExit::Released);
        x.untag_hold(7);
        let y = NamedView::new(client.clone(), key("y", 2000), Mode::Exclusive);
        assert!(y.try_lock());
        y.record(true, Who::thread()).unwrap();
        assert!(!y.has_tagged_hold(7), "y inherited x's tag");
        assert_eq!(y.release_scoped(&Who::thread()), ScopedExit::Released);
    }

    /// An `Unlock`'s hold of a named lock, as the binding's.
    struct NamedHold(NamedView, u64);

    impl crate::core::unlock::Hold for NamedHold {
        fn release(&self) -> bool {
            self.0.release(self.1)
        }
    }

    #[test]
    fn an_unlock_called_after_its_manager_closed_does_nothing() {
        let scope = scope();
        let client = MemoryClient::new(scope.clone());
        let v = view(&client, "x", Mode::Exclusive);
        let fence = v.try_lock_recorded(Who::thread()).unwrap().unwrap();
        let unlock = crate::core::unlock::Unlock::new(NamedHold(v.clone(), fence));
        assert_eq!(client.close_all(Arc::new("closed")), 1);
        // The hold ended with its manager: the Unlock's one release finds nothing.
        assert!(unlock.unlock());
        assert!(!unlock.unlock());
        assert!(scope.query("").is_empty());
    }

    #[test]
    fn two_clients_exclude_each_other_and_close_ends_holds() {
        let scope = scope();
        let (a, b) = two_clients(&scope);
        let va = view(&a, "x", Mode::Exclusive);
        let vb = view(&b, "x", Mode::Shared);
        assert!(va.try_lock());
        let fence = va.record(false, Who::thread()).unwrap();
        let Lost::Live(lost) = va.lost(fence) else {
            panic!("not live")
        };
        assert!(!vb.try_lock());
        assert_eq!(scope.query("").len(), 1);
        assert_eq!(a.close_all(Arc::new("closed")), 1);
        assert!(lost.is_cancelled());
        assert!(matches!(va.lost(fence), Lost::Ended));
        assert!(!va.release(fence));
        assert!(!va.try_lock());
        assert_eq!(
            RawLock::failure(&va).as_deref(),
            Some("the LockManager was closed")
        );
        assert!(vb.try_lock());
        let f = vb.record(false, Who::thread()).unwrap();
        assert!(f > fence);
        assert!(vb.release(f));
        assert!(scope.query("").is_empty());
    }
}
