//! The scope of many machines (`LockManager("postgresql://…")`): PostgreSQL's
//! session-level advisory locks behind each manager's cohort (`cohort.rs`).
//!
//! - **The server owns each manager's hold of a name**: an advisory lock on the name's
//!   64-bit key (`key_of`), shared or exclusive, held by one of the manager's own
//!   sessions, and freed by the server when that session ends, whatever the way.
//! - **Connections.** A manager owns its sessions; none comes from or goes to a pool of
//!   the application. The *main* session takes names that are free (`pg_try_advisory_lock*`,
//!   one round trip) and gives them back; each name that must be waited for gets one
//!   waiting session of its own (at most one per name per manager), run by a short-lived
//!   thread: the wait is a blocking `pg_advisory_lock*` in the server's queue, which keeps
//!   the server's order (and its rule that a queued exclusive request holds later shared
//!   ones back). A granted wait keeps its hold on that session until the name is let go;
//!   idle waiting sessions are kept for the next wait.
//! - **Giving up**: a waiter that gives up (deadline, token, task cancelled) withdraws
//!   its ticket; when the last ticket of a name is withdrawn the server's wait is
//!   cancelled by `pg_cancel_backend` on the main session, under the gates' mutex and
//!   only while the wait's statement runs there (`cancel_wait`): the signal is sent
//!   before that session can run anything else, so it never cancels a later statement
//!   (the protocol's cancel request, sent from another thread, could arrive that late).
//!   It names the session's backend by pid and start time: a later backend that was
//!   given the same pid is not signalled, unless it got the pid within that one
//!   statement (between its read of the activity and its signal), or the server showed
//!   no start time.
//!   Whatever the outcome of a wait that was cancelled or failed, its session then runs
//!   `pg_advisory_unlock_all()` (a waiting session holds nothing else), or is closed if
//!   that fails: a grant that raced the cancel is never kept.
//! - **Cohort**: the hold is passed on among the manager's threads and tasks without a
//!   round trip for up to `MAX_HANDOFFS` hand-offs and `MAX_KEEP` from the server's
//!   grant (a batch); then one round trip asks whether another client waits for the name
//!   (`pg_locks`) and whether the session holding it still does: if another waits it goes
//!   back to the server, where the others are queued ahead of this manager's next
//!   request; if the session lost it (a waiting session that ended: the round trip runs
//!   on the main session, which may live on), the hold is lost (`hold_gone`); else a new
//!   batch starts.
//! - **Fences** come from the sequence `ctxlock_fence` in the grant's round trip:
//!   `fence = value << FENCE_SHIFT | n` for the n-th local grant of that server grant.
//! - **Lost holds**: a watchdog pings every session that holds a name every
//!   `PING_EVERY`; a session found dead (terminated, server gone, network lost; TCP
//!   keepalives bound the silent case) ends the local holds of its names, each `lost`
//!   token cancelled with a `BackendError`. The next acquire has a thread connect the
//!   main session again (`main_for_try`), and meanwhile waits on a session of its own.
//! - **Introspection** (`query()`, `statistics()`) asks every other manager: each listens
//!   on a session of its own (`LISTEN ctxlock_ask_<its backend id>`) and answers with its
//!   records (the file scope's codec, hex, in notifications). Sessions that do not answer
//!   show as `pg_locks` has them, turned into names by `ctxlock_names` (key → name,
//!   written the first time a manager uses a name) and into owners by their
//!   `application_name` ("ctxlock host:pid/n").

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use hashbrown::HashTable;
use postgres::fallible_iterator::FallibleIterator;
use postgres::{CancelToken, Client, SimpleQueryMessage, Statement};

use super::cohort::{decode_infos, encode_infos, Cohort, Gatekeeper, Keepers, Ticket};
use super::memory::{MemoryClient, MemoryScope};
use super::named::{Failure, Info, Key, Session, Who};
use super::pg_url::Target;
use super::raw::Notify;
use super::waiter::Mode;

/// Local hand-offs of one server hold in a batch (see the module's docs).
const MAX_HANDOFFS: u32 = 256;
/// How long a batch lasts at most from the server's grant or the last check.
const MAX_KEEP: Duration = Duration::from_millis(2);
/// How often the watchdog pings each session that holds a name.
const PING_EVERY: Duration = Duration::from_secs(1);
/// How long a ping may take before its session counts as lost.
const PING_TIMEOUT: Duration = Duration::from_secs(5);
/// After a failed connection, how long acquires fail at once before one tries again.
const RETRY_AFTER: Duration = Duration::from_secs(1);
/// Bits of a fence below the sequence's value: local grants of one server grant.
const FENCE_SHIFT: u32 = 20;
/// How long `query()` and `statistics()` wait for the other managers' answers.
const ANSWER_WITHIN: Duration = Duration::from_secs(1);
/// Bytes of records per answer notification (hex: twice that, under the server's 8000).
const ANSWER_CHUNK: usize = 3900;
/// Managers made in this process: each one's sessions say which manager they are.
static MANAGERS: AtomicU64 = AtomicU64::new(0);

/// A backend's start time in `pg_stat_activity` (`backend_start`) as `Conn::started`
/// keeps it: whole microseconds, as the server computes them, so that two reads of one
/// backend compare equal.
const STARTED: &str = "(extract(epoch FROM backend_start) * 1000000)::int8";
/// How long a waiter that gives up waits at most for the server's wait to end.
const WITHDRAW_WAIT: Duration = Duration::from_secs(1);
/// Idle gates (names used and let go) a manager keeps.
const IDLE_GATES: usize = 64;
/// Idle waiting sessions a manager keeps for the next waits.
const IDLE_SESSIONS: usize = 4;

/// The schema objects a manager needs, made by the first manager of a database (under a
/// transaction-level advisory lock, so that two first managers do not race).
const SETUP: &str = "SELECT pg_advisory_xact_lock(7809643524617528165); \
     CREATE SEQUENCE IF NOT EXISTS ctxlock_fence; \
     CREATE TABLE IF NOT EXISTS ctxlock_names \
     (key bigint NOT NULL, name text NOT NULL, PRIMARY KEY (key, name))";

/// The advisory key of a name: FNV-1a (64 bits) of `ctxlock:` and the name's UTF-8
/// bytes, as a signed bigint. Stable across processes, machines and versions (it is
/// what other clients agree on). Two names with one key only share a lock (more
/// contention), never break exclusion; a key can also meet an application's own
/// advisory locks on a number, which the prefix makes unlikely.
pub fn key_of(name: &str) -> i64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in b"ctxlock:".iter().chain(name.as_bytes()) {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h as i64
}

/// `pg_locks` shows a bigint key as two oids: its high and low 32 bits.
fn key_parts(key: i64) -> (i64, i64) {
    let k = key as u64;
    ((k >> 32) as i64, (k & 0xffff_ffff) as i64)
}

/// A session of the manager and what it knows of the server.
struct Conn {
    client: Client,
    /// Its backend's process id (`pg_locks.pid`).
    pid: i32,
    /// When its backend started, in microseconds since 1970 (0: unknown): with `pid`, a
    /// backend the server cannot have had before nor have again (a pid is reused only by
    /// a later backend), so that a signal meant for it does not reach another
    /// (`cancel_wait`).
    started: i64,
}

/// The main session and its prepared statements.
struct Main {
    conn: Conn,
    try_x: Statement,
    try_s: Statement,
    unlock_x: Statement,
    unlock_s: Statement,
    others: Statement,
    name: Statement,
    /// Cancel a waiting session's statement if one runs (see `cancel_wait`).
    cancel: Statement,
}

/// Which session holds a gate's server hold.
enum On {
    Main,
    /// A waiting session whose wait was granted.
    Own(Box<Conn>),
}

/// This manager's server hold of one name.
///
/// # Invariants
/// - `held` is the hold on session `on` (`Some` together); `users` counts the local
///   holds that entered it. `held` is `Some` with `users == 0` only while a local holder
///   that has not entered yet will (or will give its hold back and settle).
/// - `tickets` are local holders (all of one mode) that could not enter; `waiting` says a
///   thread runs a server wait for them (at most one per gate); `wait` is its session
///   while the wait's statement runs, and only then (set and cleared under the gates'
///   mutex, before and after the statement).
/// - `stale` counts the local holds that entered a server hold of the gate since lost
///   (`lost_hold`) and have not gone yet. Each departure (a `leave`, or an end by `lose`)
///   counts off `stale` first, then `users` (`depart`): a departure cannot tell which
///   hold it was, and this way `users` is never below the holds that entered the current
///   server hold (at worst above it, which only keeps that hold a while longer). A
///   stale holder may record its fence under a later server hold (a woken ticket records
///   after its wake-up), so a held gate with `stale > 0` is not given back (`settle`).
struct Gate {
    name: Arc<str>,
    hash: u64,
    key: i64,
    held: Option<Mode>,
    on: Option<On>,
    users: u32,
    /// Local hand-offs (and joins) in this batch, and when the batch began.
    handoffs: u32,
    batch: Instant,
    tickets: Vec<Arc<Ticket>>,
    waiting: bool,
    wait: Option<Waiting>,
    /// The wait's statement runs (until it returned and its outcome was dealt with:
    /// a grant taken up, or a raced grant given back).
    statement: bool,
    /// A thread ends that wait for `grant_all` (`end_wait`): one at most.
    ending: bool,
    stale: u32,
}

