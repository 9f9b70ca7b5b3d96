//! Named locks of the in-process scope (`LockManager("memory:")`): a lock per name that
//! exists only while somebody holds or waits for it.
//!
//! A [`Scope`] is a table of entries, split in shards by the name's hash; an entry is a
//! [`Slot`] (the in-process kind: queue, phase-fair shared/exclusive, hand-off) plus
//! what the contract adds to a named lock: the records of its holds (fence, owner,
//! since) and of its waiters, for `query()` and `close()`. A [`Client`] is one manager:
//! every manager of the scope sees the same entries. [`NamedView`] is a name in a mode,
//! and implements [`RawLock`], so the acquire driver, the thread wait and the task wait
//! are the ones every kind uses.
//!
//! Fences come from a counter per shard, under the shard's mutex: a name always falls in
//! the same shard, so its fences increase in grant order even after its entry was freed
//! and made again (a per-entry counter would start over).
//!
//! No wake-up runs under a shard mutex (a task's doorbell may need the interpreter,
//! whose holder may be waiting for this mutex): a release that must hand the slot over
//! does so after the mutex is let go, with the entry pinned.

use std::hash::BuildHasher;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};

use hashbrown::HashTable;

use super::cancel::{CancelToken, Reason};
use super::lock::LockView;
use super::raw::{Compete, Enqueued, Notify, RawLock, RawWaiter, Status};
use super::slot::{Policy, Slot, SlotWaiter};
use super::stats::Statistics;
use super::sync::{lock, AtomicU64, Mutex, MutexGuard, Ordering};
use super::waiter::{Mode, Waiter};

/// Shards of a scope's table: enough that threads locking different names rarely meet
/// on one mutex, few enough that `query()` walks them quickly.
const SHARDS: usize = 64;

/// Idle slots a shard keeps for reuse, so that a name used once does not cost an
/// allocation and a free (a slot is 112 bytes; 64 × 8 of them are 57 KB).
const SPARE_SLOTS: usize = 8;

/// The longest name, in UTF-8 bytes (the contract's limit, the same at every scope).
pub const MAX_NAME_BYTES: usize = 1024;

/// Who holds or waits: the thread (`pthread_self`, which is Python's
/// `threading.get_ident()`) and, for an asynchronous task, its name.
#[derive(Clone, Debug, Default)]
pub struct Who {
    pub thread: u64,
    pub task: Option<Arc<str>>,
}

impl Who {
    /// The calling thread.
    pub fn thread() -> Who {
        Who {
            // SAFETY: `pthread_self` has no preconditions and always succeeds.
            thread: unsafe { libc::pthread_self() } as u64,
            task: None,
        }
    }
}

/// One hold or wait, as `query()` reports it.
#[derive(Clone, Debug)]
pub struct Info {
    pub name: Arc<str>,
    pub mode: Mode,
    /// Held (true) or waiting.
    pub held: bool,
    pub who: Who,
    /// Seconds since the Unix epoch at the grant or at the start of the wait.
    pub since: f64,
}

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
/// - An entry is in its shard's table exactly while `pins > 0`.
/// - `pins` counts the holds of `slot` (each hold started by a try or a grant pins the
///   entry until it is released) and its queued waiters. So when `pins` falls to 0,
///   nobody holds or waits for the slot, and the entry may go: nobody can be left on a
///   slot that a later acquire of the same name would not find.
/// - `holds` has one record per hold that the caller took up (`NamedView::record`);
///   a hold in between (just granted, or passed on by a waiter that gave up) has none.
struct Entry {
    name: Arc<str>,
    hash: u64,
    slot: Arc<Slot>,
    pins: usize,
    holds: Vec<HoldRecord>,
    waits: Vec<WaitRecord>,
}

#[derive(Default)]
struct Table {
    entries: HashTable<Entry>,
    /// The last fence issued by this shard.
    fence: u64,
    /// The last wait id issued by this shard.
    wait_id: u64,
    spare: Vec<Arc<Slot>>,
}

impl Table {
    fn find(&mut self, key: &Key) -> Option<&mut Entry> {
        self.entries.find_mut(key.hash, |e| {
            Arc::ptr_eq(&e.name, &key.name) || *e.name == *key.name
        })
    }

