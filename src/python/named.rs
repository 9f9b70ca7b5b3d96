//! `ctxlock.LockManager` and its named locks: `NamedLock` (a name in one mode, with every
//! member of `Lock`), `NamedSharableLock` (its two modes) and `LockInfo` (`query()`).
//!
//! The rules are the core's (`core/named.rs` for the scope, the driver for acquiring);
//! this file parses the url and the names and says who a holder is.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyString;

use crate::core::named::{check_name, Info, Key, NamedView, ScopedExit, Session, Who};
use crate::core::scopes::{connect, ConnectError};
use crate::core::stats::Statistics;
use crate::core::waiter::Mode;

use super::args::{a_str, utf8};
use super::errors::{backend_reason, BackendError};
use super::kind::{Held, Kind, Lost};
use super::lock::lock_methods;
use super::unlock::PyUnlock;

/// Named locks shared by every client of one scope: this process (``"memory:"``, the
/// default), the processes of this machine (``"file:///dir"``) or many machines
/// (``"postgresql://…"``).
///
/// ``lock(name)`` and ``sharable_lock(name)`` return named locks with the members, rules
/// and errors of ``Lock`` and ``SharableLock``; a name is held in one namespace per scope,
/// so ``lock(n)`` excludes both modes of ``sharable_lock(n)``. Two managers of the same
/// url are two clients of the same locks. A named lock costs no memory while nobody holds
/// or waits for it. ``close()`` (or leaving ``with LockManager(...)``) ends this manager's
/// holds, cancelling their ``Unlock.lost`` tokens, and fails its waiters, later acquires and
/// ``query()``, ``locked()`` and ``statistics()`` with ``BackendError``.
/// At ``"file:///dir"`` (Linux) the directory is made if missing and holds one
/// file, ``ctxlock.table``; a process's holds there are kernel locks, freed when it dies.
/// A manager made before ``fork()`` raises ``BackendError`` in the child (its acquires,
/// and ``query()``, ``statistics()`` and ``locked()`` of it and its locks).
///
/// Raises:
///     TypeError: ``url`` is not a str.
///     ValueError: ``url`` has another scheme or no UTF-8 (a lone surrogate), or a
///         ``file:`` url has no absolute path.
///     BackendError: the scope cannot be reached (or is not available in this build): a
///         directory that cannot be made or used, a damaged ``ctxlock.table``, ...
#[pyclass(name = "LockManager", module = "ctxlock", frozen, weakref)]
pub(crate) struct PyLockManager {
    session: Arc<dyn Session>,
    /// The url as shown: without its password.
    url: String,
    /// The url as given, for pickling only (a child process connects with it).
    given: String,
    closed: AtomicBool,
}

/// A lock name from Python: a non-empty str of at most 1024 UTF-8 bytes.
fn name_of<'py>(name: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyString>> {
    let s = a_str(name, "lock name must be a str")?;
    check_name(utf8(s, "lock name")?).map_err(PyValueError::new_err)?;
    Ok(s.clone())
}

impl PyLockManager {
    fn is_closed(&self) -> bool {
        // ORDERING: a snapshot.
        self.closed.load(Ordering::Relaxed)
    }
}

#[pymethods]
impl PyLockManager {
    #[new]
    #[pyo3(signature = (url = None))]
    fn new(py: Python<'_>, url: Option<&Bound<'_, PyAny>>) -> PyResult<Self> {
        let given = match url {
            None => "memory:".to_owned(),
            Some(u) => utf8(
                a_str(u, "LockManager url must be a str or None")?,
                "LockManager url",
            )?
            .to_owned(),
        };
        // A server scope connects here: the GIL is not held meanwhile.
        let (session, url) = py.detach(|| connect(&given)).map_err(|e| match e {
            ConnectError::BadUrl(why) => PyValueError::new_err(why),
            ConnectError::Backend(why) => BackendError::new_err((why,)),
        })?;
        Ok(PyLockManager {
            session,
            url,
            given,
            closed: AtomicBool::new(false),
        })
    }

    /// The scope's url, without any password.
    #[getter]
    fn url(&self) -> &str {
        &self.url
    }

    /// True once ``close()`` was called.
    #[getter]
    fn closed(&self) -> bool {
        self.is_closed()
    }