/// The session of a wait whose statement runs, as `cancel_wait` reaches it, and the
/// mode it waits for.
#[derive(Clone)]
struct Waiting {
    pid: i32,
    /// See `Conn::started`.
    started: i64,
    token: CancelToken,
    mode: Mode,
}

impl Gate {
    fn idle(&self) -> bool {
        self.users == 0
            && self.stale == 0
            && self.held.is_none()
            && self.tickets.is_empty()
            && !self.waiting
    }

    /// Its server hold was lost (its session is gone, `on` taken by the caller): the
    /// holds that entered it are stale now, and end by `lose` if not by their own leave.
    /// Returns the key and the last fence that hold can give (`Fences::last`): `lose`
    /// ends this manager's holds of the name up to it, not those of a later server hold.
    fn lost_hold(&mut self, fences: &Fences) -> (Key, u64) {
        self.held = None;
        self.stale += self.users;
        self.users = 0;
        fences.lose(self.hash);
        (
            Key::with_hash(self.name.clone(), self.hash),
            fences.last(self.hash),
        )
    }

    /// One local hold that entered the gate went (see `stale`).
    fn depart(&mut self) {
        if self.stale > 0 {
            self.stale -= 1;
        } else {
            self.users = self.users.saturating_sub(1);
        }
    }
}

struct Gates {
    map: HashTable<Gate>,
    /// `None` until (re)connected, after a loss or before the first use.
    main: Option<Main>,
    /// Idle waiting sessions, holding nothing.
    idle: Vec<Conn>,
    /// The backend ids of every session of this manager (main, waiting, holding).
    pids: Vec<i32>,
    /// Keys whose name this manager wrote to `ctxlock_names`.
    named: std::collections::HashSet<i64>,
    /// Why the last connection failed, and when: acquires fail at once until
    /// `RETRY_AFTER` later.
    down: Option<(Failure, Instant)>,
    /// A thread connects the main session again (`main_for_try`).
    connecting: bool,
    /// Set once by `shutdown`: no gate is entered again.
    closed: bool,
}

/// The answers to one ask so far: per answering manager (its listening session's
/// backend id), the records' bytes and whether they are complete.
type Answers = HashMap<i32, (Vec<u8>, bool)>;

/// The last fence a server grant whose sequence value is `base` can give.
fn last_of(base: u64) -> u64 {
    base << FENCE_SHIFT | ((1 << FENCE_SHIFT) - 1)
}

/// Per name, the fence of the current server grant, the local grants drawn from it, and
/// whether that grant was lost; its own mutex (a leaf: taken under a shard's mutex by the
/// local scope's fence source, and under the gates' by a grant).
#[derive(Default)]
struct Fences(Mutex<HashMap<u64, (u64, u64, bool)>>);

impl Fences {
    fn lock(&self) -> MutexGuard<'_, HashMap<u64, (u64, u64, bool)>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn start(&self, hash: u64, value: i64) {
        self.lock().insert(hash, (value.max(0) as u64, 0, false));
    }

    /// The current server grant of `hash` was lost (`Gate::lost_hold`).
    fn lose(&self, hash: u64) {
        if let Some(e) = self.lock().get_mut(&hash) {
            e.2 = true;
        }
    }

    /// If `fence` is of a server grant that was lost, and no later grant of `hash`
    /// started: the last fence that grant can give (see `last`).
    fn lost_through(&self, hash: u64, fence: u64) -> Option<u64> {
        let map = self.lock();
        let &(base, _, lost) = map.get(&hash)?;
        (lost && fence >> FENCE_SHIFT == base).then_some(last_of(base))
    }

    /// The last fence the current server grant of `hash` can give: its holds' fences
    /// are at most this, and every later grant's are above it (the sequence grows).
    /// A holder that entered a hold records its fence a little later (a woken ticket,
    /// after its wake-up), so this is the grant's last possible fence, not its last given.
    fn last(&self, hash: u64) -> u64 {
        self.lock()
            .get(&hash)
            .map_or(0, |&(base, _, _)| last_of(base))
    }

    fn next(&self, hash: u64) -> u64 {
        let mut map = self.lock();
        let (base, n, _) = map.entry(hash).or_insert((0, 0, false));
        // At most ~2^20 local grants of one server grant: far more than a batch.
        *n = (*n + 1).min((1 << FENCE_SHIFT) - 1);
        *base << FENCE_SHIFT | *n
    }
}

/// What a manager's threads, its wait threads and its watchdog share.
pub(crate) struct Keeper {
    /// This machine's name, as the other managers' sessions say theirs.
    host: String,
    /// This keeper, for the threads it starts.
    this: std::sync::Weak<Keeper>,
    target: Arc<Target>,
    app: String,
    local: Arc<MemoryClient>,
    /// Holds granted to its local holders that they have not taken up yet.
    arrivals: super::cohort::Arrivals,
    fences: Arc<Fences>,
    gates: Mutex<Gates>,
    /// Wake-ups of tasks stop once the embedding finalizes (see `stop_agents`): read-held
    /// while waking, write-taken to stop.
    wakes: RwLock<bool>,
    stop: AtomicBool,
    watchdog: Mutex<Option<JoinHandle<()>>>,
    bell: (Mutex<()>, Condvar),
    /// Notified (with `gates`) when a wait's statement is done (`Gate::statement`).
    statement_done: Condvar,
    /// Answers of other managers to this one's asks (`collect`), and their bell.
    answers: Mutex<HashMap<u64, Answers>>,
    answered: Condvar,
    asks: AtomicU64,
    /// The backend id of this manager's listening session (its answer channel), once
    /// connected.
    listening: Mutex<Option<i32>>,
    listener: Mutex<Option<JoinHandle<()>>>,
    generation: u64,
}

/// Every manager's keeper, so that their threads stop before the interpreter finalizes.
static KEEPERS: Keepers<Keeper> = Keepers::new();

/// Stop every watchdog of this process and every wake-up its wait threads would do
/// (see `file::stop_agents` for why).
pub fn stop_agents() {
    for k in KEEPERS.take() {
        k.stop_helpers();
    }
}

/// An error in words: the server's message and code, or the client's error and its cause
/// (`Display` alone says only "db error" or "error communicating with the server").
fn describe(e: &postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        return format!("{} ({})", db.message(), db.code().code());
    }
    match std::error::Error::source(e) {
        Some(cause) => format!("{e}: {cause}"),
        None => e.to_string(),
    }
}

/// Close sessions off the calling thread: closing one waits for the server to answer
/// (`Client`'s drop ends the session politely), which a stalled server never does.
fn discard(conns: Vec<Conn>) {
    if conns.is_empty() {
        return;
    }
    let spawned = std::thread::Builder::new()
        .name("ctxlock-pg-close".to_owned())
        .spawn(move || drop(conns));
    // Without a thread, leaking them is the one way not to wait (their sockets stay
    // open until the process ends; the server frees their locks when it notices).
    if let Err(e) = spawned {
        std::mem::forget(e);
    }
}

/// Run `sql` on a session of this manager: a second time if a protocol cancel request
/// meant for a wait that had just ended (sent when the main session was missing, see
/// `cancel_wait`) cancelled it instead.
fn run(conn: &mut Conn, sql: &str) -> Result<(), postgres::Error> {
    match conn.client.simple_query(sql) {
        Err(e) if db_error_code(&e) == Some("57014") => conn.client.simple_query(sql).map(drop),
        r => r.map(drop),
    }
}

fn db_error_code(e: &postgres::Error) -> Option<&str> {
    e.code().map(|c| c.code())
}

fn this_host() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: `buf` is writable for its length; gethostname NUL-terminates within it
    // or truncates, and the last byte stays 0 either way.
    let ok = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len() - 1) } == 0;
    let end = buf.iter().position(|&b| b == 0).unwrap_or(0);
    if ok && end > 0 {
        String::from_utf8_lossy(&buf[..end]).into_owned()
    } else {
        "localhost".to_owned()
    }
}

impl Keeper {
    fn gates(&self) -> MutexGuard<'_, Gates> {
        self.gates.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn forked(&self) -> bool {
        super::fork::generation() != self.generation
    }

    fn error(&self, what: &str, e: &postgres::Error) -> Failure {
        Failure(format!(
            "{what} on {}: {}",
            self.target.display(),
            describe(e)
        ))
    }

    /// A new session, or why not (also kept as the manager's `down` state by callers).
    fn open(&self) -> Result<Conn, Failure> {
        let mut client = self.target.connect(&self.app).map_err(Failure)?;
        // A session waiting for a lock does not read its socket: without this setting
        // (PostgreSQL 14 and later) a client killed while it waits keeps its place in the
        // queue (holding new shared requests back behind its exclusive one) until the lock
        // is granted to it.
        let row = client
            .query_one(
                &format!(
                    "SELECT pg_backend_pid(), coalesce((SELECT {STARTED} FROM pg_stat_activity \
                     WHERE pid = pg_backend_pid()), 0), CASE WHEN \
                     current_setting('server_version_num')::int >= 140000 THEN \
                     set_config('client_connection_check_interval', '500ms', false) END"
                ),
                &[],
            )
            .map_err(|e| self.error("cannot start a session", &e))?;
        Ok(Conn {
            client,
            pid: row.get(0),
            started: row.get(1),
        })
    }