    /// The entry of `key`, made if absent; pinned once more.
    fn pin(&mut self, key: &Key) -> &mut Entry {
        let spare = &mut self.spare;
        let entry = self
            .entries
            .entry(
                key.hash,
                |e| Arc::ptr_eq(&e.name, &key.name) || *e.name == *key.name,
                |e| e.hash,
            )
            .or_insert_with(|| Entry {
                name: key.name.clone(),
                hash: key.hash,
                slot: spare
                    .pop()
                    .unwrap_or_else(|| Arc::new(Slot::new(Policy::Fair))),
                pins: 0,
                holds: Vec::new(),
                waits: Vec::new(),
            })
            .into_mut();
        entry.pins += 1;
        entry
    }

    /// Drop one pin of `key`'s entry; remove the entry when it was the last.
    fn unpin(&mut self, key: &Key) {
        let Ok(mut found) = self.entries.find_entry(key.hash, |e| {
            Arc::ptr_eq(&e.name, &key.name) || *e.name == *key.name
        }) else {
            debug_assert!(false, "BUG: unpin of a name with no entry");
            return;
        };
        let entry = found.get_mut();
        entry.pins -= 1;
        if entry.pins == 0 {
            let (entry, _) = found.remove();
            debug_assert!(entry.holds.is_empty() && entry.waits.is_empty());
            // Reuse the slot only if nobody else can reach it: a waiter that left may
            // still hold a reference for a moment.
            if self.spare.len() < SPARE_SLOTS && Arc::strong_count(&entry.slot) == 1 {
                self.spare.push(entry.slot);
            }
        }
    }
}

/// A name and its hash, computed once per handle.
#[derive(Clone)]
struct Key {
    name: Arc<str>,
    hash: u64,
}

/// Every named lock of one scope. The in-process scope is one per process
/// ([`Scope::memory`]): every manager of `"memory:"` is a client of the same locks.
pub struct Scope {
    shards: Box<[Mutex<Table>]>,
    hasher: hashbrown::DefaultHashBuilder,
    clients: AtomicU64,
}

impl Scope {
    fn new() -> Scope {
        Scope {
            shards: (0..SHARDS).map(|_| Mutex::new(Table::default())).collect(),
            hasher: hashbrown::DefaultHashBuilder::default(),
            clients: AtomicU64::new(0),
        }
    }

    /// The in-process scope.
    pub fn memory() -> &'static Scope {
        static MEMORY: OnceLock<Scope> = OnceLock::new();
        MEMORY.get_or_init(Scope::new)
    }

    fn shard(&self, hash: u64) -> &Mutex<Table> {
        // The low bits pick the bucket inside a table; the high ones pick the shard.
        &self.shards[(hash >> 58) as usize % SHARDS]
    }

    /// Every hold and waiter of every client whose name starts with `prefix`.
    pub fn query(&self, prefix: &str) -> Vec<Info> {
        let mut out = Vec::new();
        for shard in self.shards.iter() {
            let table = lock(shard);
            for e in table.entries.iter() {
                if !e.name.starts_with(prefix) {
                    continue;
                }
                out.extend(e.holds.iter().map(|h| Info {
                    name: e.name.clone(),
                    mode: h.mode,
                    held: true,
                    who: h.who.clone(),
                    since: h.since,
                }));
                out.extend(e.waits.iter().map(|w| Info {
                    name: e.name.clone(),
                    mode: w.mode,
                    held: false,
                    who: w.who.clone(),
                    since: w.since,
                }));
            }
        }
        out.sort_by(|a, b| a.name.cmp(&b.name).then(a.since.total_cmp(&b.since)));
        out
    }

    /// How many names have an entry (held or waited for); for tests of the memory rule.
    pub fn entries(&self) -> usize {
        self.shards.iter().map(|s| lock(s).entries.len()).sum()
    }
}

/// One manager of a scope.
///
/// # Invariants
/// `closed` goes from false to true once, before `close` walks the shards; every
/// record is added under its shard's mutex after reading `closed` there. So a record is
/// either seen by `close` (which ends it) or was never added (its adder saw `closed`).
pub struct Client {
    scope: &'static Scope,
    id: u64,
    closed: AtomicBool,
}

