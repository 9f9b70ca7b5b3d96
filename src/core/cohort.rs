//! The cohort: a scope wider than the process, as one manager (a client) sees it.
//!
//! Two levels, one per owner:
//! - **the wider scope** (the kernel for `file.rs`, the database server for `pg.rs`) owns
//!   the manager's hold of a name, shared or exclusive: the manager's *gate* of the name;
//! - **the process** owns the queue: a private in-process scope (`memory.rs`, the same
//!   tables, records, fences and close as `memory:`) orders the manager's own threads and
//!   tasks. A thread or task first takes the name in that scope, then enters the gate:
//!   the wider hold, taken by the first local holder and released after the last, or
//!   passed on among local holders without asking the wider scope (each scope bounds
//!   that pass-on so that no client locks the others out).
//!
//! A local holder that cannot enter the gate at once leaves a *ticket* there, which the
//! scope grants later (`Gatekeeper`). Either way the wait, its deadline and its
//! cancellation are the in-process ones: a waiter that gives up withdraws its ticket and
//! gives its local hold back. This file holds what every such scope shares: the
//! `Session` over a private scope and a `Gatekeeper`, and the waiter that goes from the
//! local queue to the gate; the scopes hold only what their wider owner needs.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use super::cancel::Reason;
use super::memory::MemoryClient;
use super::named::{Failure, Info, Key, Lost, ScopedExit, Session, Who};
use super::raw::{Compete, Enqueued, Notify, RawWaiter, Status};
use super::stats::Statistics;
use super::waiter::Mode;

/// A local holder waiting to enter a gate.
pub(crate) struct Ticket {
    pub mode: Mode,
    pub notify: Notify,
    /// A blocked thread's ticket that the thread enters for itself, sleeping in
    /// `Gatekeeper::park_at_gate` between tries; otherwise the scope enters for it and
    /// wakes it through `notify`.
    pub own: bool,
    /// Set (under the gatekeeper's mutex) when the gate was entered for it.
    pub granted: AtomicBool,
    pub who: Who,
    /// When its holder began to wait (locally first, for one that did).
    pub since: f64,
}

impl Ticket {
    pub fn new(mode: Mode, notify: Notify, own: bool, who: Who, since: f64) -> Arc<Ticket> {
        Arc::new(Ticket {
            mode,
            notify,
            own,
            granted: AtomicBool::new(false),
            who,
            since,
        })
    }

    /// The gate was entered for it (its holder may now use the hold).
    pub fn is_granted(&self) -> bool {
        // ORDERING: pairs with the Release store in `grant`.
        self.granted.load(Ordering::Acquire)
    }

    /// Mark it granted, to be woken by the caller out of the gatekeeper's mutex.
    pub fn grant(&self) {
        // ORDERING: Release pairs with the waiter's Acquire load in `is_granted`.
        self.granted.store(true, Ordering::Release);
    }
}

/// Holds whose gate another thread entered for a local holder (a ticket granted by the
/// agent or by a releasing thread, a task's local hand-off), until that holder takes
/// them up. The hold's record is made only then, and a task takes it up only when its
/// event loop comes to it: without these, `query()` and `locked()` would show nobody
/// holding the name meanwhile, to this process and to the others.
///
/// Invariant: a ticket is here from its grant by another thread until its waiter sees
/// the grant (`status`, `abandon`) or is dropped, or the hold ends without it (a lost
/// wider hold, the manager's close), never after; each is listed once.
pub(crate) struct Arrivals(Mutex<Vec<(Arc<str>, Arc<Ticket>)>>);

impl Arrivals {
    pub const fn new() -> Arrivals {
        Arrivals(Mutex::new(Vec::new()))
    }

    fn list(&self) -> MutexGuard<'_, Vec<(Arc<str>, Arc<Ticket>)>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `ticket` of the gate `name` was granted by a thread other than its waiter's.
    pub fn add(&self, name: &Arc<str>, ticket: &Arc<Ticket>) {
        self.list().push((name.clone(), ticket.clone()));
    }

