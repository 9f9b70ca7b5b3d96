//! The processes-of-one-machine scope of named locks (`LockManager("file:///dir")`).
//!
//! Two levels, one per owner:
//! - **the kernel** owns each manager's hold of a name: an open-file-description lock on
//!   the name's slot in the directory's table (`file_table.rs`), shared or exclusive. It
//!   is freed when the manager's process dies, whatever the way, so a crash leaves
//!   nothing to repair;
//! - **the process** owns the queue: a private in-process scope (`memory.rs`, the same
//!   tables, records, fences and close as `memory:`) orders the manager's own threads and
//!   tasks. A thread or task first takes the name in that scope, then enters the
//!   manager's *gate* of the name: the kernel hold, taken by the first local holder and
//!   released after the last, or passed on among local holders without a system call
//!   (the cohort: for as long as they want it while no other client waits for the name;
//!   once one waits, at most `MAX_HANDOFFS` more times and for `MAX_KEEP`).
//!
//! A local holder that cannot enter the gate at once (another client holds the name)
//! leaves a *ticket*, and a release of the name by another client rings the manager's
//! doorbell (a futex word in the table). A blocked thread sleeps on the doorbell and
//! takes the kernel hold itself when rung (`FileWaiter::park`); a task's ticket is taken
//! up by the manager's agent thread, which then wakes the task the way every waiter is
//! woken (`Notify`). Either way the wait, its deadline and its cancellation are the
//! in-process ones. A killed holder rings nothing: a thread at the gate, and an agent
//! with tickets, also try again every `CRASH_CHECK`, which is how a waiter notices that
//! the kernel freed a dead holder's lock (and how soon a sleeping thread sees its token
//! cancelled, at the latest).
//!
//! Fairness between clients: a release with other clients waiting gives the next of them
//! (round robin) the turn, and the others leave the name to it for a few milliseconds.
//! Phase fairness: a client's waiting exclusive request read-locks the slot's writer byte
//! while it waits, and no other client starts a shared hold meanwhile.
//!
//! `query()` and `statistics()` ask every live client (its agent publishes its records in
//! its part of the table, under a seqlock), so they see every process's holds and waits.

use std::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use hashbrown::HashTable;

use super::cohort::{decode_infos, encode_infos, Cohort, Gatekeeper, Keepers, Ticket};
use super::file_table::{
    futex_wait, futex_wake, stable_hash, Range, Table, NEWS_AGENT, NEWS_ALL, NEWS_RELEASE,
};
use super::memory::{MemoryClient, MemoryScope};
use super::named::{Failure, Info, Key, Session, Who};
use super::raw::Notify;
use super::waiter::Mode;

/// Local hand-offs of one kernel hold, once another client waits, before it goes back.
const MAX_HANDOFFS: u32 = 256;
/// How long after its first local hand-off a kernel hold may be handed on locally once
/// another client waits: a process's batch of holds, which bounds the others' waits.
const MAX_KEEP: Duration = Duration::from_millis(2);
/// How often an agent with tickets tries again when no release rang (a crashed holder).
const CRASH_CHECK: Duration = Duration::from_millis(10);
/// Idle gates (names used and let go) a manager keeps, with their slot pinned, while the
/// table has room: a manager that finds it full lets go of its own idle gates and asks the
/// others to (`Keeper::trim`).
const IDLE_GATES: usize = 64;
/// How often at most a manager that finds the table full asks the others to let go of
/// their idle names (`Keeper::make_room`).
const ASK_TO_TRIM_EVERY: Duration = Duration::from_millis(100);
/// How long `query()` waits for another client's answer.
const ANSWER_WITHIN: Duration = Duration::from_secs(1);

/// This manager's kernel hold of one name.
///
/// # Invariants
/// - `held` is the kernel hold of `slot` on this manager's description; `users` counts
///   the local holds that entered it. `held` is `Some` with `users == 0` only while a
///   local holder that has not entered yet will (or will give its hold back and settle).
/// - `tickets` are local holders (all of one mode) that could not enter; `marked` says
///   this client's waiting bit of the slot is set, which it is while `tickets` is
///   non-empty; `writer` that its writer byte is read-locked (an exclusive ticket).
struct Gate {
    name: Arc<str>,
    hash: u64,
    /// The name's slot in the table, pinned; `None` until pinned (or the table was full).
    slot: Option<usize>,
    held: Option<Mode>,
    users: u32,
    handoffs: u32,
    /// When the hold was first passed on locally (the start of `MAX_KEEP`).
    first_handoff: Option<Instant>,
    tickets: Vec<Arc<Ticket>>,
    marked: bool,
    writer: bool,
}