    fn prepare(&self, mut conn: Conn) -> Result<Main, Failure> {
        let db = "(SELECT oid FROM pg_database WHERE datname = current_database())";
        let c = &mut conn.client;
        let mut p = |sql: &str| {
            c.prepare(sql)
                .map_err(|e| self.error("cannot prepare the lock statements", &e))
        };
        let try_x = p("SELECT CASE WHEN pg_try_advisory_lock($1) \
                       THEN nextval('ctxlock_fence') ELSE -1 END")?;
        let try_s = p("SELECT CASE WHEN pg_try_advisory_lock_shared($1) \
                       THEN nextval('ctxlock_fence') ELSE -1 END")?;
        let unlock_x = p("SELECT pg_advisory_unlock($1)")?;
        let unlock_s = p("SELECT pg_advisory_unlock_shared($1)")?;
        // Whether another client waits for the key, and whether the session holding it
        // for this manager (pid $4, started $5, see `Conn::started`) still does: a
        // waiting session that ended lost its hold, and nobody may be handed it again
        // (another client may hold the name by now, with a later fence).
        let others = p(&format!(
            "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' \
             AND database = {db} AND classid = $1::int8::oid AND objid = $2::int8::oid \
             AND objsubid = 1 AND NOT granted AND pid <> ALL($3)), \
             EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' \
             AND database = {db} AND classid = $1::int8::oid AND objid = $2::int8::oid \
             AND objsubid = 1 AND granted AND pid = $4) \
             AND ($5::int8 = 0 OR EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $4 \
             AND (backend_start IS NULL OR {STARTED} = $5::int8))), \
             nextval('ctxlock_fence')"
        ))?;
        let name = p("INSERT INTO ctxlock_names (key, name) VALUES ($1, $2) \
                      ON CONFLICT DO NOTHING")?;
        // Signal the session, and say whether it was running a statement just before: a
        // session between statements ignores the signal (so a wait not yet sent would go
        // on uncancelled). The state is read first (the materialized scan reads the
        // activity snapshot before the signal goes); no row: the session is gone (its
        // backend ended, even if a later one has its pid: the start time tells them
        // apart). A start time the reader may not see (another role's session) is no
        // reason to skip the signal: the server refuses it then, and the caller sends the
        // protocol's cancel. A server that does not track activities never says "active":
        // the caller then signals again until the wait ends.
        let cancel = p(&format!(
            "WITH s AS MATERIALIZED (SELECT state FROM pg_stat_activity WHERE pid = $1 \
             AND ($2::int8 = 0 OR backend_start IS NULL OR {STARTED} = $2::int8)) \
             SELECT s.state = 'active', pg_cancel_backend($1) FROM s"
        ))?;
        Ok(Main {
            conn,
            try_x,
            try_s,
            unlock_x,
            unlock_s,
            others,
            name,
            cancel,
        })
    }