    /// The exclusive lock of ``name`` (the exclusive mode of ``sharable_lock(name)``).
    ///
    /// Raises:
    ///     TypeError: ``name`` is not a str.
    ///     ValueError: ``name`` is empty, longer than 1024 UTF-8 bytes, or has no UTF-8
    ///         (a lone surrogate).
    fn lock<'py>(
        slf: &Bound<'py, Self>,
        name: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyNamedLock>> {
        let name = name_of(name)?;
        PyNamedLock::made(slf, &name, name.to_str()?, Mode::Exclusive)
    }

    /// The shared/exclusive lock of ``name``: ``.shared`` and ``.exclusive``, phase-fair.
    ///
    /// Raises:
    ///     TypeError: ``name`` is not a str.
    ///     ValueError: ``name`` is empty, longer than 1024 UTF-8 bytes, or has no UTF-8
    ///         (a lone surrogate).
    fn sharable_lock(
        slf: &Bound<'_, Self>,
        name: &Bound<'_, PyAny>,
    ) -> PyResult<PyNamedSharableLock> {
        let name = name_of(name)?;
        let text = name.to_str()?;
        let view = |mode| PyNamedLock::made(slf, &name, text, mode).map(Bound::unbind);
        Ok(PyNamedSharableLock {
            shared: view(Mode::Shared)?,
            exclusive: view(Mode::Exclusive)?,
        })
    }

    /// Every hold and every waiter whose name starts with ``prefix``, of every client of
    /// the scope, as ``LockInfo`` objects (ordered by name, then by ``since``).
    ///
    /// Raises:
    ///     BackendError: the manager is closed, or (in a child process) was made before
    ///         ``fork()``.
    // The text signature is spelled out: PyO3 shows a default of `String::new()` as `...`.
    #[pyo3(signature = (prefix = String::new()), text_signature = "($self, prefix='')")]
    fn query(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = super::args::prefix)] prefix: String,
    ) -> PyResult<Vec<PyLockInfo>> {
        if let Some(why) = self.session.unanswerable() {
            return Err(BackendError::new_err((why.0,)));
        }
        // Other processes may take up to a second to answer: not with the GIL held (a
        // manager of this process may need it to answer, waking a task).
        let session = &self.session;
        let infos = py.detach(|| session.query(&prefix));
        let names = thread_names(py)?;
        let host = host_name(py)?;
        Ok(infos
            .into_iter()
            .map(|i| PyLockInfo::new(i, host, &names))
            .collect())
    }

    /// End this manager: its holds end (each ``Unlock.lost`` is cancelled with a
    /// ``BackendError``), its waiters, later acquires, ``query()``, ``locked()`` and
    /// ``statistics()`` raise ``BackendError``. Other
    /// managers of the scope are not affected. Calling it again does nothing. A manager
    /// garbage-collected without ``close()`` ends its holds the same way (only a ``with``
    /// entered and never exited can have left one: the rest keep their manager alive).
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        // ORDERING: a flag for `closed`; the session decides which call closes, and a
        // later call returns once that one has ended the holds.
        self.closed.store(true, Ordering::Relaxed);
        let reason = backend_reason(py, "the LockManager was closed")?;
        let session = self.session.clone();
        // Releases may hand locks to blocked threads; nothing here needs the GIL. The
        // holds' `lost` tokens are cancelled here, their callbacks run in this thread.
        super::cancel::raising_interrupts(|| py.detach(move || session.close(reason)))?;
        Ok(())
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<()> {
        self.close(py)
    }

    fn __reduce__(slf: &Bound<'_, Self>) -> PyResult<()> {
        Err(super::errors::not_picklable(slf.as_any()))
    }

    fn __repr__(&self) -> String {
        let state = if self.is_closed() { " closed" } else { "" };
        format!("<ctxlock.LockManager {:?}{state}>", self.url)
    }
}