impl Gate {
    /// The kernel hold went to another local holder without a system call.
    fn handed_on(&mut self) {
        self.handoffs += 1;
        self.first_handoff.get_or_insert_with(Instant::now);
    }

    fn idle(&self) -> bool {
        self.users == 0 && self.held.is_none() && self.tickets.is_empty()
    }
}

#[derive(Default)]
struct Gates {
    map: HashTable<Gate>,
    /// Set once by `shutdown`: no gate is entered again.
    closed: bool,
    /// When this manager last asked the others to let go of idle names (`make_room`).
    asked_to_trim: Option<Instant>,
}

/// What a manager's threads and its agent share: the table and the gates.
struct Keeper {
    table: Arc<Table>,
    /// This manager's client entry in the table.
    me: usize,
    local: Arc<MemoryClient>,
    /// Holds granted to its local holders that they have not taken up yet.
    arrivals: super::cohort::Arrivals,
    gates: Mutex<Gates>,
    stop: AtomicBool,
    /// Set when a system call on the table failed: every acquire fails with it.
    broken: OnceLock<Failure>,
    /// The process generation the manager was made in (see `fork.rs`): a forked child
    /// shares the parent's description, so it must not touch the parent's locks.
    generation: u64,
    /// The agent thread, until stopped.
    agent: Mutex<Option<JoinHandle<()>>>,
    /// Set when a pin found every slot of the table in use, cleared when one succeeds:
    /// the next gate that needs a slot lets go of this manager's idle gates first.
    full: AtomicBool,
    /// The table's `trims` count this manager's agent last answered.
    trims_seen: AtomicU64,
}

/// Every manager's keeper, so that the agents can be stopped before the interpreter
/// finalizes (`stop_agents`).
static KEEPERS: Keepers<Keeper> = Keepers::new();

/// Stop every agent thread of this process (their managers' threads still get their
/// locks; tasks that wait at a gate no longer do). The embedding calls it before it
/// finalizes: an agent wakes tasks through their event loops, which needs the
/// interpreter, and CPython ends a thread that takes its lock while it finalizes, which
/// a thread that is no Python thread does not survive.
pub fn stop_agents() {
    for k in KEEPERS.take() {
        k.stop_agent();
    }
}

fn range(mode: Mode) -> Range {
    match mode {
        Mode::Exclusive => Range::Write,
        Mode::Shared => Range::Read,
    }
}

impl Keeper {
    fn gates(&self) -> MutexGuard<'_, Gates> {
        self.gates.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn forked(&self) -> bool {
        super::fork::generation() != self.generation
    }

    /// Stop the agent (and wait for it, unless this is a forked child, where it does
    /// not exist, or the agent itself).
    fn stop_agent(&self) {
        // ORDERING: SeqCst, read by the agent after its doorbell rings.
        self.stop.store(true, Ordering::SeqCst);
        // Once: after `close` stopped it, a drop touches nothing of the table.
        let Some(handle) = self.agent.lock().unwrap_or_else(|e| e.into_inner()).take() else {
            return;
        };
        if self.forked() {
            std::mem::forget(handle);
            return;
        }
        self.table.ring(self.me, NEWS_AGENT);
        if handle.thread().id() != std::thread::current().id() {
            let _ = handle.join();
        }
    }

    fn fail(&self, e: std::io::Error) {
        let _ = self.broken.set(Failure(self.table.err(e)));
    }

    /// Run `f` on `key`'s gate (made if absent); `None` if the manager is shut down.
    /// A gate idle afterwards goes if the manager keeps enough idle ones.
    fn with_gate<T>(&self, key: &Key, f: impl FnOnce(&Self, &mut Gate) -> T) -> Option<T> {
        let mut gates = self.gates();
        if gates.closed || self.forked() {
            return None;
        }
        let name = key.name();
        // ORDERING: Relaxed: a hint; the pin decides under the table's own locks.
        if self.full.load(Ordering::Relaxed) {
            let pinned = gates
                .map
                .find(key.hash(), |g| *g.name == *name)
                .is_some_and(|g| g.slot.is_some());
            if !pinned {
                self.trim(&mut gates, Some(key));
            }
        }
        let gate = gates
            .map
            .entry(key.hash(), |g| *g.name == *name, |g| g.hash)
            .or_insert_with(|| Gate {
                name: key.to_arc(),
                hash: key.hash(),
                slot: None,
                held: None,
                users: 0,
                handoffs: 0,
                first_handoff: None,
                tickets: Vec::new(),
                marked: false,
                writer: false,
            })
            .into_mut();
        let out = f(self, gate);
        let (no_slot, idle) = (gate.slot.is_none(), gate.idle());
        // ORDERING: as above.
        if no_slot && self.full.load(Ordering::Relaxed) {
            // (A gate left idle without a slot costs nothing: the next trim takes it.)
            self.make_room(&mut gates, Some(key));
            return Some(out);
        }
        if idle && gates.map.len() > IDLE_GATES {
            if let Ok(found) = gates.map.find_entry(key.hash(), |g| *g.name == *name) {
                let (g, _) = found.remove();
                if let Some(s) = g.slot {
                    if let Err(e) = self.table.unpin(s) {
                        self.fail(e);
                    }
                }
            }
        }
        Some(out)
    }