    /// The holds of `name` not yet taken up, now.
    pub fn of_name(&self, name: &str) -> Vec<Arc<Ticket>> {
        let list = self.list();
        list.iter()
            .filter(|(n, _)| **n == *name)
            .map(|(_, t)| t.clone())
            .collect()
    }

    /// These holds ended with their wider hold (lost): not shown any more; their waiters
    /// find the loss when they take them up.
    pub fn forget(&self, tickets: &[Arc<Ticket>]) {
        self.list()
            .retain(|(_, t)| !tickets.iter().any(|x| Arc::ptr_eq(x, t)));
    }

    /// The manager closed: no hold of it is shown any more.
    fn clear(&self) {
        self.list().clear();
    }

    /// Its waiter saw the grant (nothing to do if it was granted by the waiter itself).
    fn remove(&self, ticket: &Arc<Ticket>) {
        let mut list = self.list();
        if let Some(i) = list.iter().position(|(_, t)| Arc::ptr_eq(t, ticket)) {
            list.swap_remove(i);
        }
    }
}

/// What a wider scope does for a manager's gates: the one thing that differs between
/// the file scope and the PostgreSQL scope.
pub(crate) trait Gatekeeper: Send + Sync + Sized + 'static {
    /// The manager's private in-process scope.
    fn local(&self) -> &Arc<MemoryClient>;
    /// The keepers of every manager of this kind of scope in the process.
    fn keepers() -> &'static Keepers<Self>;
    /// Whether `other` is a manager of the same locks (the same directory, the same
    /// database). False when that cannot be told.
    fn same_scope(&self, other: &Self) -> bool;
    /// The holds granted to local holders that have not taken them up yet.
    fn arrivals(&self) -> &Arrivals;
    /// Enter `key`'s gate now for one local holder that just took the name locally.
    fn enter_now(&self, key: &Key, mode: Mode) -> bool;
    /// Leave a ticket for a local holder that could not enter, waiting since `since`
    /// (`None`: the manager shut down; its holder finds the failure). Tickets it grants
    /// go to `wake`, for the caller to wake by `wake_granted` once it holds no waiter's
    /// mutex.
    fn register(
        &self,
        key: &Key,
        mode: Mode,
        notify: Notify,
        who: Who,
        since: f64,
        wake: &mut Vec<Arc<Ticket>>,
    ) -> Option<Arc<Ticket>>;
    /// Wake the tickets `register` granted.
    fn wake_granted(&self, tickets: Vec<Arc<Ticket>>) {
        wake(tickets)
    }
    /// Take a ticket back (its holder gives up). False if it was granted first.
    fn withdraw(&self, key: &Key, ticket: &Arc<Ticket>) -> bool;
    /// A local hold that entered the gate ended (its local release done).
    fn leave(&self, key: &Key);
    /// A local hold that never entered the gate ended, or a local waiter left.
    fn settle_key(&self, key: &Key);
    /// A thread whose ticket is its own (`Ticket::own`) waits here until its ticket may
    /// have been granted, `until` at the latest.
    fn park_at_gate(&self, key: &Key, ticket: &Arc<Ticket>, until: Option<Instant>) {
        let _ = (key, ticket);
        super::sync::park_until(until)
    }
    /// Every hold and waiter of every client of the scope whose name starts with `prefix`.
    fn collect(&self, prefix: &str) -> Vec<Info>;
    /// End this client's part of the scope (after its local holds ended): give every
    /// wider hold back, fail the tickets, stop its helpers.
    fn shutdown(&self);
    /// The manager is gone without a close (its helpers stop).
    fn dropped(&self);
    /// Why this client's gates cannot be entered, if they cannot.
    fn failure(&self) -> Option<Failure>;
    /// Whether this is a forked child of the process that made the manager.
    fn made_before_fork(&self) -> bool;
    /// A hold that entered `key`'s gate was recorded with `fence`. A scope whose wider
    /// hold may be lost between the entry and the record ends the hold here if it was,
    /// and says why (the acquire then fails, as a record that failed does).
    fn recorded(&self, key: &Key, fence: u64) -> Option<Failure> {
        let _ = (key, fence);
        None
    }
}