/// This machine's name, as `socket.gethostname()` says (every scope so far is of
/// processes of this machine, or names its owners by this machine's clients).
fn host_name(py: Python<'_>) -> PyResult<&'static str> {
    static HOST: PyOnceLock<String> = PyOnceLock::new();
    HOST.get_or_try_init(py, || -> PyResult<String> {
        py.import("socket")?.call_method0("gethostname")?.extract()
    })
    .map(String::as_str)
}

/// Python's thread names by `threading.get_ident()`.
fn thread_names(py: Python<'_>) -> PyResult<Vec<(u64, String)>> {
    let threads = py.import("threading")?.call_method0("enumerate")?;
    let mut names = Vec::new();
    for t in threads.try_iter()? {
        let t = t?;
        if let (Ok(ident), Ok(name)) = (
            t.getattr("ident").and_then(|i| i.extract::<u64>()),
            t.getattr("name").and_then(|n| n.extract::<String>()),
        ) {
            names.push((ident, name));
        }
    }
    Ok(names)
}

/// One hold or waiter of a named lock, as ``LockManager.query()`` reports it.
#[pyclass(name = "LockInfo", module = "ctxlock", frozen, get_all, weakref)]
pub(crate) struct PyLockInfo {
    /// The lock's name.
    name: String,
    /// ``"exclusive"`` or ``"shared"``.
    mode: &'static str,
    /// ``"held"`` or ``"waiting"``. A hold handed to a waiter that has not taken it up
    /// yet (a task its event loop has not run since) is ``"held"``.
    state: &'static str,
    /// Who: ``"host:pid"``, then the thread's name (and the task's, where known).
    owner: String,
    /// When the hold was granted or the wait began (a ``time.time()`` timestamp; a grant's
    /// is read from the coarse clock, up to one clock tick, a few ms, early). For a hold
    /// not yet taken up, when its wait began.
    since: f64,
}

impl PyLockInfo {
    fn new(i: Info, host: &str, threads: &[(u64, String)]) -> PyLockInfo {
        let mut owner = format!("{}:{}", i.host.as_deref().unwrap_or(host), i.pid);
        // Thread names are known for this process's threads only; a scope wider than the
        // machine may know no thread (0).
        let here = i.pid == std::process::id() && i.host.is_none();
        match threads.iter().find(|(id, _)| here && *id == i.who.thread) {
            Some((_, name)) => owner += &format!(" thread {name:?}"),
            None if i.who.thread == 0 => {}
            None => owner += &format!(" thread {}", i.who.thread),
        }
        if let Some(task) = &i.who.task {
            owner += &format!(" task {task:?}");
        }
        PyLockInfo {
            name: i.name.to_string(),
            mode: mode_name(i.mode),
            state: if i.held { "held" } else { "waiting" },
            owner,
            since: i.since,
        }
    }
}

#[pymethods]
impl PyLockInfo {
    fn __repr__(&self) -> String {
        format!(
            "LockInfo(name={:?}, mode={:?}, state={:?}, owner={:?}, since={})",
            self.name, self.mode, self.state, self.owner, self.since
        )
    }

    fn __reduce__(slf: &Bound<'_, Self>) -> PyResult<()> {
        Err(super::errors::not_picklable(slf.as_any()))
    }
}

/// Why a named lock's repr has no state: its manager was closed, or made before `fork()`
/// (`Session::unanswerable`).
fn unanswered(manager: &Py<PyLockManager>) -> &'static str {
    if manager.get().is_closed() {
        "of a closed manager"
    } else {
        "of a parent process"
    }
}

fn mode_name(mode: Mode) -> &'static str {
    match mode {
        Mode::Exclusive => "exclusive",
        Mode::Shared => "shared",
    }
}

/// A named lock in one mode, from ``LockManager.lock(name)`` or a mode of
/// ``LockManager.sharable_lock(name)``.
///
/// It has the members of ``Lock``, with the same rules and errors, plus ``BackendError``
/// once its manager is closed (or, at the other scopes, when the scope fails). Its
/// ``Unlock`` has a ``fence`` and a ``lost`` token. ``locked()`` and ``statistics()``
/// count the holds and waiters of every client of the scope.
///
/// Pickling (for ``multiprocessing`` children) gives the same lock at a scope other
/// processes share: it pickles as its manager's url, its name and its mode, and is restored
/// from this process's one ``LockManager`` of that url, another client than the pickled
/// lock's manager. A ``"memory:"`` lock is a lock of this process only: pickling it raises
/// ``TypeError``.
#[pyclass(name = "NamedLock", module = "ctxlock", frozen, weakref)]
pub(crate) struct PyNamedLock {
    /// Borrows its name from `name` (dropped after it: fields drop in order).
    view: NamedView,
    name: Py<PyString>,
    manager: Py<PyLockManager>,
}

/// One is made on every `mgr.lock(name)`: from a free list (`freelist.rs`).
impl super::freelist::Pooled for PyNamedLock {
    fn free_list() -> &'static super::freelist::FreeList {
        static LIST: super::freelist::FreeList =
            super::freelist::FreeList::new(super::freelist::NAMED_LOCK);
        &LIST
    }

    fn parts_alone(&self) -> bool {
        true
    }

    fn take_apart(self) {
        let PyNamedLock {
            view,
            name,
            manager,
        } = self;
        // The view borrows the name: it goes first.
        drop(view);
        // SAFETY: attached (`take_apart`'s contract); each pointer is a reference this
        // handle owned, given up by `into_ptr`.
        unsafe {
            pyo3::ffi::Py_DECREF(name.into_ptr());
            pyo3::ffi::Py_DECREF(manager.into_ptr().cast());
        }
    }
}