    /// The gate's slot, pinned now if it was not (then marked for the tickets that
    /// waited for a slot: a full table).
    fn slot(&self, g: &mut Gate) -> Option<usize> {
        if g.slot.is_none() {
            match self.table.pin(&g.name, stable_hash(&g.name)) {
                Ok(Some(s)) => {
                    g.slot = Some(s);
                    // ORDERING: Relaxed: a hint (see `full`).
                    self.full.store(false, Ordering::Relaxed);
                    self.mark(g, s);
                }
                Ok(None) => self.full.store(true, Ordering::Relaxed),
                Err(e) => self.fail(e),
            }
        }
        g.slot
    }

    /// Let go of every idle gate but `keep`'s, and of its slot: how many went. (An idle
    /// gate has no local holder, waiter or kernel hold: the same gates `with_gate` lets
    /// go of beyond `IDLE_GATES`.)
    fn trim(&self, gates: &mut Gates, keep: Option<&Key>) -> usize {
        let kept = |g: &Gate| keep.is_some_and(|k| g.hash == k.hash() && *g.name == *k.name());
        let mut slots = Vec::new();
        gates.map.retain(|g| {
            let go = g.idle() && !kept(g);
            if go {
                slots.extend(g.slot);
            }
            !go
        });
        for &s in &slots {
            if let Err(e) = self.table.unpin(s) {
                self.fail(e);
            }
        }
        slots.len()
    }

    /// Every slot of the table is in use: let go of this manager's idle gates (but
    /// `keep`'s), or if it has none, ask the other managers to let go of theirs, at most
    /// every `ASK_TO_TRIM_EVERY` (a waiter retries far more often, and each ask empties
    /// every manager's cache of idle names).
    fn make_room(&self, gates: &mut Gates, keep: Option<&Key>) {
        if self.trim(gates, keep) > 0 {
            return;
        }
        let now = Instant::now();
        if gates
            .asked_to_trim
            .is_some_and(|at| now.duration_since(at) < ASK_TO_TRIM_EVERY)
        {
            return;
        }
        gates.asked_to_trim = Some(now);
        self.table.ask_to_trim(self.me);
    }

    /// The agent: let go of the idle gates if a manager asked since the last time.
    fn answer_trim(&self) {
        let asked = self.table.trims();
        // ORDERING: Relaxed: only the agent reads and writes it.
        if self.trims_seen.swap(asked, Ordering::Relaxed) != asked {
            let mut gates = self.gates();
            if !gates.closed {
                self.trim(&mut gates, None);
            }
        }
    }

    /// Say that this client waits for slot `s` while `g` has tickets (and, for an
    /// exclusive one, read-lock the writer byte): releases of the name ring it, and
    /// other clients' new shared requests stay back.
    fn mark(&self, g: &mut Gate, s: usize) {
        let Some(mode) = g.tickets.first().map(|t| t.mode) else {
            return;
        };
        if !g.marked {
            self.table.mark_waiting(s, self.me, true);
            g.marked = true;
        }
        if mode == Mode::Exclusive && !g.writer {
            match self.table.mark_writer(s, true) {
                Ok(()) => g.writer = true,
                Err(e) => self.fail(e),
            }
        }
    }

