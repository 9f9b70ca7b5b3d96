//! Passes PyO3's interpreter cfgs (`Py_GIL_DISABLED`, `Py_LIMITED_API`, `PyPy`, ...) to
//! this crate, so the Python layer can tell a free-threaded build from a GIL build.
//! Without the `python` feature there is no interpreter to ask and nothing to do.

fn main() {
    #[cfg(feature = "python")]
    pyo3_build_config::use_pyo3_cfgs();
}