/// The tickets of a gate this manager's agent (or a thread of its own) granted.
pub(crate) fn wake(tickets: Vec<Arc<Ticket>>) {
    for t in tickets {
        t.notify.wake();
    }
}

/// The keepers of one scope's managers, so that their helper threads can be stopped
/// before the embedding finalizes (`scopes::before_exit`).
pub(crate) struct Keepers<K>(Mutex<Vec<std::sync::Weak<K>>>);

impl<K> Keepers<K> {
    pub const fn new() -> Keepers<K> {
        Keepers(Mutex::new(Vec::new()))
    }

    fn list(&self) -> MutexGuard<'_, Vec<std::sync::Weak<K>>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Remember a new manager's keeper (and forget those that are gone).
    pub fn add(&self, keeper: &Arc<K>) {
        let mut list = self.list();
        list.retain(|k| k.strong_count() > 0);
        list.push(Arc::downgrade(keeper));
    }

    /// Every keeper still alive.
    pub fn alive(&self) -> Vec<Arc<K>> {
        self.list().iter().filter_map(|k| k.upgrade()).collect()
    }

    /// Every keeper still alive, forgotten here.
    pub fn take(&self) -> Vec<Arc<K>> {
        self.list().drain(..).filter_map(|k| k.upgrade()).collect()
    }
}

/// Why a manager made before `fork()` cannot be used in the child: its descriptors or
/// sessions are the parent's.
pub(crate) fn forked_failure() -> Failure {
    Failure(
        "this LockManager was made before fork() in the parent process; make a new \
         LockManager in the child"
            .to_owned(),
    )
}

/// A manager's own records for `query()`: its private scope's holds and waits, the holds
/// not yet taken up (`arrivals`) and the tickets at its gates (each gate's name and
/// tickets), whose name starts with `prefix`.
pub(crate) fn local_infos<'a>(
    local: &MemoryClient,
    prefix: &str,
    arrivals: &Arrivals,
    gates: impl Iterator<Item = (&'a Arc<str>, &'a [Arc<Ticket>])>,
) -> Vec<Info> {
    let mut out = local.query(prefix);
    let pid = std::process::id();
    for (name, t) in arrivals.list().iter() {
        if name.starts_with(prefix) {
            out.push(Info {
                name: name.clone(),
                mode: t.mode,
                held: true,
                who: t.who.clone(),
                pid,
                host: None,
                since: t.since,
            });
        }
    }
    for (name, tickets) in gates.filter(|(name, _)| name.starts_with(prefix)) {
        out.extend(tickets.iter().map(|t| Info {
            name: name.clone(),
            mode: t.mode,
            held: false,
            who: t.who.clone(),
            pid,
            host: None,
            since: t.since,
        }));
    }
    out
}

/// A manager of a wider scope: its private in-process scope behind its gates.
pub(crate) struct Cohort<K: Gatekeeper> {
    pub keeper: Arc<K>,
}

impl<K: Gatekeeper> Cohort<K> {
    fn local(&self) -> &Arc<MemoryClient> {
        self.keeper.local()
    }

    /// Take up a hold just taken (locally and at the gate): record it, or give it back.
    fn take_up(&self, key: &Key, mode: Mode, scoped: bool, who: Who) -> Result<u64, Failure> {
        match self.local().record(key, mode, scoped, who) {
            // Ended already (its departure from the gate counted, and no ended record
            // left for a `with` that will not exit): the acquire fails.
            Ok(fence) => match self.keeper.recorded(key, fence) {
                None => Ok(fence),
                Some(f) => Err(f),
            },
            Err(f) => {
                // The record gave the local hold back already.
                self.keeper.leave(key);
                Err(f)
            }
        }
    }
}

impl<K: Gatekeeper> Drop for Cohort<K> {
    fn drop(&mut self) {
        self.keeper.dropped();
    }
}

/// A queued acquire: first the local scope's, then (as a ticket) the gate's.
struct CohortWaiter<K: Gatekeeper>(Arc<Waiting<K>>);