    /// Enter `g` for `n` local holders in `mode`: join the kernel hold, or take it.
    fn enter(&self, g: &mut Gate, mode: Mode, n: u32) -> bool {
        let Some(s) = self.slot(g) else {
            return false;
        };
        let t = &self.table;
        match g.held {
            Some(m) if g.users > 0 => {
                // Only readers join readers, and not while another client's writer
                // waits (it would wait for ever behind a stream of local readers).
                if m == Mode::Shared && mode == Mode::Shared && !t.writer_waits(s) {
                    g.users += n;
                    return true;
                }
                return false;
            }
            Some(m) => {
                // Kept for a local holder: its turn.
                if m == mode && !(mode == Mode::Shared && t.writer_waits(s)) {
                    g.users = n;
                    g.handed_on();
                    return true;
                }
                self.free(g, s);
            }
            None => {}
        }
        if t.not_my_turn(s, self.me).is_some() {
            return false;
        }
        if mode == Mode::Shared && t.writer_waits(s) {
            // Another client's writer waits: this request stays back (phase fairness).
            // A release cannot tell the modes of the waiting clients apart, so the turn
            // may be this client's; it would keep the writer out until its grace ran out,
            // so it goes now, and the others are rung to take it up.
            if t.end_turn(s, self.me) {
                t.ring_waiting(s, self.me);
            }
            return false;
        }
        match t.take(s, range(mode)) {
            Ok(true) => {
                g.held = Some(mode);
                g.users = n;
                g.handoffs = 0;
                g.first_handoff = None;
                t.end_turn(s, self.me);
                true
            }
            Ok(false) => false,
            Err(e) => {
                self.fail(e);
                false
            }
        }
    }

    /// Give the kernel hold back, and ring the clients waiting for the name (the next
    /// of them gets the turn).
    ///
    /// The turn is given while the hold is still this client's, so an heir that waits
    /// for this hold to go cannot take the name, and end its turn, before the turn is
    /// written. An heir that stops waiting anyway (a shared heir can take the name beside
    /// a shared hold; a waiter may give up) ends the turn itself (`unmark`) if it sees
    /// it, else this release does: the waiting clients are read again after the release
    /// (the read that pairs with a waiter's bit, so no ring is lost), and an heir no
    /// longer among them has its turn ended.
    fn free(&self, g: &mut Gate, s: usize) {
        g.held = None;
        let t = &self.table;
        let mut heirs = t.waiting(s, self.me);
        // A client that died waiting left its bit: clear it, and give it no turn.
        heirs.retain(|&c| {
            let alive = t.alive(c);
            if !alive {
                t.mark_waiting(s, c, false);
            }
            alive
        });
        let heir = t.pass_turn(s, self.me, &heirs);
        if let Err(e) = t.free(s) {
            self.fail(e);
        }
        let others = t.waiting(s, self.me);
        if let Some(h) = heir.filter(|h| !others.contains(h)) {
            t.end_turn(s, h);
        }
        for c in others {
            t.ring(c, NEWS_RELEASE);
        }
    }

    /// Whether the local scope has a holder of the name (in either mode) or a waiter:
    /// someone who will enter the gate, or settle it when it gives up.
    fn local_demand(&self, g: &Gate) -> bool {
        let key = Key::with_hash(g.name.clone(), g.hash);
        self.local.in_demand(&key)
    }

    /// After a local hold ended (and left the gate, if it had entered): pass the kernel
    /// hold to tickets or keep it for local demand (a holder about to enter, a waiter), or
    /// give it back.
    ///
    /// The cohort rule: while no other client waits for the name, the hold stays with
    /// this manager for as long as its threads and tasks want it, passed on without a
    /// system call. Once another client waits, it is passed on at most `MAX_HANDOFFS`
    /// times and for `MAX_KEEP` from its first hand-off (so at once, if those are spent),
    /// then goes back to the kernel with the turn given to the next waiting client.
    fn settle(&self, g: &mut Gate, wake: &mut Vec<Arc<Ticket>>) {
        if g.users > 0 {
            return;
        }
        if let (Some(m), Some(s)) = (g.held, g.slot) {
            let t = &self.table;
            // Checked in the order of their cost: most releases have nobody to pass to.
            let keep = |g: &Gate| {
                (g.handoffs < MAX_HANDOFFS
                    && g.first_handoff.is_none_or(|at| at.elapsed() < MAX_KEEP))
                    || t.waiting(s, self.me).is_empty()
            };
            if !g.tickets.is_empty() {
                if keep(g) && g.tickets[0].mode == m && !(m == Mode::Shared && t.writer_waits(s)) {
                    g.users = g.tickets.len() as u32;
                    g.handed_on();
                    self.grant_all(g, wake);
                    return;
                }
            } else if self.local_demand(g) && keep(g) {
                return;
            }
            self.free(g, s);
        }
        if !g.tickets.is_empty() {
            // In this thread, so that whatever the grant does (a task whose loop is gone
            // gives it back) is done when the release returns; else the agent's turn.
            let mode = g.tickets[0].mode;
            if self.enter(g, mode, g.tickets.len() as u32) {
                self.grant_all(g, wake);
            } else {
                self.table.ring(self.me, NEWS_RELEASE | NEWS_AGENT);
            }
        }
    }