impl Client {
    pub fn new(scope: &'static Scope) -> Arc<Client> {
        // ORDERING: a unique number; nothing else is published with it.
        let id = scope.clients.fetch_add(1, Ordering::Relaxed) + 1;
        Arc::new(Client {
            scope,
            id,
            closed: AtomicBool::new(false),
        })
    }

    pub fn scope(&self) -> &'static Scope {
        self.scope
    }

    pub fn is_closed(&self) -> bool {
        // ORDERING: SeqCst, the flag of the invariant: set before the shards are walked.
        self.closed.load(Ordering::SeqCst)
    }

    /// A name of this scope in `mode`. The caller checked the name (`check_name`).
    pub fn view(self: &Arc<Self>, name: Arc<str>, mode: Mode) -> NamedView {
        let hash = self.scope.hasher.hash_one(&*name);
        NamedView {
            client: self.clone(),
            key: Key { name, hash },
            mode,
        }
    }

    /// End every hold of this client (each `lost` token is cancelled with `reason`, and
    /// the lock goes to the next waiter) and fail its waiters; later acquires fail.
    /// Returns how many holds ended. Idempotent.
    pub fn close(&self, reason: Reason) -> usize {
        // ORDERING: SeqCst: see the invariants; read under each shard's mutex.
        if self.closed.swap(true, Ordering::SeqCst) {
            return 0;
        }
        let mut ended = 0;
        for shard in self.scope.shards.iter() {
            let mut releases = Vec::new();
            let mut wake = Vec::new();
            {
                let mut table = lock(shard);
                for e in table.entries.iter_mut() {
                    let mut i = 0;
                    while i < e.holds.len() {
                        if e.holds[i].client == self.id {
                            let h = e.holds.swap_remove(i);
                            releases.push((
                                Key {
                                    name: e.name.clone(),
                                    hash: e.hash,
                                },
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
                }
            }
            // Out of the mutex: a hand-off or a token's callbacks may wake tasks.
            for w in wake {
                w.wake();
            }
            for (key, slot, mode, lost) in releases {
                let released = slot.release(mode);
                debug_assert!(released, "BUG: a recorded hold was not held");
                drop(slot);
                lock(shard).unpin(&key);
                if let Some(t) = lost {
                    t.cancel(reason.clone());
                }
                ended += 1;
            }
        }
        ended
    }

    fn failure(&self) -> Option<Failure> {
        self.is_closed().then_some(Failure::Closed)
    }
}

/// Why a named lock cannot be used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    /// Its manager was closed.
    Closed,
}

impl Failure {
    pub fn message(self) -> &'static str {
        match self {
            Failure::Closed => "the LockManager was closed",
        }
    }
}

/// What became of the hold a `lost` token is asked for.
pub enum Lost {
    /// Still held: the token cancelled if it is lost.
    Live(CancelToken),
    /// Ended (released, or lost when its manager closed).
    Ended,
}

/// A named lock in one mode, as one client acquires it.
#[derive(Clone)]
pub struct NamedView {
    client: Arc<Client>,
    key: Key,
    mode: Mode,
}

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

impl NamedView {
    pub fn name(&self) -> &Arc<str> {
        &self.key.name
    }

    pub fn mode(&self) -> Mode {
        self.mode
    }

    fn table(&self) -> &Mutex<Table> {
        self.client.scope.shard(self.key.hash)
    }

    /// Take up a hold this view just acquired (by a try or a grant): record it and give
    /// it its fence. If the client closed meanwhile, the hold is given back and the
    /// acquire fails.
    pub fn record(&self, scoped: bool, who: Who) -> Result<u64, Failure> {
        let since = now();
        let mut table = lock(self.table());
        if self.client.is_closed() {
            drop(table);
            self.unlock();
            return Err(Failure::Closed);
        }
        table.fence += 1;
        let fence = table.fence;
        let entry = table
            .find(&self.key)
            .expect("BUG: a hold of a name with no entry");
        entry.holds.push(HoldRecord {
            fence,
            mode: self.mode,
            scoped,
            client: self.client.id,
            who,
            since,
            lost: None,
        });
        Ok(fence)
    }

    /// Release the hold whose record `pick` finds (and removes). False if there is none
    /// (released already, or ended by `close`).
    fn release_record(
        &self,
        pick: impl FnOnce(&mut Vec<HoldRecord>) -> Option<HoldRecord>,
    ) -> bool {
        let mut table = lock(self.table());
        let Some(entry) = table.find(&self.key) else {
            return false;
        };
        if pick(&mut entry.holds).is_none() {
            return false;
        }
        self.release_pinned(table);
        true
    }

    /// Give back one hold of this mode and its pin, with the shard locked.
    fn release_pinned<'a>(&'a self, mut table: MutexGuard<'a, Table>) {
        let entry = table.find(&self.key).expect("BUG: a hold with no entry");
        if !entry.slot.release_uncontended(self.mode) {
            // Someone waits: the hand-off wakes them, out of the shard mutex, with the
            // entry still pinned by this hold.
            let slot = entry.slot.clone();
            drop(table);
            let released = slot.release(self.mode);
            debug_assert!(released, "BUG: a named hold was not held");
            drop(slot);
            table = lock(self.table());
        }
        table.unpin(&self.key);
    }

    /// Release the hold with this fence (an `Unlock`'s).
    pub fn release(&self, fence: u64) -> bool {
        self.release_record(|holds| {
            let i = holds.iter().position(|h| h.fence == fence && !h.scoped)?;
            Some(holds.swap_remove(i))
        })
    }

    /// Release one scoped hold of this mode, the calling thread's if it has one. False
    /// if there is none.
    pub fn release_scoped(&self, thread: u64) -> bool {
        let mode = self.mode;
        self.release_record(|holds| {
            let mine = |h: &HoldRecord| h.scoped && h.mode == mode;
            let i = holds
                .iter()
                .rposition(|h| mine(h) && h.who.thread == thread)
                .or_else(|| holds.iter().rposition(mine))?;
            Some(holds.remove(i))
        })
    }

    /// The `lost` token of the hold with this fence.
    pub fn lost(&self, fence: u64) -> Lost {
        let mut table = lock(self.table());
        let Some(entry) = table.find(&self.key) else {
            return Lost::Ended;
        };
        match entry.holds.iter_mut().find(|h| h.fence == fence) {
            Some(h) => Lost::Live(h.lost.get_or_insert_with(|| CancelToken::new(None)).clone()),
            None => Lost::Ended,
        }
    }

    /// A snapshot of this name in this mode, across every client of the scope.
    pub fn statistics(&self) -> Statistics {
        let slot = {
            let mut table = lock(self.table());
            match table.find(&self.key) {
                Some(e) => e.slot.clone(),
                None => return Statistics::default(),
            }
        };
        LockView::over(slot, self.mode).statistics()
    }

    pub fn is_locked(&self) -> bool {
        self.statistics().locked
    }

    /// Run `f` on the slot of this name, if it has an entry (for the embedding's tags).
    pub fn with_slot<T>(&self, f: impl FnOnce(&LockView) -> T) -> Option<T> {
        let slot = lock(self.table()).find(&self.key).map(|e| e.slot.clone())?;
        Some(f(&LockView::over(slot, self.mode)))
    }
}

