//! The Python half of `CancelToken.wait_async`, `ctxlock._asyncio`: its functions,
//! looked up once. (The lock's own waits are all in `asyncio.rs`.)

/// A function of `ctxlock._asyncio`, looked up once (a `PyOnceLock` per call site).
macro_rules! shim_fn {
    ($py:expr, $name:literal) => {{
        static FUNCTION: pyo3::sync::PyOnceLock<pyo3::Py<pyo3::PyAny>> =
            pyo3::sync::PyOnceLock::new();
        FUNCTION.import($py, "ctxlock._asyncio", $name)
    }};
}
pub(crate) use shim_fn;