    /// Every ticket of `g` entered: mark them granted, to be woken out of the mutex.
    fn grant_all(&self, g: &mut Gate, wake: &mut Vec<Arc<Ticket>>) {
        self.grant(g, |_| true, wake);
    }

    /// The tickets `pick` says entered: mark them granted, to be woken out of the mutex
    /// (a thread sleeping on the doorbell by its ring).
    fn grant(&self, g: &mut Gate, pick: impl Fn(&Ticket) -> bool, wake: &mut Vec<Arc<Ticket>>) {
        let mut own = false;
        g.tickets.retain(|t| {
            if !pick(t) {
                return true;
            }
            // Listed as arriving before the grant its waiter may see (`Arrivals`).
            self.arrivals.add(&g.name, t);
            t.grant();
            own |= t.own;
            wake.push(t.clone());
            false
        });
        if own {
            self.table.ring(self.me, NEWS_RELEASE);
        }
        if g.tickets.is_empty() {
            self.unmark(g);
        }
    }

    /// The tickets are gone: stop saying this client waits for the name.
    fn unmark(&self, g: &mut Gate) {
        let Some(s) = g.slot else { return };
        let t = &self.table;
        if g.marked {
            t.mark_waiting(s, self.me, false);
            g.marked = false;
            // Waiting no more (its tickets were granted, by a take or a local hand-off,
            // or withdrawn): a turn given to this client is over.
            t.end_turn(s, self.me);
        }
        if g.writer {
            g.writer = false;
            if let Err(e) = t.mark_writer(s, false) {
                self.fail(e);
            }
            // Shared requests it held back may go now.
            t.ring_waiting(s, self.me);
        }
    }

    /// Enter `key`'s gate now, for one local holder that just took the name locally.
    fn enter_now(&self, key: &Key, mode: Mode) -> bool {
        self.with_gate(key, |k, g| k.enter(g, mode, 1))
            .unwrap_or(false)
    }

    /// A local hold that entered the gate ended (its local release done).
    fn leave(&self, key: &Key) {
        let mut wake = Vec::new();
        self.with_gate(key, |k, g| {
            debug_assert!(g.users > 0, "BUG: left a gate nobody entered");
            g.users = g.users.saturating_sub(1);
            k.settle(g, &mut wake);
        });
        super::cohort::wake(wake);
    }

    /// A local hold that never entered the gate ended (its local release done).
    fn settle_key(&self, key: &Key) {
        let mut wake = Vec::new();
        self.with_gate(key, |k, g| k.settle(g, &mut wake));
        super::cohort::wake(wake);
    }

    /// Leave a ticket for a local holder that could not enter; the agent enters for it.
    fn register(
        &self,
        key: &Key,
        mode: Mode,
        notify: Notify,
        who: Who,
        since: f64,
    ) -> Option<Arc<Ticket>> {
        let own = matches!(notify, Notify::Thread(_));
        let ticket = Ticket::new(mode, notify, own, who, since);
        self.with_gate(key, |k, g| {
            g.tickets.push(ticket.clone());
            if let Some(s) = k.slot(g) {
                k.mark(g, s);
            }
        })?;
        if !own {
            self.table.ring(self.me, NEWS_AGENT);
        }
        Some(ticket)
    }

    /// A thread's own try at the gate for its ticket (see `Ticket::own`): `None` if it
    /// was granted (now or before) or withdrawn, else how long to sleep at most before
    /// the next try when no ring comes (a dead holder rings nobody; a turn runs out).
    fn enter_for(&self, key: &Key, ticket: &Arc<Ticket>) -> Option<Duration> {
        self.with_gate(key, |k, g| {
            if ticket.is_granted() || !g.tickets.iter().any(|t| Arc::ptr_eq(t, ticket)) {
                return None;
            }
            if k.enter(g, ticket.mode, 1) {
                // This thread is awake: nobody to ring.
                ticket.grant();
                g.tickets.retain(|t| !Arc::ptr_eq(t, ticket));
                if g.tickets.is_empty() {
                    k.unmark(g);
                }
                return None;
            }
            Some(k.retry_in(g))
        })
        .flatten()
    }

    /// How long a ticket of `g` that could not enter may wait before trying again when
    /// no ring comes: until another client's turn runs out, `CRASH_CHECK` at most.
    fn retry_in(&self, g: &Gate) -> Duration {
        let turn = g.slot.and_then(|s| self.table.not_my_turn(s, self.me));
        turn.map_or(CRASH_CHECK, |ms| {
            CRASH_CHECK.min(Duration::from_millis(ms.max(1)))
        })
    }