struct Waiting<K: Gatekeeper> {
    client: Arc<Cohort<K>>,
    key: Key,
    mode: Mode,
    /// How the acquire is woken.
    notify: Notify,
    who: Who,
    /// When the acquire began to wait.
    since: f64,
    /// Lock order: `abandon` and `compete` call the local scope with this mutex held, and
    /// the local scope's wakes (run once its queue mutex is let go) may take the `stage`
    /// of a task's waiter they woke (`LocalBell`). That makes no cycle: a thread's waiter
    /// (the only one that competes) is woken by an unpark, never through its `stage`, and
    /// a waiter that abandons is out of the local queue before any later operation picks
    /// whom to wake. A task those wakes wake may wait for the embedding's interpreter lock
    /// meanwhile; the only thread that holds that lock and waits for a `stage` is a task's
    /// loop thread, for its task's waiter, which abandons on that thread, holding it.
    /// (The waits this file starts itself are woken once `stage` is let go:
    /// `Gatekeeper::wake_granted`.)
    stage: Mutex<Stage>,
}

enum Stage {
    /// Queued in the local scope, not yet known to the waiter (`woken`: the local scope
    /// woke it meanwhile).
    Starting { woken: bool },
    /// Waiting in the local scope.
    Local(Box<dyn RawWaiter>),
    /// Holding locally, waiting at the gate (no ticket: the manager shut down), or
    /// entered for it by another thread (the ticket granted, and in `Arrivals` until the
    /// waiter sees it).
    Gate(Option<Arc<Ticket>>),
    /// Holding, gate entered.
    Held,
    /// Gave up.
    Left,
}

/// How the local scope wakes a task's acquire: a task is woken once, when its wait ends
/// (the binding completes a future), so a local grant must not wake it while it still
/// waits at the gate. This waker takes the acquire to the gate in the waking thread and
/// wakes the task only once it entered (or the manager failed); a thread needs no such
/// care, as it looks at its status each time it wakes.
struct LocalBell<K: Gatekeeper>(std::sync::Weak<Waiting<K>>);

impl<K: Gatekeeper> std::task::Wake for LocalBell<K> {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref()
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if let Some(w) = self.0.upgrade() {
            w.advance();
        }
    }
}

impl<K: Gatekeeper> Waiting<K> {
    fn stage(&self) -> MutexGuard<'_, Stage> {
        self.stage.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Holding locally: enter the gate, or leave a ticket. Tickets the scope granted
    /// meanwhile go to `wake`: they are woken once the caller let go of the waiter's
    /// mutex (`wake_granted`), as waking a task takes the GIL, which a thread blocked on
    /// that mutex (the task's own loop) may hold.
    fn at_gate(&self, wake: &mut Vec<Arc<Ticket>>) -> Stage {
        let k = &self.client.keeper;
        if k.enter_now(&self.key, self.mode) {
            return Stage::Held;
        }
        let (notify, who) = (self.notify.clone(), self.who.clone());
        Stage::Gate(k.register(&self.key, self.mode, notify, who, self.since, wake))
    }

    /// Where the wait stands once the local scope says `local`: a local grant goes on to
    /// the gate (entered, or a ticket left there; see `at_gate` for `wake`).
    fn after_local(&self, stage: &mut Stage, local: Status, wake: &mut Vec<Arc<Ticket>>) -> Status {
        if local != Status::Granted {
            return local;
        }
        *stage = self.at_gate(wake);
        if matches!(*stage, Stage::Held) {
            Status::Granted
        } else {
            Status::Waiting
        }
    }

    /// Give back a local hold that never entered the gate.
    fn give_back(&self) {
        self.client.local().unlock(&self.key, self.mode);
        self.client.keeper.settle_key(&self.key);
    }

    /// A granted ticket for the gate this thread just entered for the waiter, listed in
    /// `Arrivals` until the waiter sees it.
    fn arrived(&self) -> Arc<Ticket> {
        let (notify, who) = (self.notify.clone(), self.who.clone());
        let ticket = Ticket::new(self.mode, notify, false, who, self.since);
        ticket.grant();
        let arrivals = self.client.keeper.arrivals();
        arrivals.add(&self.key.to_arc(), &ticket);
        ticket
    }

