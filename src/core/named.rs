//! Named locks: the contract every scope keeps (`LockManager(url)`), and the seam a scope
//! plugs into.
//!
//! A scope is a [`Session`]: one client (one manager) of the locks of one url. Every
//! operation names its lock by a [`Key`] (the name, hashed once) and a mode. A
//! [`NamedView`] is a name in a mode of one session; it implements [`RawLock`], so the
//! acquire driver, a thread's wait and a task's wait are the ones every kind uses, and
//! the binding has one class for the named locks of every scope.
//!
//! The scopes, each in its own file, and `scopes.rs`, where one line per scope picks it
//! by url (`connect`).
//!
//! What a session adds to a lock, at every scope: a fence for each hold (per name,
//! increasing in grant order), a record of each hold and waiter (`query()`), a `lost`
//! token for each hold (cancelled if the hold ends without its `Unlock`), and `close`.

use std::hash::BuildHasher;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};

use super::cancel::{CancelToken, Reason};
use super::raw::{Compete, Enqueued, Notify, RawLock, RawWaiter};
use super::stats::Statistics;
use super::waiter::Mode;

/// The longest name, in UTF-8 bytes (the contract's limit, the same at every scope).
pub const MAX_NAME_BYTES: usize = 1024;

/// One client of a scope: what a kind of named lock implements.
///
/// # Contract
/// Each method acts on the lock `key` names, in `mode` where one is given. A hold starts
/// by a try or a grant to a waiter (as for every [`RawLock`]); the caller then takes it
/// up by `record` (or got it recorded by `try_lock_recorded`), which issues its fence,
/// and gives it back by `release` with that fence (or `release_scoped`). A hold taken but
/// never recorded (a grant a waiter passes on) is given back by `unlock`. After `close`,
/// or when the scope fails, `failure` says why, acquires fail, and holds that ended
/// without their `Unlock` have their `lost` token cancelled.
pub trait Session: Send + Sync {
    /// Take the lock without waiting (no record).
    fn try_lock(&self, key: &Key, mode: Mode) -> bool;
    /// Take the lock without waiting and record the hold: its fence, or `None` if the
    /// lock is taken or cannot be taken (`failure` says why).
    fn try_lock_recorded(&self, key: &Key, mode: Mode, who: Who) -> Option<Result<u64, Failure>>;
    /// Give back a hold that has no record.
    fn unlock(&self, key: &Key, mode: Mode) -> bool;
    /// Take the lock if free, else queue a waiter woken through `notify`.
    fn enqueue(
        self: Arc<Self>,
        key: &Key,
        mode: Mode,
        notify: Notify,
        compete: Compete,
    ) -> Enqueued<Box<dyn RawWaiter>>;
    /// Record a hold just taken (scoped: a `with` hold); its fence. If the session
    /// failed meanwhile the hold is given back and this fails.
    fn record(&self, key: &Key, mode: Mode, scoped: bool, who: Who) -> Result<u64, Failure>;
    /// Give back the recorded hold with this fence; false if it has ended.
    fn release(&self, key: &Key, mode: Mode, fence: u64) -> bool;
    /// Give back one scoped hold of this mode taken through this session (never another
    /// client's): `who`'s if it has one (its task's, else its thread's), else any. A
    /// `with` whose hold was lost finds that it ended ([`ScopedExit::Ended`]) and gives
    /// back nothing: never a hold of another `with` still running.
    fn release_scoped(&self, key: &Key, mode: Mode, who: &Who) -> ScopedExit;
    /// The `lost` token of the hold with this fence.
    fn lost(&self, key: &Key, fence: u64) -> Lost;
    /// The lock's holders in this mode and its waiters, across every client.
    fn statistics(&self, key: &Key, mode: Mode) -> Statistics;
    /// The binding's tags of `async with` holds (see `TaskOwner`).
    fn tag_hold(&self, key: &Key, mode: Mode, tag: u64);
    fn untag_hold(&self, key: &Key, mode: Mode, tag: u64);
    fn has_tagged_hold(&self, key: &Key, mode: Mode, tag: u64) -> bool;
    /// Every hold and waiter of every client whose name starts with `prefix`.
    fn query(&self, prefix: &str) -> Vec<Info>;
    /// Whether `statistics` and `query` ask other processes (and so may wait for them);
    /// otherwise they answer from this process's tables at once.
    fn asks_others(&self) -> bool {
        false
    }
    /// End this client: its holds end (their `lost` cancelled with `reason`), its
    /// waiters and later acquires fail. Returns how many holds ended; idempotent (a call
    /// made while another ends the holds returns once they have ended).
    fn close(&self, reason: Reason) -> usize;
    /// Why the locks of this session cannot be acquired, if they cannot.
    fn failure(&self) -> Option<Failure>;
    /// Why this session cannot say who holds and waits (`query`, `statistics`), if it
    /// cannot: a closed manager, which no longer reaches its scope (the same answer at
    /// every scope, though the in-process one could still give one), or a manager made
    /// before `fork()`, in the child, whose records, descriptors and connections are the
    /// parent's.
    fn unanswerable(&self) -> Option<Failure> {
        None
    }
}