    /// The main session for an acquire's try: `None` while there is none. Then a thread
    /// connects it again (unless the manager is `down` for a while): a try does not wait
    /// for a connection, which a server that accepts and never answers would hold for
    /// `connect_timeout`, past the acquire's deadline and token, and, on an event loop's
    /// thread, the loop with it (with the gates' mutex, every other acquire of the
    /// manager too). Until it is back, acquires wait on sessions of their own (`serve`),
    /// within their deadlines.
    fn main_for_try<'a>(&self, gates: &'a mut Gates) -> Option<&'a mut Main> {
        let start = gates.main.is_none() && !gates.is_down() && !gates.connecting && !gates.closed;
        // (Only then the `Arc`: its count is an atomic update.)
        if let Some(me) = start.then(|| self.me()).flatten() {
            gates.connecting = true;
            let spawned = std::thread::Builder::new()
                .name("ctxlock-pg-connect".to_owned())
                .spawn(move || me.reconnect());
            if spawned.is_err() {
                gates.connecting = false;
            }
        }
        gates.main.as_mut()
    }

    /// The thread of `main_for_try`.
    fn reconnect(&self) {
        let made = self.open().and_then(|c| self.prepare(c));
        self.gates().connecting = false;
        self.install(made);
    }

    /// For `query()`, which has no deadline: connect the main session now if there is
    /// none (and the manager is not down), out of the gates' mutex, which every acquire
    /// of the manager takes.
    fn ensure_main(&self) {
        {
            let gates = self.gates();
            if gates.main.is_some() || gates.is_down() || gates.closed || self.forked() {
                return;
            }
        }
        self.install(self.open().and_then(|c| self.prepare(c)));
    }

    /// A main session just made (or why not), unless one came meanwhile.
    fn install(&self, made: Result<Main, Failure>) {
        let mut gates = self.gates();
        let extra = match made {
            Ok(m) if gates.main.is_none() && !gates.closed => {
                gates.pids.push(m.conn.pid);
                gates.main = Some(m);
                gates.down = None;
                None
            }
            Ok(m) => Some(m.conn),
            Err(f) => {
                gates.down = Some((f, Instant::now()));
                None
            }
        };
        drop(gates);
        discard(extra.into_iter().collect());
    }

    /// The main session failed: every hold on it is lost. Returns the names whose local
    /// holds must end (out of the mutex, `lose`).
    fn main_failed(&self, gates: &mut Gates) -> Vec<(Key, u64)> {
        let mut lost = Vec::new();
        if let Some(m) = gates.main.take() {
            gates.pids.retain(|&p| p != m.conn.pid);
            // Closing it ends the session: whatever the server still holds for it goes.
            discard(vec![m.conn]);
        }
        for g in gates.map.iter_mut() {
            if matches!(g.on, Some(On::Main)) {
                g.on = None;
                lost.push(g.lost_hold(&self.fences));
            }
        }
        // The manager is not down for that: the next statement connects again (only a
        // failed connection marks it down).
        lost
    }

    /// End the local holds of names whose server hold was lost (those with a fence up to
    /// the one given with the name: the holds of that server hold), then let their local
    /// waiters try again.
    fn lose(&self, keys: Vec<(Key, u64)>, why: &Failure) {
        self.lose_recording(keys, why, None)
    }

    /// `lose`, from the acquire that is recording the hold with fence `being_recorded`
    /// (see `MemoryClient::end_holds`).
    fn lose_recording(&self, keys: Vec<(Key, u64)>, why: &Failure, being_recorded: Option<u64>) {
        // Cancelling `lost` tokens runs their callbacks (the embedding's too): not once
        // the embedding finalizes (see `wake`).
        let stopped = self.wakes.read().unwrap_or_else(|e| e.into_inner());
        if *stopped {
            return;
        }
        let reason: super::cancel::Reason = Arc::new(why.clone());
        // The holds handed over before the loss: ending the holds may hand a name on to
        // a task whose new server hold is not lost.
        let handed: Vec<Arc<Ticket>> = keys
            .iter()
            .flat_map(|(key, _)| self.arrivals.of_name(key.name()))
            .collect();
        let ended: Vec<usize> = keys
            .iter()
            .map(|(key, through)| self.local.end_holds(key, &reason, *through, being_recorded))
            .collect();
        // (`settle_key` reads `wakes` again: a second read under a waiting writer
        // would deadlock.)
        drop(stopped);
        self.arrivals.forget(&handed);
        for ((key, _), n) in keys.iter().zip(ended) {
            let mut wake = Vec::new();
            self.with_gate(key, |k, gates, hash| {
                let g = gate(gates, hash, key.name());
                for _ in 0..n {
                    g.depart();
                }
                k.settle(gates, hash, key.name(), &mut wake)
            });
            self.wake(wake);
        }
    }

    fn with_gate<T>(&self, key: &Key, f: impl FnOnce(&Self, &mut Gates, u64) -> T) -> Option<T> {
        let mut gates = self.gates();
        if gates.closed || self.forked() {
            return None;
        }
        let name = key.name();
        let hash = key.hash();
        if gates.map.find(hash, |g| *g.name == *name).is_none() {
            gates.map.insert_unique(
                hash,
                Gate {
                    name: key.to_arc(),
                    hash,
                    key: key_of(name),
                    held: None,
                    on: None,
                    users: 0,
                    handoffs: 0,
                    batch: Instant::now(),
                    tickets: Vec::new(),
                    waiting: false,
                    wait: None,
                    statement: false,
                    ending: false,
                    stale: 0,
                },
                |g| g.hash,
            );
        }
        let out = f(self, &mut gates, hash);
        if gates.map.len() > IDLE_GATES {
            if let Ok(e) = gates.map.find_entry(hash, |g| *g.name == *name) {
                if e.get().idle() {
                    e.remove();
                }
            }
        }
        Some(out)
    }

    /// Enter a gate for `n` local holders in `mode`: join the server hold, or take it
    /// with a try. Lost holds found on the way are returned in `lost`.
    fn enter(&self, gates: &mut Gates, hash: u64, name: &str, mode: Mode, n: u32) -> bool {
        let g = gate(gates, hash, name);
        match g.held {
            // (With stale holders, as with users: see `settle`.)
            Some(m) if g.users > 0 || g.stale > 0 => {
                // Only readers join readers, and not past a batch while another client
                // waits (an exclusive request would wait behind a stream of local readers).
                if m == Mode::Shared && mode == Mode::Shared && self.may_keep(gates, hash, name) {
                    let g = gate(gates, hash, name);
                    g.users += n;
                    g.handoffs += 1;
                    return true;
                }
                return false;
            }
            Some(m) => {
                // Kept for a local holder: its turn, unless the batch is over and another
                // client waits.
                if m == mode && self.may_keep(gates, hash, name) {
                    let g = gate(gates, hash, name);
                    g.users = n;
                    g.handoffs += 1;
                    return true;
                }
                self.free(gates, hash, name);
            }
            None => {}
        }
        // A server wait of this manager may be queued for the name: the try still goes
        // first (the server refuses it while that wait, or anyone's, is queued), and a
        // wait granted after it gives its extra hold back (`granted`).
        let key = gate(gates, hash, name).key;
        // Twice at most: a main session that died while idle (terminated, a server
        // restart) is found by its first statement, and a new one takes its place.
        for _ in 0..2 {
            match self.try_on_main(gates, key, name, mode) {
                Ok(None) => return false,
                Ok(Some(fence)) => {
                    self.fences.start(hash, fence);
                    let g = gate(gates, hash, name);
                    g.held = Some(mode);
                    g.on = Some(On::Main);
                    g.users = n;
                    g.handoffs = 0;
                    g.batch = Instant::now();
                    return true;
                }
                Err(e) => {
                    let f = self.error("cannot take the lock", &e);
                    let lost = self.main_failed(gates);
                    self.defer_loss(lost, f);
                    if e.code().is_some() {
                        // The server refused the statement: no new session will do better.
                        return false;
                    }
                }
            }
        }
        false
    }

    /// One try for `key` on the main session (connected now if need be): its fence if
    /// taken, `None` if not (or no session can be had).
    fn try_on_main(
        &self,
        gates: &mut Gates,
        key: i64,
        name: &str,
        mode: Mode,
    ) -> Result<Option<i64>, postgres::Error> {
        if self.main_for_try(gates).is_none() {
            return Ok(None);
        }
        if !gates.named.contains(&key) {
            if gates.named.len() > 1 << 16 {
                gates.named.clear();
            }
            let main = gates.main.as_mut().expect("connected above");
            main.conn.client.execute(&main.name, &[&key, &name])?;
            gates.named.insert(key);
        }
        let main = gates.main.as_mut().expect("connected above");
        let stmt = if mode == Mode::Shared {
            &main.try_s
        } else {
            &main.try_x
        };
        let fence: i64 = main.conn.client.query_one(stmt, &[&key])?.get(0);
        Ok((fence >= 0).then_some(fence))
    }

    /// Whether a gate's hold may go on to another local holder: within its batch, or
    /// after one round trip found no other client waiting and the hold still on its
    /// session (a new batch then starts, with a new fence base). A hold found gone is
    /// lost: its local holds end (out of the mutex, `defer_loss`).
    fn may_keep(&self, gates: &mut Gates, hash: u64, name: &str) -> bool {
        let g = gate(gates, hash, name);
        if g.handoffs < MAX_HANDOFFS && g.batch.elapsed() < MAX_KEEP {
            return true;
        }
        let (hi, lo) = key_parts(g.key);
        let own = match &g.on {
            Some(On::Own(conn)) => Some((conn.pid, conn.started)),
            _ => None,
        };
        let pids = gates.pids.clone();
        let Some(main) = gates.main.as_mut() else {
            return false;
        };
        let (pid, started) = own.unwrap_or((main.conn.pid, main.conn.started));
        let params: [&(dyn postgres::types::ToSql + Sync); 5] = [&hi, &lo, &pids, &pid, &started];
        match main.conn.client.query_one(&main.others, &params) {
            Ok(row) => {
                let (others, kept): (bool, bool) = (row.get(0), row.get(1));
                if !kept {
                    self.hold_gone(gates, hash, name);
                    return false;
                }
                if others {
                    return false;
                }
                self.fences.start(hash, row.get(2));
                let g = gate(gates, hash, name);
                g.handoffs = 0;
                g.batch = Instant::now();
                true
            }
            Err(e) => {
                let f = self.error("cannot look for other waiters", &e);
                let lost = self.main_failed(gates);
                self.defer_loss(lost, f);
                false
            }
        }
    }

    /// The session holding a gate's hold no longer holds it (it ended: terminated, or
    /// its connection lost, and the watchdog has not pinged it yet): the hold is lost, as
    /// `ping` would find it.
    fn hold_gone(&self, gates: &mut Gates, hash: u64, name: &str) {
        let g = gate(gates, hash, name);
        let lost = g.lost_hold(&self.fences);
        if let Some(On::Own(conn)) = g.on.take() {
            gates.pids.retain(|&p| p != conn.pid);
            discard(vec![*conn]);
        }
        let f = Failure(format!(
            "the session holding the lock was lost on {}: the server no longer holds it \
             for this manager",
            self.target.display()
        ));
        self.defer_loss(vec![lost], f);
    }

    /// Give a gate's server hold back.
    fn free(&self, gates: &mut Gates, hash: u64, name: &str) {
        let g = gate(gates, hash, name);
        let (Some(mode), Some(on)) = (g.held.take(), g.on.take()) else {
            return;
        };
        let key = g.key;
        match on {
            On::Main => {
                let Some(main) = gates.main.as_mut() else {
                    return;
                };
                let stmt = if mode == Mode::Shared {
                    &main.unlock_s
                } else {
                    &main.unlock_x
                };
                if let Err(e) = main.conn.client.query_one(stmt, &[&key]) {
                    // The session is gone or broken: closing it frees the lock.
                    let f = self.error("cannot release the lock", &e);
                    let lost = self.main_failed(gates);
                    self.defer_loss(lost, f);
                }
            }
            On::Own(mut conn) => {
                let f = if mode == Mode::Shared { "_shared" } else { "" };
                let sql = format!("SELECT pg_advisory_unlock{f}({key})");
                if run(&mut conn, &sql).is_ok() {
                    self.keep_idle(gates, *conn);
                } else {
                    gates.pids.retain(|&p| p != conn.pid);
                    discard(vec![*conn]);
                }
            }
        }
    }

    fn keep_idle(&self, gates: &mut Gates, conn: Conn) {
        if gates.idle.len() < IDLE_SESSIONS && !gates.closed {
            gates.idle.push(conn);
        } else {
            gates.pids.retain(|&p| p != conn.pid);
        }
    }

    /// Loss found under the gates' mutex: its local holds end on another thread, since
    /// ending them takes the local scope's mutexes and may wake waiters.
    fn defer_loss(&self, keys: Vec<(Key, u64)>, f: Failure) {
        if keys.is_empty() {
            return;
        }
        let Some(me) = self.me() else { return };
        let _ = std::thread::Builder::new()
            .name("ctxlock-pg-loss".to_owned())
            .spawn(move || me.lose(keys, &f));
    }

    /// An owning handle on this keeper (for its helper threads).
    fn me(&self) -> Option<Arc<Keeper>> {
        self.this.upgrade()
    }

    fn local_demand(&self, g: &Gate) -> bool {
        let key = Key::with_hash(g.name.clone(), g.hash);
        self.local.in_demand(&key)
    }

    /// After a local hold ended (and left the gate, if it had entered): pass the server
    /// hold to tickets or keep it for local demand, within the cohort's batch, or give it
    /// back; then take it for tickets, or queue a server wait for them.
    fn settle(&self, gates: &mut Gates, hash: u64, name: &str, wake: &mut Vec<Arc<Ticket>>) {
        let g = gate(gates, hash, name);
        // A stale holder (see `Gate`) may have recorded its fence under the hold kept
        // now: it is not given back before they all went.
        if g.users > 0 || (g.held.is_some() && g.stale > 0) {
            return;
        }
        if let Some(m) = g.held {
            if !g.tickets.is_empty() {
                if g.tickets[0].mode == m && self.may_keep(gates, hash, name) {
                    let g = gate(gates, hash, name);
                    g.users = g.tickets.len() as u32;
                    g.handoffs += 1;
                    self.grant_all(gates, hash, name, wake);
                    return;
                }
            } else if self.local_demand(g) && self.may_keep(gates, hash, name) {
                return;
            }
            self.free(gates, hash, name);
        }
        let g = gate(gates, hash, name);
        if g.tickets.is_empty() {
            return;
        }
        let (mode, n) = (g.tickets[0].mode, g.tickets.len() as u32);
        if self.enter(gates, hash, name, mode, n) {
            self.grant_all(gates, hash, name, wake);
        } else {
            self.start_wait(gates, hash, name);
        }
    }

    /// Queue a server wait for a gate's tickets, unless one runs.
    fn start_wait(&self, gates: &mut Gates, hash: u64, name: &str) {
        if gates.closed {
            return;
        }
        let g = gate(gates, hash, name);
        if g.waiting || g.tickets.is_empty() {
            return;
        }
        let Some(me) = self.me() else { return };
        g.waiting = true;
        let key = Key::with_hash(g.name.clone(), g.hash);
        let spawned = std::thread::Builder::new()
            .name("ctxlock-pg-wait".to_owned())
            .spawn(move || me.serve(key));
        if spawned.is_err() {
            gate(gates, hash, name).waiting = false;
            gates.down = Some((
                Failure("cannot start a thread to wait for the lock".to_owned()),
                Instant::now(),
            ));
        }
    }

    /// A wait thread: wait on the server for `key`'s tickets until they are granted or
    /// gone.
    fn serve(self: Arc<Self>, key: Key) {
        let (hash, name) = (key.hash(), key.name());
        let mut fresh = false;
        loop {
            // Which mode to wait for, with what session.
            let (mode, k, conn) = {
                let mut gates = self.gates();
                let closed = gates.closed || self.forked();
                let g = gate(&mut gates, hash, name);
                if closed || g.tickets.is_empty() || self.stop.load(Ordering::SeqCst) {
                    g.waiting = false;
                    return;
                }
                let (mode, k) = (g.tickets[0].mode, g.key);
                // A held name's tickets wait on the server only to join a shared hold
                // (see `enter`); otherwise its release grants them (`settle`).
                if g.held
                    .is_some_and(|m| m != Mode::Shared || mode != Mode::Shared)
                {
                    g.waiting = false;
                    if g.users == 0 {
                        // Kept for local demand: nobody's release will settle it.
                        let mut wake = Vec::new();
                        self.settle(&mut gates, hash, name, &mut wake);
                        drop(gates);
                        self.wake(wake);
                    }
                    return;
                }
                let conn = if fresh { None } else { gates.idle.pop() };
                (mode, k, conn)
            };
            let conn = match conn {
                Some(c) => Ok(c),
                None => self.open(),
            };
            let mut conn = match conn {
                Ok(c) => c,
                Err(f) => {
                    self.wait_failed(hash, name, f);
                    return;
                }
            };
            {
                let mut gates = self.gates();
                if !gates.pids.contains(&conn.pid) {
                    gates.pids.push(conn.pid);
                }
                let closed = gates.closed;
                let g = gate(&mut gates, hash, name);
                if g.tickets.is_empty() || closed {
                    g.waiting = false;
                    self.keep_idle(&mut gates, conn);
                    return;
                }
                g.wait = Some(Waiting {
                    pid: conn.pid,
                    started: conn.started,
                    token: conn.client.cancel_token(),
                    mode,
                });
                g.statement = true;
            }
            let f = if mode == Mode::Shared { "_shared" } else { "" };
            let sql = format!("SELECT pg_advisory_lock{f}({k}); SELECT nextval('ctxlock_fence')");
            let result = conn.client.simple_query(&sql);
            let mut wake = Vec::new();
            let mut gates = self.gates();
            gate(&mut gates, hash, name).wait = None;
            match result {
                Ok(messages) => {
                    let fence = messages.iter().find_map(|m| match m {
                        SimpleQueryMessage::Row(r) => r.get(0).and_then(|v| v.parse::<i64>().ok()),
                        _ => None,
                    });
                    // Not waiting any more: what the grant leaves to wait for (tickets of
                    // another mode) starts a wait of its own.
                    gate(&mut gates, hash, name).waiting = false;
                    self.granted(
                        &mut gates,
                        hash,
                        name,
                        mode,
                        conn,
                        fence.unwrap_or(0),
                        &mut wake,
                    );
                    gate(&mut gates, hash, name).statement = false;
                    self.statement_done.notify_all();
                    drop(gates);
                    self.wake(wake);
                    return;
                }
                Err(e) => {
                    let cancelled = matches!(db_error_code(&e), Some("57014" | "55P03"));
                    drop(gates);
                    // A grant may have raced the cancel: the session gives back whatever
                    // it holds (it held nothing else), or is closed.
                    let clean =
                        cancelled && run(&mut conn, "SELECT pg_advisory_unlock_all()").is_ok();
                    let mut gates = self.gates();
                    if clean {
                        self.keep_idle(&mut gates, conn);
                    } else {
                        gates.pids.retain(|&p| p != conn.pid);
                        discard(vec![conn]);
                    }
                    gate(&mut gates, hash, name).statement = false;
                    self.statement_done.notify_all();
                    drop(gates);
                    if clean {
                        fresh = false;
                        continue;
                    }
                    if !cancelled {
                        if fresh {
                            self.wait_failed(
                                hash,
                                name,
                                self.error("cannot wait for the lock", &e),
                            );
                            return;
                        }
                        // A kept session may have died while idle: once more on a new one.
                        fresh = true;
                    }
                }
            }
        }
    }

    /// A server wait could not run: its tickets find the failure and give up.
    fn wait_failed(&self, hash: u64, name: &str, f: Failure) {
        let wake = {
            let mut gates = self.gates();
            gates.down = Some((f, Instant::now()));
            let g = gate(&mut gates, hash, name);
            g.waiting = false;
            g.tickets.clone()
        };
        self.wake(wake);
    }

    /// A server wait was granted on `conn`.
    #[allow(clippy::too_many_arguments)]
    fn granted(
        &self,
        gates: &mut Gates,
        hash: u64,
        name: &str,
        mode: Mode,
        mut conn: Conn,
        fence: i64,
        wake: &mut Vec<Arc<Ticket>>,
    ) {
        if gates.closed || self.forked() {
            return;
        }
        let g = gate(gates, hash, name);
        match g.held {
            None => {
                self.fences.start(hash, fence);
                g.held = Some(mode);
                g.on = Some(On::Own(Box::new(conn)));
                g.users = 0;
                g.handoffs = 0;
                g.batch = Instant::now();
                if !g.tickets.is_empty() && g.tickets[0].mode == mode {
                    g.users = g.tickets.len() as u32;
                    self.grant_all(gates, hash, name, wake);
                } else {
                    // Everyone gave up meanwhile: keep it for local demand, or let go.
                    self.settle(gates, hash, name, wake);
                }
            }
            Some(held) => {
                // The name is held already (a shared hold the tickets could not join
                // while another client waited): they join it now that the server let
                // this session in too, and this session's extra hold goes. Only shared
                // tickets: those that came after the ones this wait was for (granted
                // meanwhile) may be exclusive.
                if held == Mode::Shared
                    && mode == Mode::Shared
                    && g.tickets.first().is_some_and(|t| t.mode == Mode::Shared)
                {
                    g.users += g.tickets.len() as u32;
                    g.handoffs += 1;
                    self.grant_all(gates, hash, name, wake);
                }
                let key = gate(gates, hash, name).key;
                let f = if mode == Mode::Shared { "_shared" } else { "" };
                if run(&mut conn, &format!("SELECT pg_advisory_unlock{f}({key})")).is_ok() {
                    self.keep_idle(gates, conn);
                } else {
                    gates.pids.retain(|&p| p != conn.pid);
                    discard(vec![conn]);
                }
                let g = gate(gates, hash, name);
                if !g.tickets.is_empty() && !g.waiting {
                    self.start_wait(gates, hash, name);
                }
            }
        }
    }

    /// Every ticket of the gate entered: mark them granted, to be woken out of the mutex.
    /// A server wait still queued for them is not needed any more.
    fn grant_all(&self, gates: &mut Gates, hash: u64, name: &str, wake: &mut Vec<Arc<Ticket>>) {
        let g = gate(gates, hash, name);
        for t in g.tickets.drain(..) {
            // Listed as arriving before the grant its waiter may see (`Arrivals`).
            self.arrivals.add(&g.name, &t);
            t.grant();
            wake.push(t);
        }
        // The common case (a local hand-off, a grant by the wait's own thread): no wait's
        // statement runs, and nothing is left to cancel.
        if g.wait.is_none() || self.cancel_wait(gates, hash, name) {
            return;
        }
        // Its statement has not reached the server yet: signalled again from another
        // thread until it has (or ended), as for a waiter that gives up.
        let Some(me) = self.me() else { return };
        let g = gate(gates, hash, name);
        if g.ending {
            return;
        }
        g.ending = true;
        let key = Key::with_hash(g.name.clone(), hash);
        let spawned = std::thread::Builder::new()
            .name("ctxlock-pg-cancel".to_owned())
            .spawn(move || {
                me.end_wait(&key);
                let mut gates = me.gates();
                if let Some(g) = gates.map.find_mut(hash, |g| *g.name == *key.name()) {
                    g.ending = false;
                }
            });
        if spawned.is_err() {
            gate(gates, hash, name).ending = false;
        }
    }

    fn wake(&self, tickets: Vec<Arc<Ticket>>) {
        // Not even a read of `wakes` for nothing: `lose` holds one while the local
        // hand-offs it makes settle gates (a second read under a waiting writer would
        // deadlock).
        if tickets.is_empty() {
            return;
        }
        let stopped = self.wakes.read().unwrap_or_else(|e| e.into_inner());
        if !*stopped {
            super::cohort::wake(tickets);
        }
    }

    /// The last ticket of a gate was withdrawn (or granted) while its server wait's
    /// statement runs: cancel it, and wait until the statement is done and its outcome
    /// dealt with (a raced grant given back), so that nothing of it is left when the
    /// acquire raises (`statistics()` counts no waiter, `pg_locks` shows none, a try of
    /// any client gets the name). `WITHDRAW_WAIT` at most; over at once if new tickets
    /// of the wait's mode came meanwhile (the wait is theirs then).
    fn end_wait(&self, key: &Key) {
        let (hash, name) = (key.hash(), key.name());
        let until = Instant::now() + WITHDRAW_WAIT;
        // How long to wait before signalling again a statement that had not reached the
        // server (a thread about to send it, on a busy machine): doubling, up to 50 ms.
        let mut again = Duration::from_millis(1);
        let mut signalled = false;
        let mut gates = self.gates();
        loop {
            if gates.closed || self.forked() {
                return;
            }
            let Some(g) = gates.map.find(hash, |g| *g.name == *name) else {
                return;
            };
            let theirs = g.tickets.first().is_some_and(|t| {
                // Once the statement returned (`wait` is gone), its thread serves them.
                g.wait.as_ref().is_none_or(|w| w.mode == t.mode)
            });
            if !g.statement || theirs {
                return;
            }
            if !signalled {
                signalled = self.cancel_wait(&mut gates, hash, name);
            }
            let now = Instant::now();
            if now >= until {
                return;
            }
            let nap = if signalled {
                until - now
            } else {
                again.min(until - now)
            };
            again = (again * 2).min(Duration::from_millis(50));
            gates = self
                .statement_done
                .wait_timeout(gates, nap)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// Wait while `running` says a wait's statement runs (one that was cancelled), for
    /// `WITHDRAW_WAIT` at most.
    fn await_statements(&self, running: impl Fn(&Gates) -> bool) {
        let until = Instant::now() + WITHDRAW_WAIT;
        let mut gates = self.gates();
        while running(&gates) {
            let now = Instant::now();
            if now >= until {
                break;
            }
            gates = self
                .statement_done
                .wait_timeout(gates, until - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// Cancel the gate's server wait if its statement runs (its tickets are gone). True
    /// once the signal went to a session running the statement, or nothing is left to
    /// cancel; false if the session was not running it yet (the statement had not
    /// reached the server, and the signal was ignored: the caller signals again).
    ///
    /// The signal is sent while this thread holds the gates' mutex and `wait` says the
    /// statement runs: the wait's thread needs that mutex to run anything else on the
    /// session, and by then the server has the signal, which cancels the wait or, once
    /// the statement ended, is dropped by the idle session (PostgreSQL ignores a cancel
    /// that arrives between statements). It cannot cancel a later statement.
    fn cancel_wait(&self, gates: &mut Gates, hash: u64, name: &str) -> bool {
        let Some(wait) = gate(gates, hash, name).wait.clone() else {
            return true;
        };
        if let Some(main) = gates.main.as_mut() {
            match main
                .conn
                .client
                .query_opt(&main.cancel, &[&wait.pid, &wait.started])
            {
                Ok(row) => return row.is_none_or(|r| r.get::<_, Option<bool>>(0) == Some(true)),
                // The server refused it (the session lives): the protocol's way instead.
                Err(e) if e.code().is_some() => {}
                Err(e) => {
                    let f = self.error("cannot cancel a wait", &e);
                    let lost = self.main_failed(gates);
                    self.defer_loss(lost, f);
                }
            }
        }
        // No main session: the protocol's cancel request. It may arrive after the wait
        // ended: `run` then runs the statement it cancelled again.
        self.send_cancel_request(wait.token);
        true
    }

    /// The protocol's cancel request for `token`'s session, sent from another thread (it
    /// connects to the server and may block).
    fn send_cancel_request(&self, token: CancelToken) {
        let target = self.target.clone();
        let _ = std::thread::Builder::new()
            .name("ctxlock-pg-cancel".to_owned())
            .spawn(move || {
                let _ = target.cancel(&token);
            });
    }

    /// The watchdog: ping every session that holds a name.
    fn watch(self: Arc<Self>) {
        loop {
            {
                let (m, cv) = &self.bell;
                let g = m.lock().unwrap_or_else(|e| e.into_inner());
                if self.stop.load(Ordering::SeqCst) {
                    return;
                }
                let _ = cv.wait_timeout(g, PING_EVERY);
                if self.stop.load(Ordering::SeqCst) {
                    return;
                }
            }
            self.ping();
        }
    }

    fn ping(&self) {
        let mut lost = Vec::new();
        let mut why = None;
        {
            let mut gates = self.gates();
            if gates.closed || self.forked() {
                return;
            }
            let main_holds = gates.map.iter().any(|g| matches!(g.on, Some(On::Main)));
            if main_holds {
                if let Some(main) = gates.main.as_mut() {
                    if let Err(e) = main.conn.client.is_valid(PING_TIMEOUT) {
                        let f = self.error("the session holding the lock was lost", &e);
                        lost.extend(self.main_failed(&mut gates));
                        why = Some(f);
                    }
                }
            }
            let mut gone = Vec::new();
            for g in gates.map.iter_mut() {
                if let Some(On::Own(conn)) = &mut g.on {
                    // A cancel request that came late (see `run`) says the session lives.
                    let ping = conn.client.is_valid(PING_TIMEOUT);
                    let ping = ping.or_else(|e| match db_error_code(&e) {
                        Some("57014") => Ok(()),
                        _ => Err(e),
                    });
                    if let Err(e) = ping {
                        why = Some(self.error("the session holding the lock was lost", &e));
                        if let Some(On::Own(conn)) = g.on.take() {
                            gone.push(*conn);
                        }
                        lost.push(g.lost_hold(&self.fences));
                    }
                }
            }
            gates.pids.retain(|p| !gone.iter().any(|c| c.pid == *p));
            discard(gone);
        }
        if let Some(f) = why {
            self.lose(lost, &f);
        }
    }

    fn stop_helpers(&self) {
        // ORDERING: SeqCst, read by the helpers at each round.
        self.stop.store(true, Ordering::SeqCst);
        // From now on no task is woken: a wake-up in progress finishes first.
        *self.wakes.write().unwrap_or_else(|e| e.into_inner()) = true;
        {
            let _g = self.bell.0.lock().unwrap_or_else(|e| e.into_inner());
            self.bell.1.notify_all();
        }
        for helper in [&self.watchdog, &self.listener] {
            let handle = helper.lock().unwrap_or_else(|e| e.into_inner()).take();
            if let Some(h) = handle {
                if self.forked() {
                    std::mem::forget(h);
                } else if h.thread().id() != std::thread::current().id() {
                    let _ = h.join();
                }
            }
        }
    }

    /// Holders and waiters of other clients, from the server.
    /// Each with its session's `application_name`.
    fn remote(&self, prefix: &str) -> Vec<(Info, Option<String>)> {
        self.ensure_main();
        let mut gates = self.gates();
        if gates.closed || self.forked() {
            return Vec::new();
        }
        let pids = gates.pids.clone();
        let Some(main) = gates.main.as_mut() else {
            return Vec::new();
        };
        let sql = "SELECT n.name, l.mode, l.granted, l.pid, a.application_name, \
                   extract(epoch FROM coalesce(l.waitstart, a.state_change, a.backend_start))::float8 \
                   FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid \
                   JOIN ctxlock_names n ON n.key = (l.classid::int8 << 32) | l.objid::int8 \
                   WHERE l.locktype = 'advisory' AND l.objsubid = 1 \
                   AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
                   AND l.pid <> ALL($1) AND starts_with(n.name, $2)";
        let rows = match main.conn.client.query(sql, &[&pids, &prefix]) {
            Ok(rows) => rows,
            // A statement the server refused (a server without `pg_locks.waitstart`,
            // before PostgreSQL 14; a role that may not read the view) leaves the session
            // as it was: only this manager's own records are shown.
            Err(e) if e.code().is_some() => return Vec::new(),
            Err(e) => {
                let f = self.error("cannot read pg_locks", &e);
                let lost = self.main_failed(&mut gates);
                self.defer_loss(lost, f);
                return Vec::new();
            }
        };
        rows.iter()
            .map(|r| {
                let name: String = r.get(0);
                let mode: String = r.get(1);
                let backend: i32 = r.get(3);
                let app: Option<String> = r.get(4);
                let (host, pid) = owner_of(app.as_deref().unwrap_or(""), backend);
                let info = Info {
                    name: Arc::from(name),
                    mode: if mode == "ShareLock" {
                        Mode::Shared
                    } else {
                        Mode::Exclusive
                    },
                    held: r.get(2),
                    who: Who::default(),
                    pid,
                    host: Some(Arc::from(host)),
                    since: r.get::<_, Option<f64>>(5).unwrap_or(0.0),
                };
                (info, app)
            })
            .collect()
    }

    /// Ask every other manager of the database (their listening sessions) for their
    /// holds and waits whose name starts with `prefix`: the records of those that
    /// answered within `ANSWER_WITHIN`, and the application names of their sessions.
    fn ask(&self, prefix: &str, targets: &[String]) -> (Vec<Info>, Vec<String>) {
        let Some(me) = *self.listening.lock().unwrap_or_else(|e| e.into_inner()) else {
            return (Vec::new(), Vec::new());
        };
        // ORDERING: a unique number; nothing else is published with it.
        let ask = self.asks.fetch_add(1, Ordering::Relaxed) + 1;
        self.answers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(ask, HashMap::new());
        self.ensure_main();
        let expected: Vec<(i32, String)> = {
            let mut gates = self.gates();
            if gates.closed || self.forked() {
                return (Vec::new(), Vec::new());
            }
            let Some(main) = gates.main.as_mut() else {
                return (Vec::new(), Vec::new());
            };
            // One notification per manager found (none without one: nobody to ask).
            let sql = "SELECT a.pid, a.application_name, \
                       pg_notify('ctxlock_ask_' || a.pid, $1::text || ' ' || a.pid || ' ' || $3::text) \
                       FROM pg_stat_activity a WHERE a.datname = current_database() \
                       AND a.application_name = ANY($4) AND a.pid <> $2";
            let head = format!("{ask} {me}");
            let listeners: Vec<String> = targets.iter().map(|t| format!("{t} listener")).collect();
            match main
                .conn
                .client
                .query(sql, &[&head, &me, &prefix, &listeners])
            {
                Ok(rows) => rows.iter().map(|r| (r.get(0), r.get(1))).collect(),
                Err(_) => Vec::new(),
            }
        };
        let until = Instant::now() + ANSWER_WITHIN;
        let mut answers = self.answers.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            let got = answers.get(&ask).map_or(0, |a| {
                expected
                    .iter()
                    .filter(|(pid, _)| a.get(pid).is_some_and(|x| x.1))
                    .count()
            });
            let now = Instant::now();
            if got == expected.len() || now >= until {
                break;
            }
            answers = self
                .answered
                .wait_timeout(answers, until - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        let mine = answers.remove(&ask).unwrap_or_default();
        drop(answers);
        let mut infos = Vec::new();
        let mut answered = Vec::new();
        for (pid, app) in expected {
            let Some((bytes, true)) = mine.get(&pid) else {
                continue;
            };
            let base = app.strip_suffix(" listener").unwrap_or(&app).to_owned();
            let (host, process) = owner_of(&app, pid);
            // Another manager of this process: its threads are this process's.
            let host: Option<Arc<str>> =
                (process != std::process::id() || host != self.host).then(|| Arc::from(host));
            infos.extend(decode_infos(bytes, process).into_iter().map(|mut i| {
                i.host = host.clone();
                i
            }));
            answered.push(base);
        }
        (infos, answered)
    }

    /// The listener thread: this manager's listening session answers the other
    /// managers' asks and takes in their answers to this one's.
    fn listen(self: Arc<Self>, first: Conn) {
        let mut session: Option<Conn> = Some(first);
        while !self.stop.load(Ordering::SeqCst) && !self.forked() {
            let conn = match session.as_mut() {
                Some(c) => c,
                None => match self.open_listener() {
                    Ok(c) => session.insert(c),
                    Err(_) => {
                        std::thread::sleep(PING_EVERY);
                        continue;
                    }
                },
            };
            if self.listen_round(conn).is_err() {
                *self.listening.lock().unwrap_or_else(|e| e.into_inner()) = None;
                session = None;
            }
        }
    }

    fn open_listener(&self) -> Result<Conn, Failure> {
        let mut client = self
            .target
            .connect(&format!("{} listener", self.app))
            .map_err(Failure)?;
        let pid: i32 = client
            .query_one("SELECT pg_backend_pid()", &[])
            .map_err(|e| self.error("cannot start a session", &e))?
            .get(0);
        client
            .batch_execute(&format!(
                "LISTEN ctxlock_ask_{pid}; LISTEN ctxlock_ans_{pid}"
            ))
            .map_err(|e| self.error("cannot listen", &e))?;
        *self.listening.lock().unwrap_or_else(|e| e.into_inner()) = Some(pid);
        // Its backend is never signalled: no start time is needed.
        Ok(Conn {
            client,
            pid,
            started: 0,
        })
    }

    /// Take the next notification (200 ms at most) and act on it.
    fn listen_round(&self, conn: &mut Conn) -> Result<(), postgres::Error> {
        let note = conn
            .client
            .notifications()
            .timeout_iter(Duration::from_millis(200))
            .next()?;
        if let Some(n) = note {
            if n.channel().starts_with("ctxlock_ask") {
                self.answer(conn, n.payload())?;
            } else {
                self.take_answer(n.payload());
            }
        }
        Ok(())
    }

    /// Answer an ask ("id asker me prefix") with this manager's records, in chunks.
    fn answer(&self, conn: &mut Conn, ask: &str) -> Result<(), postgres::Error> {
        let mut parts = ask.splitn(4, ' ');
        let (Some(id), Some(asker), Some(_me), prefix) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Ok(());
        };
        let bytes = encode_infos(&self.local_infos(prefix.unwrap_or("")));
        let channel = format!("ctxlock_ans_{asker}");
        let mut chunks: Vec<&[u8]> = bytes.chunks(ANSWER_CHUNK).collect();
        if chunks.is_empty() {
            chunks.push(&[]);
        }
        let last = chunks.len() - 1;
        for (i, chunk) in chunks.into_iter().enumerate() {
            let hex: String = chunk.iter().map(|b| format!("{b:02x}")).collect();
            let payload = format!("{id} {} {} {hex}", conn.pid, u8::from(i == last));
            conn.client
                .execute("SELECT pg_notify($1, $2)", &[&channel, &payload])?;
        }
        Ok(())
    }

    /// An answer chunk ("id listener last hex") to one of this manager's asks.
    fn take_answer(&self, payload: &str) {
        let mut parts = payload.splitn(4, ' ');
        let (Some(id), Some(pid), Some(last), hex) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return;
        };
        let (Ok(id), Ok(pid)) = (id.parse::<u64>(), pid.parse::<i32>()) else {
            return;
        };
        let hex = hex.unwrap_or("").as_bytes();
        let bytes: Option<Vec<u8>> = hex
            .chunks(2)
            .map(|c| {
                std::str::from_utf8(c)
                    .ok()
                    .and_then(|s| u8::from_str_radix(s, 16).ok())
            })
            .collect();
        let mut answers = self.answers.lock().unwrap_or_else(|e| e.into_inner());
        if let (Some(pending), Some(bytes)) = (answers.get_mut(&id), bytes) {
            let entry = pending.entry(pid).or_default();
            entry.0.extend(bytes);
            entry.1 = last == "1";
            self.answered.notify_all();
        }
    }

    /// This manager's holds and waits whose name starts with `prefix`.
    fn local_infos(&self, prefix: &str) -> Vec<Info> {
        let gates = self.gates();
        let tickets = gates.map.iter().map(|g| (&g.name, &g.tickets[..]));
        super::cohort::local_infos(&self.local, prefix, &self.arrivals, tickets)
    }
}

/// Who a session belongs to, from its `application_name` ("ctxlock host:pid"); a
/// session named otherwise by its url shows that name and its backend's id.
fn owner_of(app: &str, backend: i32) -> (String, u32) {
    if let Some(rest) = app.strip_prefix("ctxlock ") {
        let rest = rest.strip_suffix(" listener").unwrap_or(rest);
        let rest = rest.rsplit_once('/').map_or(rest, |(r, _)| r);
        if let Some((host, pid)) = rest.rsplit_once(':') {
            if let Ok(pid) = pid.parse() {
                return (host.to_owned(), pid);
            }
        }
    }
    (format!("{app} backend"), backend.max(0) as u32)
}

/// The gate of `name` (made by `with_gate` before any use).
fn gate<'a>(gates: &'a mut Gates, hash: u64, name: &str) -> &'a mut Gate {
    gates
        .map
        .find_mut(hash, |g| *g.name == *name)
        .expect("BUG: a gate used before it was made")
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
        self.target.same_database(&other.target)
    }

    fn enter_now(&self, key: &Key, mode: Mode) -> bool {
        self.with_gate(key, |k, gates, hash| {
            k.enter(gates, hash, key.name(), mode, 1)
        })
        .unwrap_or(false)
    }

    fn register(
        &self,
        key: &Key,
        mode: Mode,
        notify: Notify,
        who: Who,
        since: f64,
        wake: &mut Vec<Arc<Ticket>>,
    ) -> Option<Arc<Ticket>> {
        let ticket = Ticket::new(mode, notify, false, who, since);
        self.with_gate(key, |k, gates, hash| {
            let g = gate(gates, hash, key.name());
            g.tickets.push(ticket.clone());
            if g.users > 0 {
                // The holders' release settles the gate; a server wait is queued now only
                // to join a shared hold (`serve` decides).
                k.start_wait(gates, hash, key.name());
            } else {
                // Nobody inside (the name is free here, or kept for local demand, which
                // this ticket is): grant it, or take the name, or queue a server wait.
                k.settle(gates, hash, key.name(), wake);
            }
        })?;
        Some(ticket)
    }

    fn wake_granted(&self, tickets: Vec<Arc<Ticket>>) {
        self.wake(tickets)
    }

    fn withdraw(&self, key: &Key, ticket: &Arc<Ticket>) -> bool {
        let mut last = false;
        let out = self
            .with_gate(key, |_, gates, hash| {
                let g = gate(gates, hash, key.name());
                if ticket.is_granted() {
                    return false;
                }
                g.tickets.retain(|t| !Arc::ptr_eq(t, ticket));
                last = g.tickets.is_empty() && g.statement;
                true
            })
            .unwrap_or(true);
        if last {
            self.end_wait(key);
        }
        out
    }

    fn leave(&self, key: &Key) {
        let mut wake = Vec::new();
        self.with_gate(key, |k, gates, hash| {
            let g = gate(gates, hash, key.name());
            g.depart();
            k.settle(gates, hash, key.name(), &mut wake);
        });
        self.wake(wake);
    }

    fn settle_key(&self, key: &Key) {
        let mut wake = Vec::new();
        self.with_gate(key, |k, gates, hash| {
            k.settle(gates, hash, key.name(), &mut wake)
        });
        self.wake(wake);
    }

    fn collect(&self, prefix: &str) -> Vec<Info> {
        let mut out = self.local_infos(prefix);
        // What the server shows of the other clients first: only the managers it shows
        // holding or waiting are asked (a manager with threads queued for a name has a
        // session that holds it or waits for it), and none when it shows nobody.
        let rows = self.remote(prefix);
        let mut targets: Vec<String> = rows
            .iter()
            .filter_map(|(_, app)| app.clone().filter(|a| a.starts_with("ctxlock ")))
            .collect();
        targets.sort();
        targets.dedup();
        let (asked, answered) = if targets.is_empty() {
            (Vec::new(), Vec::new())
        } else {
            self.ask(prefix, &targets)
        };
        out.extend(asked);
        // Sessions of managers that did not answer (or are no managers of this
        // library): what the server shows of them, a row per session.
        out.extend(
            rows.into_iter()
                .filter(|(_, app)| !app.as_ref().is_some_and(|a| answered.contains(a)))
                .map(|(info, _)| info),
        );
        out.sort_by(|a, b| a.name.cmp(&b.name).then(a.since.total_cmp(&b.since)));
        out
    }

    fn shutdown(&self) {
        let mut wake = Vec::new();
        let mut cancels = Vec::new();
        let mut conns = Vec::new();
        {
            let mut gates = self.gates();
            if gates.closed {
                return;
            }
            gates.closed = true;
            if !self.forked() {
                for g in gates.map.iter_mut() {
                    wake.append(&mut g.tickets);
                    cancels.extend(g.wait.take().map(|w| w.token));
                    if let Some(On::Own(c)) = g.on.take() {
                        conns.push(*c);
                    }
                    g.held = None;
                    g.users = 0;
                }
                conns.append(&mut gates.idle);
                if let Some(m) = gates.main.take() {
                    conns.push(m.conn);
                }
            }
        }
        // Closing the sessions frees whatever they hold on the server.
        discard(conns);
        // The main session is closing too: the protocol's cancel requests (one that
        // arrives late finds its session closing).
        let waited = !cancels.is_empty();
        for token in cancels {
            self.send_cancel_request(token);
        }
        if waited {
            // As for a waiter that gives up: the server's waits end before close returns.
            self.await_statements(|gates| gates.map.iter().any(|g| g.statement));
        }
        self.wake(wake);
        self.stop_helpers();
    }

    fn dropped(&self) {
        self.stop_helpers();
    }

    /// A holder that entered a server hold records its fence after the entry (a woken
    /// ticket: after its wake-up), which may be after `lose` ended the holds of that
    /// hold, lost meanwhile: its own hold ends here, as `lose` would have ended it. Once
    /// a later server grant of the name started, the fence no longer tells, and such a
    /// hold ends only by its release (its fence is below the later grants' all the same).
    fn recorded(&self, key: &Key, fence: u64) -> Option<Failure> {
        let through = self.fences.lost_through(key.hash(), fence)?;
        let why = Failure(format!(
            "the session holding the lock was lost on {}",
            self.target.display()
        ));
        self.lose_recording(vec![(key.clone(), through)], &why, Some(fence));
        Some(why)
    }

    fn failure(&self) -> Option<Failure> {
        if self.forked() {
            return Some(super::cohort::forked_failure());
        }
        let gates = self.gates();
        match &gates.down {
            Some((f, at)) if at.elapsed() < RETRY_AFTER => Some(f.clone()),
            _ => None,
        }
    }
}

