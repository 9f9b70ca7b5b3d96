//! The PyO3 layer: thin, mechanical wrappers over the core, one class family per file.

use pyo3::prelude::*;

mod args;
pub(crate) mod asyncio;
mod blocking;
pub(crate) mod cancel;
mod errors;
pub(crate) mod lock;
mod sharable;
mod unlock;

/// The extension module `ctxlock._ctxlock`; the public API is re-exported by `ctxlock`.
#[pymodule(gil_used = false)]
fn _ctxlock(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_class::<lock::PyLock>()?;
    m.add_class::<sharable::PySharableLock>()?;
    m.add_class::<sharable::PyLockView>()?;
    m.add_class::<cancel::PyCancelToken>()?;
    m.add_class::<unlock::PyUnlock>()?;
    Ok(())
}