    /// Take a ticket back (its holder gives up). False if it was granted first: its
    /// holder has entered the gate.
    fn withdraw(&self, key: &Key, ticket: &Arc<Ticket>) -> bool {
        self.with_gate(key, |k, g| {
            if ticket.is_granted() {
                return false;
            }
            g.tickets.retain(|t| !Arc::ptr_eq(t, ticket));
            if g.tickets.is_empty() {
                // Its turn, if it had one, ends here: the others may go.
                k.unmark(g);
                if let Some(s) = g.slot {
                    k.table.ring_waiting(s, k.me);
                }
            }
            true
        })
        .unwrap_or(true)
    }

    /// The agent's round: enter the gates tickets wait for. How long to sleep at most
    /// before the next round if nothing rings (`None`: no ticket waits).
    fn try_tickets(&self) -> Option<Duration> {
        let mut wake = Vec::new();
        let mut next: Option<Duration> = None;
        {
            let mut gates = self.gates();
            if gates.closed || self.forked() {
                return None;
            }
            let mut no_slot = false;
            for g in gates.map.iter_mut() {
                if g.tickets.is_empty() {
                    continue;
                }
                // Threads' tickets are their own (see `Ticket::own`).
                let n = g.tickets.iter().filter(|t| !t.own).count() as u32;
                if n == 0 {
                    continue;
                }
                let mode = g.tickets[0].mode;
                if self.enter(g, mode, n) {
                    self.grant(g, |t| !t.own, &mut wake);
                    continue;
                }
                no_slot |= g.slot.is_none();
                let wait = self.retry_in(g);
                next = Some(next.map_or(wait, |n| n.min(wait)));
            }
            // Tasks' tickets waiting for a slot: as a thread's retry does (`with_gate`).
            // ORDERING: see `with_gate`.
            if no_slot && self.full.load(Ordering::Relaxed) {
                self.make_room(&mut gates, None);
            }
        }
        super::cohort::wake(wake);
        next
    }

    /// This client's holds and waits whose name starts with `prefix`.
    fn local_infos(&self, prefix: &str) -> Vec<Info> {
        let gates = self.gates();
        let tickets = gates.map.iter().map(|g| (&g.name, &g.tickets[..]));
        super::cohort::local_infos(&self.local, prefix, &self.arrivals, tickets)
    }

    /// The agent: publish this client's records when asked.
    fn answer(&self) {
        let me = self.table.client(self.me);
        // ORDERING: SeqCst with the asker's increment before it rings.
        let asked = me.query_asked.load(Ordering::SeqCst);
        if asked == me.query_done.load(Ordering::SeqCst) {
            return;
        }
        let bytes = encode_infos(&self.local_infos(""));
        let area = self.table.records(self.me);
        let len = bytes.len().min(area.len() * 8) / 8 * 8;
        // ORDERING: a seqlock. Odd while writing (Relaxed store, then a Release fence so
        // the data stores come after it); the Release store of the even value publishes
        // the data to a reader's Acquire load.
        let v = me.records_version.load(Ordering::Relaxed);
        me.records_version.store(v | 1, Ordering::Relaxed);
        fence(Ordering::Release);
        for (word, chunk) in area.iter().zip(bytes[..len].chunks(8)) {
            word.store(
                u64::from_le_bytes(chunk.try_into().unwrap()),
                Ordering::Relaxed,
            );
        }
        me.records_len.store(len as u32, Ordering::Relaxed);
        me.records_version
            .store((v | 1).wrapping_add(1), Ordering::Release);
        // ORDERING: SeqCst with the asker's load; the records came before it (Release
        // above), so an asker that sees `asked` done reads this answer or a later one.
        me.query_done.store(asked, Ordering::SeqCst);
        futex_wake(&me.query_done, NEWS_ALL);
    }