    /// The waiter saw that its ticket was granted: it is no longer listed as arriving.
    fn saw_grant(&self, ticket: &Arc<Ticket>) {
        self.client.keeper.arrivals().remove(ticket);
    }

    /// The local scope woke a task's acquire (see `LocalBell`).
    fn advance(&self) {
        let mut granted = Vec::new();
        let mut stage = self.stage();
        let wake = match &mut *stage {
            Stage::Starting { woken } => {
                *woken = true;
                false
            }
            Stage::Local(w) => {
                let local = w.status();
                match self.after_local(&mut stage, local, &mut granted) {
                    Status::Granted => {
                        // Entered here for the task, which takes it up when it runs.
                        *stage = Stage::Gate(Some(self.arrived()));
                        true
                    }
                    Status::Retry => true,
                    // Still waiting (locally or at the gate): woken only if its manager
                    // closed (or failed) meanwhile.
                    Status::Waiting => Session::failure(&*self.client).is_some(),
                }
            }
            _ => false,
        };
        drop(stage);
        self.client.keeper.wake_granted(granted);
        if wake {
            self.notify.wake();
        }
    }
}

impl<K: Gatekeeper> Drop for Waiting<K> {
    /// A waiter dropped before it looked at its granted ticket (its caller gone) is no
    /// longer arriving.
    fn drop(&mut self) {
        let stage = self.stage.get_mut().unwrap_or_else(|e| e.into_inner());
        if let Stage::Gate(Some(t)) = &*stage {
            self.client.keeper.arrivals().remove(t);
        }
    }
}

impl<K: Gatekeeper> RawWaiter for CohortWaiter<K> {
    fn status(&self) -> Status {
        let w = &self.0;
        let mut stage = w.stage();
        match &*stage {
            Stage::Local(local) => {
                let local = local.status();
                let mut granted = Vec::new();
                let status = w.after_local(&mut stage, local, &mut granted);
                drop(stage);
                w.client.keeper.wake_granted(granted);
                status
            }
            Stage::Gate(Some(t)) => {
                if t.is_granted() {
                    w.saw_grant(t);
                    *stage = Stage::Held;
                    Status::Granted
                } else {
                    Status::Waiting
                }
            }
            Stage::Starting { .. } | Stage::Gate(None) | Stage::Left => Status::Waiting,
            Stage::Held => Status::Granted,
        }
    }

    fn abandon(&self) -> bool {
        let w = &self.0;
        let mut stage = w.stage();
        // A local hold or a gate is given back once the waiter's mutex is let go (see
        // `at_gate`): either may go on to wake a task. As `Left`, nothing else acts on it.
        let (left, give_back, settle) = match std::mem::replace(&mut *stage, Stage::Left) {
            // Handed the local hold first, the waiter gives it back; else one waiter
            // less, and a hold kept for local demand may have none left.
            Stage::Local(local) => {
                let gone = local.abandon();
                (true, !gone, gone)
            }
            Stage::Gate(Some(t)) => {
                // A granted ticket is checked first: a closed manager's `withdraw` cannot
                // tell.
                if !t.is_granted() && w.client.keeper.withdraw(&w.key, &t) {
                    (true, true, false)
                } else {
                    w.saw_grant(&t);
                    *stage = Stage::Held;
                    (false, false, false)
                }
            }
            Stage::Gate(None) => (true, true, false),
            Stage::Held => {
                *stage = Stage::Held;
                (false, false, false)
            }
            Stage::Starting { .. } | Stage::Left => (true, false, false),
        };
        drop(stage);
        if give_back {
            w.give_back();
        } else if settle {
            w.client.keeper.settle_key(&w.key);
        }
        left
    }

    /// A thread whose ticket is its own waits in its gatekeeper; elsewhere it parks as
    /// every waiter does.
    fn park(&self, until: Option<Instant>) {
        let w = &self.0;
        let ticket = match &*w.stage() {
            Stage::Gate(Some(t)) if t.own => t.clone(),
            _ => return super::sync::park_until(until),
        };
        w.client.keeper.park_at_gate(&w.key, &ticket, until)
    }