/// The named kind, seen by the acquire driver: the slot of the name's entry, pinned.
impl RawLock for NamedView {
    type Waiter = NamedWaiter;

    #[inline]
    fn try_lock(&self) -> bool {
        if self.client.is_closed() {
            return false;
        }
        let mut table = lock(self.table());
        let entry = table.pin(&self.key);
        if entry.slot.try_lock(self.mode) {
            return true;
        }
        table.unpin(&self.key);
        false
    }

    /// A hold with no record (one a waiter that gave up passes on).
    fn unlock(&self) -> bool {
        let table = lock(self.table());
        self.release_pinned(table);
        true
    }

    fn enqueue(&self, notify: Notify, compete: Compete) -> Enqueued<NamedWaiter> {
        let who = Who::thread();
        let (slot, id) = {
            let mut table = lock(self.table());
            table.wait_id += 1;
            let id = table.wait_id;
            (table.pin(&self.key).slot.clone(), id)
        };
        let view = LockView::over(slot, self.mode);
        let inner = match view.enqueue(notify, compete) {
            Enqueued::Acquired => return Enqueued::Acquired,
            Enqueued::Queued(w) => w,
        };
        {
            let mut table = lock(self.table());
            let entry = table.find(&self.key).expect("BUG: a waiter with no entry");
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
        Enqueued::Queued(NamedWaiter {
            view: self.clone(),
            inner,
            id,
            recorded: AtomicBool::new(true),
        })
    }

    #[inline]
    fn failure(&self) -> Option<String> {
        self.client.failure().map(|f| f.message().to_owned())
    }
}

/// A queued acquire of a named lock: the slot's waiter and its record.
pub struct NamedWaiter {
    view: NamedView,
    inner: SlotWaiter,
    id: u64,
    /// True while its wait record is in the entry.
    recorded: AtomicBool,
}

impl NamedWaiter {
    /// Take the wait record out (once); with `unpin`, the waiter's pin too (it left
    /// without the lock).
    fn settle(&self, unpin: bool) {
        // ORDERING: decides which call takes the record out; the shard mutex orders the
        // record itself.
        if !self.recorded.swap(false, Ordering::AcqRel) {
            debug_assert!(!unpin, "BUG: a waiter settled twice");
            return;
        }
        let mut table = lock(self.view.table());
        if let Some(e) = table.find(&self.view.key) {
            if let Some(i) = e.waits.iter().position(|w| w.id == self.id) {
                e.waits.swap_remove(i);
            }
        }
        if unpin {
            table.unpin(&self.view.key);
        }
    }
}

impl RawWaiter for NamedWaiter {
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

/// A name is any non-empty string of at most [`MAX_NAME_BYTES`] UTF-8 bytes.
pub fn check_name(name: &str) -> Result<(), &'static str> {
    if name.is_empty() {
        Err("a lock name cannot be empty")
    } else if name.len() > MAX_NAME_BYTES {
        Err("a lock name is at most 1024 UTF-8 bytes")
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::lock::forever;

    fn scope() -> &'static Scope {
        // Each test has its own scope, so that tests running at once do not meet.
        Box::leak(Box::new(Scope::new()))
    }

