//! The PyO3 layer: thin, mechanical wrappers over the core, one class family per file.

use pyo3::prelude::*;

// Layers, leaves first (each module uses only those above it; `scripts/check-layers.py`
// checks there is no cycle): `args`, `errors`, `dealloc`, `exit_gate`, `blocking`, `kind`,
// `refcount`, `shim`; `cancel`, `task_owner`, `vectorcall`, `stats`; `unlock`, `acquire`;
// `asyncio`; `lock`, `sharable`, `named`.
pub(crate) mod acquire;
mod args;
pub(crate) mod asyncio;
mod blocking;
pub(crate) mod cancel;
mod dealloc;
mod errors;
mod exit_gate;
mod freelist;
pub(crate) mod kind;
pub(crate) mod lock;
mod named;
mod refcount;
mod sharable;
mod shim;
pub(crate) mod stats;
mod task_owner;
mod unlock;
pub(crate) mod vectorcall;

/// The extension module `ctxlock._ctxlock`; the public API is re-exported by `ctxlock`.
#[pymodule(gil_used = false)]
fn _ctxlock(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_class::<lock::PyLock>()?;
    m.add_class::<sharable::PySharableLock>()?;
    m.add_class::<sharable::PyLockView>()?;
    m.add_class::<stats::PyLockStatistics>()?;
    m.add_class::<named::PyLockManager>()?;
    m.add_class::<named::PyNamedLock>()?;
    m.add_class::<named::PyNamedSharableLock>()?;
    m.add_class::<named::PyLockInfo>()?;
    m.add_class::<cancel::PyCancelToken>()?;
    m.add_class::<unlock::PyUnlock>()?;
    freelist::install::<unlock::PyUnlock>(m.py());
    freelist::install::<named::PyNamedLock>(m.py());
    m.add("_fast_calls", install_fast_calls(m.py())?)?;
    let after_fork = wrap_pyfunction!(after_fork_in_child, m)?;
    let kwargs = pyo3::types::PyDict::new(m.py());
    kwargs.set_item("after_in_child", after_fork)?;
    m.py()
        .import("os")?
        .call_method("register_at_fork", (), Some(&kwargs))?;
    // Callbacks run last-in first-out: this one after those registered once ctxlock
    // was imported (which may still use the file scope).
    m.py()
        .import("atexit")?
        .call_method1("register", (wrap_pyfunction!(before_exit, m)?,))?;
    Ok(())
}

/// Registered with `atexit`: let the calls into Python under way in other threads end
/// (`exit_gate.rs`), then stop the scopes' helper threads (see
/// `core/scopes.rs`); without the GIL, which those calls and helpers may be waiting for.
#[pyfunction]
fn before_exit(py: Python<'_>) {
    py.detach(|| {
        exit_gate::wait_for_calls();
        crate::core::scopes::before_exit();
    });
}

/// Install the hand-written entry points (`vectorcall.rs`) and the own construction of
/// the objects made per acquire (`freelist.rs`); returns the names of those installed
/// (the module shows them as `_fast_calls`, so a test notices when a PyO3 upgrade makes
/// them fall back to PyO3's own).
fn install_fast_calls(py: Python<'_>) -> PyResult<Vec<&'static str>> {
    let mut installed = Vec::new();
    if vectorcall::install_acquire::<lock::PyLock>(py)? {
        installed.push("Lock.acquire");
    }
    if vectorcall::install_acquire::<sharable::PyLockView>(py)? {
        installed.push("LockView.acquire");
    }
    if vectorcall::install_acquire::<named::PyNamedLock>(py)? {
        installed.push("NamedLock.acquire");
    }
    for (names, (entered, exited)) in [
        (
            ["Lock.__enter__", "Lock.__exit__"],
            vectorcall::install_with::<lock::PyLock>(py)?,
        ),
        (
            ["LockView.__enter__", "LockView.__exit__"],
            vectorcall::install_with::<sharable::PyLockView>(py)?,
        ),
        (
            ["NamedLock.__enter__", "NamedLock.__exit__"],
            vectorcall::install_with::<named::PyNamedLock>(py)?,
        ),
        (
            ["Lock.__aenter__", "Lock.__aexit__"],
            vectorcall::install_async_with::<lock::PyLock>(py)?,
        ),
        (
            ["LockView.__aenter__", "LockView.__aexit__"],
            vectorcall::install_async_with::<sharable::PyLockView>(py)?,
        ),
        // Not `NamedLock`'s: its holds record their task (`query()`), which takes calls
        // into asyncio that the generated functions make with PyO3's attach count.
    ] {
        let done = names.into_iter().zip([entered, exited]);
        installed.extend(done.filter(|&(_, ok)| ok).map(|(name, _)| name));
    }
    if vectorcall::install_finished_awaitable::<asyncio::Ready>(py) {
        installed.push("_Ready.__await__ and __next__");
    }
    if vectorcall::install_lookup::<named::PyLockManager>(py)? {
        installed.push("LockManager.lock");
    }
    // Objects PyO3 made, to learn where their values sit: then the objects made on every
    // acquire are made and freed without PyO3's constructor and deallocator (`freelist.rs`).
    let manager = py.get_type::<named::PyLockManager>().call0()?;
    let named = manager.call_method1("lock", ("ctxlock:layout",))?;
    if freelist::learn_layout(named.cast::<named::PyNamedLock>()?) {
        installed.push("NamedLock (made and freed here)");
    }
    let lock = py.get_type::<lock::PyLock>().call0()?;
    let unlock = lock.call_method0("acquire")?;
    if freelist::learn_layout(unlock.cast::<unlock::PyUnlock>()?) {
        installed.push("Unlock (made and freed here)");
    }
    if vectorcall::install_call::<unlock::PyUnlock>(py, || Ok((lock, unlock)))? {
        installed.push("Unlock.__call__");
    }
    Ok(installed)
}

/// Registered with `os.register_at_fork`: mend the core in a forked child (see `core/fork.rs`).
#[pyfunction]
fn after_fork_in_child() {
    crate::core::fork::after_fork_in_child();
    freelist::after_fork_in_child();
    exit_gate::after_fork_in_child();
}