/// What the exit of a `with` found ([`Session::release_scoped`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScopedExit {
    /// It gave back its hold.
    Released,
    /// Its hold had ended without it (lost with the scope's connection): nothing to give
    /// back, and nobody else's hold was given back instead.
    Ended,
    /// No scoped hold of this session and mode, live or ended.
    NotHeld,
}

/// Who holds or waits: the thread (`pthread_self`, which is Python's
/// `threading.get_ident()`) and, for an asynchronous task, its name.
#[derive(Clone, Debug, Default)]
pub struct Who {
    pub thread: u64,
    pub task: Option<Arc<str>>,
}

impl Who {
    /// The calling thread, and the task it runs for if the embedding said (`as_task`).
    pub fn thread() -> Who {
        Who {
            // SAFETY: `pthread_self` has no preconditions and always succeeds.
            thread: unsafe { libc::pthread_self() } as u64,
            // ORDERING: a hint that saves the thread-local lookup while no task was ever
            // named; a thread that named one (`as_task`) sees its own store.
            task: if TASKS_NAMED.load(Ordering::Relaxed) {
                TASK.with(|t| t.borrow().clone())
            } else {
                None
            },
        }
    }
}

/// Set once a task was named (`as_task`); until then no thread has a task to read.
static TASKS_NAMED: AtomicBool = AtomicBool::new(false);

thread_local! {
    /// The task this thread acquires for, while `as_task` runs.
    static TASK: std::cell::RefCell<Option<Arc<str>>> = const { std::cell::RefCell::new(None) };
}

/// Run `f` with holds and waits this thread records said to be `task`'s (an
/// asynchronous task's name, for `query()`).
pub fn as_task<T>(task: Option<Arc<str>>, f: impl FnOnce() -> T) -> T {
    if task.is_some() && !TASKS_NAMED.load(Ordering::Relaxed) {
        // ORDERING: see `Who::thread`.
        TASKS_NAMED.store(true, Ordering::Relaxed);
    }
    struct Restore(Option<Arc<str>>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let old = self.0.take();
            TASK.with(|t| *t.borrow_mut() = old);
        }
    }
    let _restore = Restore(TASK.with(|t| t.replace(task)));
    f()
}

/// One hold or wait, as `query()` reports it.
#[derive(Clone, Debug)]
pub struct Info {
    pub name: Arc<str>,
    pub mode: Mode,
    /// Held (true) or waiting.
    pub held: bool,
    pub who: Who,
    /// The process of the holder or waiter (this one, except at scopes wider than it).
    pub pid: u32,
    /// Its machine, when the scope knows it is another one (`None`: this machine).
    pub host: Option<Arc<str>>,
    /// Seconds since the Unix epoch at the grant or at the start of the wait.
    pub since: f64,
}

/// Why a named lock cannot be used, in words an operator can act on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure(pub String);

impl Failure {
    /// Its manager was closed.
    pub fn closed() -> Failure {
        Failure("the LockManager was closed".to_owned())
    }
}

/// What became of the hold a `lost` token is asked for.
pub enum Lost {
    /// Still held: the token cancelled if it is lost.
    Live(CancelToken),
    /// Ended (released, or lost when its manager closed).
    Ended,
}

/// A key's name: owned, or borrowed from a string its embedding keeps alive (a Python
/// `str`, whose UTF-8 is fixed for its life), so that a handle costs no allocation.
#[derive(Clone)]
enum Name {
    Owned(Arc<str>),
    /// See [`Client::view_borrowed`] for why it stays valid.
    Borrowed(NonNull<str>),
}