    #[test]
    fn a_name_nobody_holds_has_no_entry() {
        let scope = scope();
        let client = Client::new(scope);
        for i in 0..1000 {
            let v = client.view(Arc::from(format!("n{i}")), Mode::Exclusive);
            crate::core::acquire::lock(&v, forever()).unwrap();
            let fence = v.record(false, Who::thread()).unwrap();
            assert_eq!(scope.entries(), 1);
            assert!(v.release(fence));
            assert!(!v.release(fence), "released twice");
        }
        assert_eq!(scope.entries(), 0);
    }

    #[test]
    fn fences_increase_across_clients_and_entries() {
        let scope = scope();
        let (a, b) = (Client::new(scope), Client::new(scope));
        let mut last = 0;
        for i in 0..100 {
            let c = if i % 2 == 0 { &a } else { &b };
            let v = c.view(Arc::from("x"), Mode::Exclusive);
            assert!(v.try_lock());
            let fence = v.record(false, Who::thread()).unwrap();
            assert!(fence > last);
            last = fence;
            assert!(v.release(fence));
            assert_eq!(scope.entries(), 0);
        }
    }

    #[test]
    fn two_clients_exclude_each_other_and_close_ends_holds() {
        let scope = scope();
        let (a, b) = (Client::new(scope), Client::new(scope));
        let va = a.view(Arc::from("x"), Mode::Exclusive);
        let vb = b.view(Arc::from("x"), Mode::Shared);
        assert!(va.try_lock());
        let fence = va.record(false, Who::thread()).unwrap();
        let Lost::Live(lost) = va.lost(fence) else {
            panic!("not live")
        };
        assert!(!vb.try_lock());
        assert_eq!(scope.query("").len(), 1);
        assert_eq!(a.close(Arc::new("closed")), 1);
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
        assert_eq!(scope.entries(), 0);
    }
}