impl Drop for Keeper {
    fn drop(&mut self) {
        if self.forked() {
            // The sessions' sockets are the parent's: closing them here would end the
            // parent's sessions (and its locks).
            let gates = std::mem::replace(
                self.gates.get_mut().unwrap_or_else(|e| e.into_inner()),
                Gates::new(),
            );
            std::mem::forget(gates);
        }
    }
}

impl Gates {
    /// A connection failed less than `RETRY_AFTER` ago: acquires fail at once.
    fn is_down(&self) -> bool {
        matches!(&self.down, Some((_, at)) if at.elapsed() < RETRY_AFTER)
    }

    fn new() -> Gates {
        Gates {
            map: HashTable::new(),
            main: None,
            idle: Vec::new(),
            pids: Vec::new(),
            named: Default::default(),
            down: None,
            connecting: false,
            closed: false,
        }
    }
}

/// Why a url of this scope cannot make a manager.
pub(crate) enum PgError {
    /// The url itself (a ValueError).
    Url(String),
    /// The server (a BackendError).
    Backend(String),
}

/// A new manager of the scope `url` names, connected; and its url as shown (no password).
pub(crate) fn connect(url: &str) -> Result<(Arc<dyn Session>, String), PgError> {
    let target = Target::parse(url, &|v| std::env::var(v).ok()).map_err(PgError::Url)?;
    let shown = target.display().to_owned();
    // ORDERING: a unique number; nothing else is published with it.
    let serial = MANAGERS.fetch_add(1, Ordering::Relaxed) + 1;
    let app = target.application_name_or(&format!(
        "ctxlock {}:{}/{serial}",
        this_host(),
        std::process::id()
    ));
    let fences = Arc::new(Fences::default());
    let source = fences.clone();
    let local = MemoryClient::new(Arc::new(MemoryScope::private(move |key: &Key| {
        source.next(key.hash())
    })));
    let keeper = Arc::new_cyclic(|this| Keeper {
        host: this_host(),
        this: this.clone(),
        target: Arc::new(target),
        app,
        local,
        arrivals: super::cohort::Arrivals::new(),
        fences,
        gates: Mutex::new(Gates::new()),
        wakes: RwLock::new(false),
        stop: AtomicBool::new(false),
        watchdog: Mutex::new(None),
        bell: (Mutex::new(()), Condvar::new()),
        statement_done: Condvar::new(),
        answers: Mutex::new(HashMap::new()),
        answered: Condvar::new(),
        asks: AtomicU64::new(0),
        listening: Mutex::new(None),
        listener: Mutex::new(None),
        generation: super::fork::generation(),
    });
    let mut first = keeper.open().map_err(|f| PgError::Backend(f.0))?;
    setup(&keeper, &mut first)?;
    // Session pooling is what session-level locks need. A pooler in transaction or
    // statement mode gives each statement whichever server session is free: then a
    // second client finds the first one's session (its backend id), or the first one's
    // id changes between statements.
    let second = keeper.open().map_err(|f| PgError::Backend(f.0))?;
    let again: i32 = first
        .client
        .query_one("SELECT pg_backend_pid()", &[])
        .map_err(|e| PgError::Backend(keeper.error("cannot start a session", &e).0))?
        .get(0);
    if again != first.pid || second.pid == first.pid {
        return Err(PgError::Backend(format!(
            "{shown} goes through a connection pooler in transaction or statement mode \
             (its statements run on changing server sessions): session-level advisory locks \
             would be lost or leak there; connect to the server directly or through a \
             session-mode pool"
        )));
    }
    let main = keeper.prepare(first).map_err(|f| PgError::Backend(f.0))?;
    {
        let mut gates = keeper.gates();
        gates.pids = vec![main.conn.pid, second.pid];
        gates.main = Some(main);
        gates.idle.push(second);
    }
    KEEPERS.add(&keeper);
    let k = keeper.clone();
    let watchdog = std::thread::Builder::new()
        .name("ctxlock-pg-watchdog".to_owned())
        .spawn(move || k.watch())
        .map_err(|e| PgError::Backend(format!("cannot start the lock watchdog thread: {e}")))?;
    *keeper.watchdog.lock().unwrap_or_else(|e| e.into_inner()) = Some(watchdog);
    // Listening before the manager is returned: its first `query()` hears every answer.
    let listening = keeper.open_listener().map_err(|f| PgError::Backend(f.0))?;
    let k = keeper.clone();
    let listener = std::thread::Builder::new()
        .name("ctxlock-pg-listener".to_owned())
        .spawn(move || k.listen(listening))
        .map_err(|e| PgError::Backend(format!("cannot start the lock listener thread: {e}")))?;
    *keeper.listener.lock().unwrap_or_else(|e| e.into_inner()) = Some(listener);
    Ok((Arc::new(Cohort { keeper }), shown))
}