    fn compete(&self) -> bool {
        let w = &self.0;
        let mut stage = w.stage();
        let Stage::Local(local) = &*stage else {
            return false;
        };
        if !local.compete() {
            return false;
        }
        let mut granted = Vec::new();
        *stage = w.at_gate(&mut granted);
        let held = matches!(*stage, Stage::Held);
        drop(stage);
        w.client.keeper.wake_granted(granted);
        held
    }
}

impl<K: Gatekeeper> Session for Cohort<K> {
    fn try_lock(&self, key: &Key, mode: Mode) -> bool {
        if !self.local().try_lock(key, mode) {
            return false;
        }
        if self.keeper.enter_now(key, mode) {
            return true;
        }
        self.local().unlock(key, mode);
        self.keeper.settle_key(key);
        false
    }

    fn try_lock_recorded(&self, key: &Key, mode: Mode, who: Who) -> Option<Result<u64, Failure>> {
        if !Session::try_lock(self, key, mode) {
            return None;
        }
        Some(self.take_up(key, mode, false, who))
    }

    fn unlock(&self, key: &Key, mode: Mode) -> bool {
        let released = self.local().unlock(key, mode);
        if released {
            self.keeper.leave(key);
        }
        released
    }

    fn enqueue(
        self: Arc<Self>,
        key: &Key,
        mode: Mode,
        notify: Notify,
        compete: Compete,
    ) -> Enqueued<Box<dyn RawWaiter>> {
        let who = Who::thread();
        let waiting = Arc::new(Waiting {
            client: self.clone(),
            key: key.clone(),
            mode,
            notify: notify.clone(),
            who: who.clone(),
            since: super::named::now(),
            stage: Mutex::new(Stage::Starting { woken: false }),
        });
        let local_notify = match notify {
            Notify::Thread(_) => notify,
            Notify::Task(_) => Notify::Task(std::task::Waker::from(Arc::new(LocalBell(
                Arc::downgrade(&waiting),
            )))),
        };
        match self
            .local()
            .clone()
            .enqueue(key, mode, local_notify, compete)
        {
            Enqueued::Queued(local) => {
                let woken = {
                    let mut stage = waiting.stage();
                    let woken = matches!(*stage, Stage::Starting { woken: true });
                    *stage = Stage::Local(local);
                    woken
                };
                if woken {
                    waiting.advance();
                }
            }
            Enqueued::Acquired => {
                if self.keeper.enter_now(key, mode) {
                    return Enqueued::Acquired;
                }
                let (notify, since) = (waiting.notify.clone(), waiting.since);
                let mut granted = Vec::new();
                let ticket = self
                    .keeper
                    .register(key, mode, notify, who, since, &mut granted);
                *waiting.stage() = Stage::Gate(ticket);
                self.keeper.wake_granted(granted);
            }
        }
        Enqueued::Queued(Box::new(CohortWaiter(waiting)))
    }

    fn record(&self, key: &Key, mode: Mode, scoped: bool, who: Who) -> Result<u64, Failure> {
        self.take_up(key, mode, scoped, who)
    }

    fn release(&self, key: &Key, mode: Mode, fence: u64) -> bool {
        let released = self.local().release(key, mode, fence);
        if released {
            self.keeper.leave(key);
        }
        released
    }

    fn release_scoped(&self, key: &Key, mode: Mode, who: &Who) -> ScopedExit {
        let exit = self.local().release_scoped(key, mode, who);
        // An ended hold departed from its gate when it ended (`Keeper::lose`).
        if exit == ScopedExit::Released {
            self.keeper.leave(key);
        }
        exit
    }

    fn lost(&self, key: &Key, fence: u64) -> Lost {
        self.local().lost(key, fence)
    }

    fn statistics(&self, key: &Key, mode: Mode) -> Statistics {
        let infos = self.keeper.collect(key.name());
        let mine = infos.iter().filter(|i| *i.name == *key.name());
        let (mut holders, mut waiting) = (0, 0);
        for i in mine {
            if !i.held {
                waiting += 1;
            } else if i.mode == mode {
                holders += 1;
            }
        }
        Statistics {
            locked: holders > 0,
            holders,
            waiting,
        }
    }