impl PyNamedLock {
    /// The handle of `name` (a checked lock name, whose UTF-8 is `text`) in `mode`.
    fn made<'py>(
        manager: &Bound<'py, PyLockManager>,
        name: &Bound<'py, PyString>,
        text: &str,
        mode: Mode,
    ) -> PyResult<Bound<'py, PyNamedLock>> {
        // SAFETY: `text` is the UTF-8 of `name`, which CPython keeps in the str object,
        // unchanged, for its whole life (a str is immutable), and the session is the
        // manager's, which it never replaces (a frozen class); the handle keeps `name` and
        // `manager` alive and drops `view` first, and every wait that clones the view
        // holds the handle (through its `Owner`) or borrows it.
        let view =
            unsafe { NamedView::borrowed(&manager.get().session, Key::borrowed(text), mode) };
        let handle = PyNamedLock {
            view,
            name: name.clone().unbind(),
            manager: manager.clone().unbind(),
        };
        super::freelist::new_object(manager.py(), move || handle)
    }
}

/// `lock(name)` through the hand-written entry point (`vectorcall.rs`): an exact `str`
/// that is a valid name; anything else goes to the generated `lock`, which says what is
/// wrong with it.
impl super::vectorcall::FastLookup for PyLockManager {
    #[inline]
    fn lookup<'py>(
        slf: &Bound<'py, Self>,
        name: &Bound<'py, PyAny>,
    ) -> Option<PyResult<Bound<'py, PyAny>>> {
        let name = name.cast_exact::<PyString>().ok()?;
        let text = name.to_str().ok()?;
        check_name(text).ok()?;
        Some(PyNamedLock::made(slf, name, text, Mode::Exclusive).map(Bound::into_any))
    }

    fn generated_lookup() -> &'static std::sync::OnceLock<pyo3::ffi::PyCFunctionFastWithKeywords> {
        static GENERATED: std::sync::OnceLock<pyo3::ffi::PyCFunctionFastWithKeywords> =
            std::sync::OnceLock::new();
        &GENERATED
    }
}

impl PyNamedLock {
    #[inline]
    pub(crate) fn kind(&self) -> &NamedView {
        &self.view
    }
}

lock_methods!(PyNamedLock(NamedView) {
    /// The lock's name.
    #[getter]
    fn name(&self, py: Python<'_>) -> Py<PyString> {
        self.name.clone_ref(py)
    }

    /// ``"exclusive"`` or ``"shared"``.
    #[getter]
    fn mode(&self) -> &'static str {
        mode_name(self.view.mode())
    }

    /// The ``LockManager`` it came from.
    #[getter]
    fn manager(&self, py: Python<'_>) -> Py<PyLockManager> {
        self.manager.clone_ref(py)
    }

    fn __reduce__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        reduce(py, self, mode_name(self.view.mode()))
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        let (name, mode) = (self.view.name(), mode_name(self.view.mode()));
        let Ok(s) = super::acquire::answered(py, &self.view, |v| v.statistics()) else {
            let why = unanswered(&self.manager);
            return format!("<ctxlock.NamedLock {name:?} {mode} ({why})>");
        };
        let state = if s.locked { "locked" } else { "unlocked" };
        format!("<ctxlock.NamedLock {name:?} {mode} {state} waiting={}>", s.waiting)
    }
});

/// The shared/exclusive lock of one name: ``.shared`` and ``.exclusive``, phase-fair as
/// ``SharableLock`` across every client of the scope.
///
/// It pickles as ``NamedLock`` does (url and name; ``TypeError`` at the ``"memory:"`` scope).
#[pyclass(name = "NamedSharableLock", module = "ctxlock", frozen, weakref)]
pub(crate) struct PyNamedSharableLock {
    shared: Py<PyNamedLock>,
    exclusive: Py<PyNamedLock>,
}

#[pymethods]
impl PyNamedSharableLock {
    /// The lock's name.
    #[getter]
    fn name(&self, py: Python<'_>) -> Py<PyString> {
        self.exclusive.get().name.clone_ref(py)
    }

