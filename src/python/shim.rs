//! The Python half of the asyncio waits, `ctxlock._asyncio`: its functions, looked up once.

/// A function of `ctxlock._asyncio`, looked up once (a `PyOnceLock` per call site).
macro_rules! shim_fn {
    ($py:expr, $name:literal) => {{
        static FUNCTION: pyo3::sync::PyOnceLock<pyo3::Py<pyo3::PyAny>> =
            pyo3::sync::PyOnceLock::new();
        FUNCTION.import($py, "ctxlock._asyncio", $name)
    }};
}
pub(crate) use shim_fn;
