//! The PyO3 layer: thin, mechanical wrappers over the core, one class family per file.

use pyo3::prelude::*;

mod args;
pub(crate) mod asyncio;
mod blocking;
pub(crate) mod cancel;
mod dealloc;
mod errors;
mod kind;
pub(crate) mod lock;
mod sharable;
mod unlock;
mod vectorcall;

/// The extension module `ctxlock._ctxlock`; the public API is re-exported by `ctxlock`.
#[pymodule(gil_used = false)]
fn _ctxlock(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_class::<lock::PyLock>()?;
    m.add_class::<sharable::PySharableLock>()?;
    m.add_class::<sharable::PyLockView>()?;
    m.add_class::<cancel::PyCancelToken>()?;
    m.add_class::<unlock::PyUnlock>()?;
    m.add("_fast_calls", vectorcall::install(m.py())?)?;
    let after_fork = wrap_pyfunction!(after_fork_in_child, m)?;
    let kwargs = pyo3::types::PyDict::new(m.py());
    kwargs.set_item("after_in_child", after_fork)?;
    m.py()
        .import("os")?
        .call_method("register_at_fork", (), Some(&kwargs))?;
    Ok(())
}

/// Registered with `os.register_at_fork`: mend the core in a forked child (see `core/fork.rs`).
#[pyfunction]
fn after_fork_in_child() {
    crate::core::fork::after_fork_in_child();
}