    fn tag_hold(&self, key: &Key, mode: Mode, tag: u64) {
        self.local().tag_hold(key, mode, tag)
    }

    fn untag_hold(&self, key: &Key, mode: Mode, tag: u64) {
        self.local().untag_hold(key, mode, tag)
    }

    fn has_tagged_hold(&self, key: &Key, mode: Mode, tag: u64) -> bool {
        if self.local().has_tagged_hold(key, mode, tag) {
            return true;
        }
        // Another manager of the same scope in this process: an `async with` hold of its
        // blocks this wait as well, and is released only on the same event loop.
        // A closed manager's holds ended, and a parent's are not this process's.
        K::keepers().alive().iter().any(|k| {
            !std::ptr::eq(&**k, &*self.keeper)
                && !k.local().is_closed()
                && !k.made_before_fork()
                && k.local().has_tagged_hold(key, mode, tag)
                && k.same_scope(&self.keeper)
        })
    }

    fn query(&self, prefix: &str) -> Vec<Info> {
        self.keeper.collect(prefix)
    }

    fn asks_others(&self) -> bool {
        true
    }

    fn close(&self, reason: Reason) -> usize {
        // Local holds end first (each released locally); then the wider holds go, and the
        // tickets are woken to find the manager closed; then the `lost` tokens are
        // cancelled, so that their callbacks find the names free everywhere.
        self.local().close_then(reason, || {
            self.keeper.shutdown();
            self.keeper.arrivals().clear();
        })
    }

    fn failure(&self) -> Option<Failure> {
        if let Some(f) = Session::failure(&**self.local()) {
            return Some(f);
        }
        self.keeper.failure()
    }

    fn unanswerable(&self) -> Option<Failure> {
        if self.keeper.made_before_fork() {
            return Some(forked_failure());
        }
        // Closed: the private scope's client says so, as it does for the memory scope.
        Session::unanswerable(&**self.local())
    }
}

/// Records as bytes: per record, mode, held, name length, task length (one byte and
/// three u16), since (f64), thread (u64), then the name and the task, padded to 8.
pub(crate) fn encode_infos(infos: &[Info]) -> Vec<u8> {
    let mut out = Vec::new();
    for i in infos {
        let task = i.who.task.as_deref().unwrap_or("");
        let task = &task[..task.len().min(256)];
        out.push(u8::from(i.mode == Mode::Shared));
        out.push(u8::from(i.held));
        out.extend((i.name.len() as u16).to_le_bytes());
        out.extend((task.len() as u16).to_le_bytes());
        out.extend([u8::from(i.who.task.is_some()), 0]);
        out.extend(i.since.to_le_bytes());
        out.extend(i.who.thread.to_le_bytes());
        out.extend(i.name.as_bytes());
        out.extend(task.as_bytes());
        out.resize(out.len().div_ceil(8) * 8, 0);
    }
    out
}

/// The records `encode` wrote; a damaged one ends the list.
pub(crate) fn decode_infos(bytes: &[u8], pid: u32) -> Vec<Info> {
    let mut out = Vec::new();
    let mut at = 0;
    while at + 24 <= bytes.len() {
        let b = &bytes[at..];
        let name_len = u16::from_le_bytes([b[2], b[3]]) as usize;
        let task_len = u16::from_le_bytes([b[4], b[5]]) as usize;
        let end = 24 + name_len + task_len;
        if name_len == 0 || b.len() < end {
            break;
        }
        let (Ok(name), Ok(task)) = (
            std::str::from_utf8(&b[24..24 + name_len]),
            std::str::from_utf8(&b[24 + name_len..end]),
        ) else {
            break;
        };
        out.push(Info {
            name: Arc::from(name),
            mode: if b[0] == 1 {
                Mode::Shared
            } else {
                Mode::Exclusive
            },
            held: b[1] == 1,
            who: Who {
                thread: u64::from_le_bytes(b[16..24].try_into().unwrap()),
                task: (b[6] == 1).then(|| Arc::from(task)),
            },
            pid,
            host: None,
            since: f64::from_le_bytes(b[8..16].try_into().unwrap()),
        });
        at += end.div_ceil(8) * 8;
    }
    out
}