/// Make the sequence and the table of names if they are missing; a role that may not
/// make them gets a message saying what an administrator can run.
fn setup(k: &Keeper, conn: &mut Conn) -> Result<(), PgError> {
    let Err(e) = conn.client.batch_execute(SETUP) else {
        return Ok(());
    };
    let exists = conn
        .client
        .query_one(
            "SELECT to_regclass('ctxlock_fence') IS NOT NULL \
             AND to_regclass('ctxlock_names') IS NOT NULL",
            &[],
        )
        .map(|r| r.get::<_, bool>(0))
        .unwrap_or(false);
    if exists {
        return Ok(());
    }
    if db_error_code(&e) == Some("42501") {
        return Err(PgError::Backend(format!(
            "{}: this role may not create ctxlock's sequence and table (the CREATE privilege \
             on the schema is needed once); an administrator can run: CREATE SEQUENCE \
             ctxlock_fence; CREATE TABLE ctxlock_names (key bigint NOT NULL, name text NOT \
             NULL, PRIMARY KEY (key, name)); GRANT USAGE ON SEQUENCE ctxlock_fence TO <role>; \
             GRANT SELECT, INSERT ON ctxlock_names TO <role>",
            k.target.display()
        )));
    }
    Err(PgError::Backend(
        k.error("cannot prepare the database", &e).0,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_stable_and_split_as_pg_locks_shows_them() {
        // The documented hash: other clients (and other versions) agree on it.
        assert_eq!(key_of(""), key_of(""));
        assert_ne!(key_of("invoice:42"), key_of("invoice:43"));
        let k = key_of("invoice:42");
        let (hi, lo) = key_parts(k);
        assert_eq!(((hi as u64) << 32 | lo as u64) as i64, k);
        assert!((0..=u32::MAX as i64).contains(&hi) && (0..=u32::MAX as i64).contains(&lo));
    }

    #[test]
    fn owners_come_from_the_application_name() {
        assert_eq!(
            owner_of("ctxlock web-1:4242", 99),
            ("web-1".to_owned(), 4242)
        );
        assert_eq!(owner_of("ctxlock [::1]:7", 99), ("[::1]".to_owned(), 7));
        assert_eq!(
            owner_of("ctxlock web-1:4242/3", 99),
            ("web-1".to_owned(), 4242)
        );
        assert_eq!(
            owner_of("ctxlock web-1:4242/3 listener", 9),
            ("web-1".to_owned(), 4242)
        );
        assert_eq!(owner_of("billing", 99), ("billing backend".to_owned(), 99));
    }

    #[test]
    fn fences_grow_within_and_across_server_grants() {
        let f = Fences::default();
        f.start(1, 5);
        let a = f.next(1);
        let b = f.next(1);
        f.start(1, 6);
        let c = f.next(1);
        assert!(a < b && b < c);
    }
}