    /// Every hold and waiter of every live client whose name starts with `prefix`.
    fn collect(&self, prefix: &str) -> Vec<Info> {
        let mut out = self.local_infos(prefix);
        let t = &self.table;
        let mut asked = Vec::new();
        for c in 0..super::file_table::CLIENTS {
            if c == self.me || !t.alive(c) {
                continue;
            }
            // ORDERING: SeqCst, read by the agent after its doorbell rings.
            let a = t.client(c).query_asked.fetch_add(1, Ordering::SeqCst) + 1;
            t.ring(c, NEWS_AGENT);
            asked.push((c, a));
        }
        let until = Instant::now() + ANSWER_WITHIN;
        for (c, a) in asked {
            let w = t.client(c);
            loop {
                // ORDERING: SeqCst with the agent's store; the records are read under
                // their seqlock.
                let done = w.query_done.load(Ordering::SeqCst);
                if done.wrapping_sub(a) as i32 >= 0 {
                    if let Some(infos) = self.read_records(c) {
                        out.extend(infos.into_iter().filter(|i| i.name.starts_with(prefix)));
                    }
                    break;
                }
                let now = Instant::now();
                if now >= until || !t.alive(c) {
                    break;
                }
                futex_wait(
                    &w.query_done,
                    done,
                    Some((until - now).min(CRASH_CHECK)),
                    NEWS_ALL,
                );
            }
        }
        out.sort_by(|a, b| a.name.cmp(&b.name).then(a.since.total_cmp(&b.since)));
        out
    }

    /// Client `c`'s published records (a consistent copy, or `None`).
    fn read_records(&self, c: usize) -> Option<Vec<Info>> {
        let w = self.table.client(c);
        let area = self.table.records(c);
        for _ in 0..100 {
            // ORDERING: the seqlock's reader side (see `answer`).
            let v1 = w.records_version.load(Ordering::Acquire);
            if v1 & 1 == 1 {
                std::thread::yield_now();
                continue;
            }
            let len = (w.records_len.load(Ordering::Relaxed) as usize).min(area.len() * 8);
            let bytes: Vec<u8> = area[..len / 8]
                .iter()
                .flat_map(|x| x.load(Ordering::Relaxed).to_le_bytes())
                .collect();
            fence(Ordering::Acquire);
            if w.records_version.load(Ordering::Relaxed) == v1 {
                // ORDERING: the pid was stored when the client joined, before its byte
                // was taken (which `alive` saw).
                return Some(decode_infos(&bytes, w.pid.load(Ordering::Relaxed)));
            }
        }
        None
    }

    /// End this client's part: free every kernel hold and pin, fail its tickets.
    fn shutdown(&self) {
        let mut wake = Vec::new();
        {
            let mut gates = self.gates();
            if gates.closed {
                return;
            }
            gates.closed = true;
            if self.forked() {
                return;
            }
            for mut g in std::mem::take(&mut gates.map) {
                let Some(s) = g.slot else {
                    wake.append(&mut g.tickets);
                    continue;
                };
                if g.held.is_some() {
                    self.free(&mut g, s);
                }
                wake.append(&mut g.tickets);
                self.unmark(&mut g);
                if let Err(e) = self.table.unpin(s) {
                    self.fail(e);
                }
            }
            self.table.leave(self.me);
            // Threads at a gate sleep on the doorbell, not on their parkers.
            self.table.ring(self.me, NEWS_RELEASE);
        }
        // Woken, they find the manager closed and give up.
        super::cohort::wake(wake);
    }
}

/// The agent thread of one manager: enters gates for tickets, answers queries.
fn agent(k: Arc<Keeper>) {
    let bell = &k.table.client(k.me).doorbell;
    loop {
        // ORDERING: read before the round, so a ring during it makes the wait return.
        let seen = bell.load(Ordering::SeqCst);
        if k.stop.load(Ordering::SeqCst) {
            return;
        }
        k.answer();
        k.answer_trim();
        // Releases are news for the agent only while a task's ticket waits.
        let wait = k.try_tickets();
        let news = if wait.is_some() { NEWS_ALL } else { NEWS_AGENT };
        futex_wait(bell, seen, wait, news);
    }
}

/// Join the scope of directory `dir` (made if missing): a manager of the file scope, one
/// client of the directory's locks.
pub(crate) fn connect(dir: &std::path::Path) -> Result<Arc<dyn Session>, String> {
    let table = Arc::new(Table::open(dir)?);
    let me = table.join()?;
    // Requests made before this manager existed are not its to answer.
    let table_trims = table.trims();
    let fences = table.clone();
    let local = MemoryClient::new(Arc::new(MemoryScope::private(move |_: &Key| {
        fences.next_fence()
    })));
    let keeper = Arc::new(Keeper {
        table,
        me,
        local,
        arrivals: super::cohort::Arrivals::new(),
        gates: Mutex::new(Gates::default()),
        stop: AtomicBool::new(false),
        broken: OnceLock::new(),
        generation: super::fork::generation(),
        agent: Mutex::new(None),
        full: AtomicBool::new(false),
        trims_seen: AtomicU64::new(table_trims),
    });
    let k = keeper.clone();
    let agent = std::thread::Builder::new()
        .name("ctxlock-file-agent".to_owned())
        .spawn(move || agent(k))
        .map_err(|e| format!("cannot start the lock agent thread: {e}"))?;
    *keeper.agent.lock().unwrap_or_else(|e| e.into_inner()) = Some(agent);
    KEEPERS.add(&keeper);
    Ok(Arc::new(Cohort { keeper }))
}