// SAFETY: a borrowed name is an immutable string that its owner keeps alive and
// unchanged for as long as any view refers to it (`Client::view_borrowed`'s contract);
// reading it from any thread is then sound.
unsafe impl Send for Name {}
// SAFETY: as for Send: it is only ever read.
unsafe impl Sync for Name {}

impl Name {
    fn as_str(&self) -> &str {
        match self {
            Name::Owned(s) => s,
            // SAFETY: valid and unchanged while any view holds it (see the type).
            Name::Borrowed(p) => unsafe { p.as_ref() },
        }
    }

    /// An owned copy, for an entry that outlives the handle that made it.
    fn to_arc(&self) -> Arc<str> {
        match self {
            Name::Owned(s) => s.clone(),
            Name::Borrowed(_) => Arc::from(self.as_str()),
        }
    }
}

/// A name and its hash, computed once per handle.
#[derive(Clone)]
pub struct Key {
    name: Name,
    hash: u64,
}

/// The hasher of every key: seeded once per process, so that every session of a scope
/// in this process agrees on where a name goes.
fn hasher() -> &'static hashbrown::DefaultHashBuilder {
    static HASHER: OnceLock<hashbrown::DefaultHashBuilder> = OnceLock::new();
    HASHER.get_or_init(Default::default)
}

impl Key {
    /// The key of a checked name (`check_name`).
    pub fn new(name: Arc<str>) -> Key {
        let hash = hasher().hash_one(&*name);
        Key::with_hash(name, hash)
    }

    pub(crate) fn with_hash(name: Arc<str>, hash: u64) -> Key {
        Key {
            name: Name::Owned(name),
            hash,
        }
    }

    /// [`Key::new`] over a name it does not copy.
    ///
    /// # Safety
    /// `name` must stay valid and unchanged for as long as the key or any clone of it
    /// lives (the binding's handle keeps the Python `str` it points into, and drops its
    /// view first; the waits that clone a key live no longer than the handle).
    pub unsafe fn borrowed(name: &str) -> Key {
        Key {
            name: Name::Borrowed(NonNull::from(name)),
            hash: hasher().hash_one(name),
        }
    }

    pub fn name(&self) -> &str {
        self.name.as_str()
    }

    pub fn hash(&self) -> u64 {
        self.hash
    }

    /// An owned copy of the name, for an entry that outlives the handle that made it.
    pub fn to_arc(&self) -> Arc<str> {
        self.name.to_arc()
    }
}

/// A view's session: shared, or borrowed from an `Arc` its embedding keeps alive, so
/// that a handle made per call costs no two atomic reference-count updates.
#[derive(Clone)]
enum SessionRef {
    Owned(Arc<dyn Session>),
    /// See [`NamedView::borrowed`] for why it stays valid.
    Borrowed(NonNull<dyn Session>),
}

// SAFETY: a borrowed session is an `Arc<dyn Session>`'s value (Send + Sync) that its owner
// keeps alive for as long as any view refers to it (`NamedView::borrowed`'s contract).
unsafe impl Send for SessionRef {}
// SAFETY: as for Send.
unsafe impl Sync for SessionRef {}

impl std::ops::Deref for SessionRef {
    type Target = dyn Session;

    #[inline]
    fn deref(&self) -> &(dyn Session + 'static) {
        match self {
            SessionRef::Owned(s) => &**s,
            // SAFETY: the `Arc`'s value, alive while any view holds it (see the type).
            SessionRef::Borrowed(p) => unsafe { p.as_ref() },
        }
    }
}

impl SessionRef {
    /// A shared reference to the session (for a wait, which may outlive the view).
    fn to_arc(&self) -> Arc<dyn Session> {
        match self {
            SessionRef::Owned(s) => s.clone(),
            // SAFETY: `p` is `Arc::as_ptr` of an `Arc` that is still alive (see the type),
            // so its strong count may be raised and one more `Arc` made of it.
            SessionRef::Borrowed(p) => unsafe {
                Arc::increment_strong_count(p.as_ptr());
                Arc::from_raw(p.as_ptr())
            },
        }
    }
}

/// A named lock in one mode, as one session acquires it.
#[derive(Clone)]
pub struct NamedView {
    session: SessionRef,
    key: Key,
    mode: Mode,
}