    /// The ``LockManager`` it came from.
    #[getter]
    fn manager(&self, py: Python<'_>) -> Py<PyLockManager> {
        self.exclusive.get().manager.clone_ref(py)
    }

    /// A snapshot of the whole lock, across every client of the scope: ``locked`` in either
    /// mode, ``holders`` (one writer or the readers) and ``waiting`` (both modes share one
    /// queue). ``BackendError`` for a closed manager, or in the child for a manager made
    /// before ``fork()``.
    fn statistics(&self, py: Python<'_>) -> PyResult<crate::python::stats::PyLockStatistics> {
        let (exclusive, shared) = (&self.exclusive.get().view, &self.shared.get().view);
        super::acquire::answered(py, exclusive, |exclusive| {
            crate::core::stats::Statistics::of_both(exclusive.statistics(), shared.statistics())
        })
        .map(Into::into)
    }

    /// The shared mode: its holders share the lock.
    #[getter]
    fn shared(&self, py: Python<'_>) -> Py<PyNamedLock> {
        self.shared.clone_ref(py)
    }

    /// The exclusive mode: one holder, nobody else (the same lock as ``manager.lock(name)``).
    #[getter]
    fn exclusive(&self, py: Python<'_>) -> Py<PyNamedLock> {
        self.exclusive.clone_ref(py)
    }

    fn __reduce__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        reduce(py, self.exclusive.get(), "sharable")
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        let (v, shared) = (&self.exclusive.get().view, &self.shared.get().view);
        let Ok((exclusive, shared)) =
            super::acquire::answered(py, v, |v| (v.statistics(), shared.statistics()))
        else {
            let why = unanswered(&self.exclusive.get().manager);
            return format!("<ctxlock.NamedSharableLock {:?} ({why})>", v.name());
        };
        let state = if exclusive.locked {
            "locked exclusive".to_owned()
        } else if shared.locked {
            format!("shared by {}", shared.holders)
        } else {
            "unlocked".to_owned()
        };
        format!(
            "<ctxlock.NamedSharableLock {:?} {state} waiting={}>",
            v.name(),
            exclusive.waiting
        )
    }
}

/// `__reduce__` of a named lock: what `ctxlock._restore._reduce` makes of its manager's url,
/// its name and `which` object it is (`"exclusive"`, `"shared"` or `"sharable"`): the
/// restore function and its arguments, or a `TypeError` for a scope of this process only.
/// The rules are there. Looked up at each call (pickling is rare), so a test can replace it.
fn reduce<'py>(py: Python<'py>, lock: &PyNamedLock, which: &str) -> PyResult<Bound<'py, PyAny>> {
    let url = lock.manager.get().given.as_str();
    py.import("ctxlock._restore")?
        .getattr("_reduce")?
        .call1((url, lock.name.bind(py), which))
}

/// A named lock as the binding uses every kind: the core's `NamedView`.
impl Kind for NamedView {
    fn mode(&self) -> Mode {
        NamedView::mode(self)
    }

    fn is_locked(&self) -> bool {
        NamedView::is_locked(self)
    }

    #[inline]
    fn take_up(&self, scoped: bool) -> Result<Held, String> {
        self.record(scoped, Who::thread()).map_err(|f| f.0)
    }

    #[inline]
    fn try_take_up(&self) -> Option<Result<Held, String>> {
        self.try_lock_recorded(Who::thread())
            .map(|r| r.map_err(|f| f.0))
    }

    #[inline]
    fn release_held(&self, held: Held) -> bool {
        self.release(held)
    }

    fn fence(&self, held: Held) -> Option<u64> {
        Some(held)
    }

    fn lost(&self, held: Held) -> Option<Lost> {
        Some(NamedView::lost(self, held))
    }

    fn unlock_scoped(&self) -> bool {
        self.release_scoped(&Who::thread()) != ScopedExit::NotHeld
    }

    fn names_owners(&self) -> bool {
        true
    }

    fn tag_hold(&self, tag: u64) {
        NamedView::tag_hold(self, tag)
    }

    fn untag_hold(&self, tag: u64) {
        NamedView::untag_hold(self, tag)
    }

    fn has_tagged_hold(&self, tag: u64) -> bool {
        NamedView::has_tagged_hold(self, tag)
    }

    fn statistics(&self) -> Statistics {
        NamedView::statistics(self)
    }

    fn asks_others(&self) -> bool {
        NamedView::asks_others(self)
    }

    fn unanswerable(&self) -> Option<String> {
        NamedView::unanswerable(self).map(|f| f.0)
    }
}