impl Gatekeeper for Keeper {
    fn made_before_fork(&self) -> bool {
        self.forked()
    }

    fn local(&self) -> &Arc<MemoryClient> {
        &self.local
    }

    fn arrivals(&self) -> &super::cohort::Arrivals {
        &self.arrivals
    }

    fn keepers() -> &'static Keepers<Self> {
        &KEEPERS
    }

    fn same_scope(&self, other: &Self) -> bool {
        self.table.same_file(&other.table)
    }

    fn enter_now(&self, key: &Key, mode: Mode) -> bool {
        Keeper::enter_now(self, key, mode)
    }

    fn register(
        &self,
        key: &Key,
        mode: Mode,
        notify: Notify,
        who: Who,
        since: f64,
        _wake: &mut Vec<Arc<Ticket>>,
    ) -> Option<Arc<Ticket>> {
        // The agent enters for the ticket (or its thread): nothing granted here.
        Keeper::register(self, key, mode, notify, who, since)
    }

    fn withdraw(&self, key: &Key, ticket: &Arc<Ticket>) -> bool {
        Keeper::withdraw(self, key, ticket)
    }

    fn leave(&self, key: &Key) {
        Keeper::leave(self, key)
    }

    fn settle_key(&self, key: &Key) {
        Keeper::settle_key(self, key)
    }

    /// A thread at the gate sleeps on its manager's doorbell, which every release of a
    /// name it waits for rings, and tries to enter for itself when woken (or after
    /// `CRASH_CHECK`, which also bounds how long a token's cancellation, which unparks
    /// the thread, may take to be seen).
    fn park_at_gate(&self, key: &Key, ticket: &Arc<Ticket>, until: Option<Instant>) {
        let bell = &self.table.client(self.me).doorbell;
        // ORDERING: read before the try, so a ring after it ends the sleep.
        let seen = bell.load(Ordering::SeqCst);
        let Some(most) = self.enter_for(key, ticket) else {
            return;
        };
        let now = Instant::now();
        let sleep = until.map_or(most, |u| most.min(u.saturating_duration_since(now)));
        if !sleep.is_zero() {
            futex_wait(bell, seen, Some(sleep), NEWS_RELEASE);
        }
    }

    fn collect(&self, prefix: &str) -> Vec<Info> {
        Keeper::collect(self, prefix)
    }

    fn shutdown(&self) {
        Keeper::shutdown(self);
        self.stop_agent();
    }

    fn dropped(&self) {
        self.stop_agent();
    }

    fn failure(&self) -> Option<Failure> {
        if self.forked() {
            return Some(super::cohort::forked_failure());
        }
        self.broken.get().cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn published_records_read_back_and_damaged_ones_end_the_list() {
        let infos = vec![
            Info {
                name: Arc::from("invoice:42"),
                mode: Mode::Exclusive,
                held: true,
                who: Who {
                    thread: 7,
                    task: Some(Arc::from("Task-1")),
                },
                pid: 1,
                host: None,
                since: 12.5,
            },
            Info {
                name: Arc::from("é"),
                mode: Mode::Shared,
                held: false,
                who: Who {
                    thread: 9,
                    task: None,
                },
                pid: 1,
                host: None,
                since: 13.0,
            },
        ];
        let bytes = encode_infos(&infos);
        assert_eq!(bytes.len() % 8, 0);
        let back = decode_infos(&bytes, 42);
        assert_eq!(back.len(), 2);
        assert_eq!(&*back[0].name, "invoice:42");
        assert_eq!(back[0].who.task.as_deref(), Some("Task-1"));
        assert!(back[0].held && back[0].mode == Mode::Exclusive && back[0].since == 12.5);
        assert_eq!(
            (&*back[1].name, back[1].who.thread, back[1].pid),
            ("é", 9, 42)
        );
        assert!(back[1].who.task.is_none() && !back[1].held && back[1].mode == Mode::Shared);
        // A length running past the end: the list ends there, nothing is made up.
        let mut cut = bytes.clone();
        cut.truncate(30);
        assert!(decode_infos(&cut, 1).is_empty());
        assert!(decode_infos(&[0xff; 64], 1).len() <= 1);
    }
}