impl NamedView {
    pub fn new(session: Arc<dyn Session>, key: Key, mode: Mode) -> NamedView {
        NamedView {
            session: SessionRef::Owned(session),
            key,
            mode,
        }
    }

    /// [`NamedView::new`] over a session it does not share.
    ///
    /// # Safety
    /// `session` must stay alive (not be dropped nor replaced) for as long as the view or
    /// any clone of it lives, as for [`Key::borrowed`]'s name: the binding's handle keeps
    /// the manager that owns it.
    pub unsafe fn borrowed(session: &Arc<dyn Session>, key: Key, mode: Mode) -> NamedView {
        // From `Arc::as_ptr`, not from a reference to the value: the pointer may then
        // reach the reference counts beside the value (`SessionRef::to_arc`).
        let session = NonNull::new(Arc::as_ptr(session).cast_mut()).expect("an Arc is never null");
        NamedView {
            session: SessionRef::Borrowed(session),
            key,
            mode,
        }
    }

    pub fn name(&self) -> &str {
        self.key.name()
    }

    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// See [`Session::record`].
    pub fn record(&self, scoped: bool, who: Who) -> Result<u64, Failure> {
        self.session.record(&self.key, self.mode, scoped, who)
    }

    /// See [`Session::try_lock_recorded`].
    #[inline]
    pub fn try_lock_recorded(&self, who: Who) -> Option<Result<u64, Failure>> {
        self.session.try_lock_recorded(&self.key, self.mode, who)
    }

    /// Release the hold with this fence (an `Unlock`'s).
    #[inline]
    pub fn release(&self, fence: u64) -> bool {
        self.session.release(&self.key, self.mode, fence)
    }

    /// See [`Session::release_scoped`].
    pub fn release_scoped(&self, who: &Who) -> ScopedExit {
        self.session.release_scoped(&self.key, self.mode, who)
    }

    /// The `lost` token of the hold with this fence.
    pub fn lost(&self, fence: u64) -> Lost {
        self.session.lost(&self.key, fence)
    }

    /// A snapshot of this name in this mode, across every client of the scope.
    pub fn statistics(&self) -> Statistics {
        self.session.statistics(&self.key, self.mode)
    }

    pub fn is_locked(&self) -> bool {
        self.statistics().locked
    }

    /// See [`Session::asks_others`].
    pub fn asks_others(&self) -> bool {
        self.session.asks_others()
    }

    /// See [`Session::unanswerable`].
    pub fn unanswerable(&self) -> Option<Failure> {
        self.session.unanswerable()
    }

    pub fn tag_hold(&self, tag: u64) {
        self.session.tag_hold(&self.key, self.mode, tag)
    }

    pub fn untag_hold(&self, tag: u64) {
        self.session.untag_hold(&self.key, self.mode, tag)
    }

    pub fn has_tagged_hold(&self, tag: u64) -> bool {
        self.session.has_tagged_hold(&self.key, self.mode, tag)
    }
}

/// A named lock, seen by the acquire driver: its session's.
impl RawLock for NamedView {
    type Waiter = Box<dyn RawWaiter>;

    #[inline]
    fn try_lock(&self) -> bool {
        self.session.try_lock(&self.key, self.mode)
    }

    fn unlock(&self) -> bool {
        self.session.unlock(&self.key, self.mode)
    }

    fn enqueue(&self, notify: Notify, compete: Compete) -> Enqueued<Box<dyn RawWaiter>> {
        self.session
            .to_arc()
            .enqueue(&self.key, self.mode, notify, compete)
    }

    #[inline]
    fn failure(&self) -> Option<String> {
        self.session.failure().map(|f| f.0)
    }
}

/// The wall-clock time of a grant, for `query()`. Linux's coarse clock: a read of the
/// time of the last tick (a few ms old at most), where the precise clock costs a third
/// of an uncontended named acquire on a virtual machine.
#[cfg(target_os = "linux")]
pub(crate) fn now_coarse() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is one Linux has.
    let ok = unsafe { libc::clock_gettime(libc::CLOCK_REALTIME_COARSE, &mut ts) } == 0;
    if !ok {
        return now();
    }
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn now_coarse() -> f64 {
    now()
}

/// The wall-clock time, as `time.time()` reads it.
pub(crate) fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
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
