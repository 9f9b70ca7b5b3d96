//! `ctxlock.CancelToken`: a thin class over the core's token tree.

use std::sync::Mutex;
use std::time::Instant;

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;

use crate::core::cancel::{CancelToken, Reason, Registration};

use super::args;
use super::blocking;
use super::errors::{deadline_reason, reason as make_reason, reason_object};

/// A cancellation signal with a reason, an optional deadline and children.
#[pyclass(name = "CancelToken", module = "ctxlock", frozen)]
pub(crate) struct PyCancelToken {
    pub(crate) token: CancelToken,
}

/// A deadline in seconds from now -> the instant and the `LockTimeout` reason it cancels with.
fn own_deadline(
    py: Python<'_>,
    deadline: Option<&Bound<'_, PyAny>>,
) -> PyResult<Option<(Instant, Reason)>> {
    match args::timeout(deadline, "deadline")?.deadline() {
        None => Ok(None),
        Some(at) => Ok(Some((at, deadline_reason(py)?))),
    }
}

/// An `Instant` on the `time.monotonic()` clock.
fn monotonic(py: Python<'_>, at: Instant) -> PyResult<f64> {
    static MONOTONIC: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    let clock = MONOTONIC.get_or_try_init(py, || {
        py.import("time")?.getattr("monotonic").map(Bound::unbind)
    })?;
    let now_py: f64 = clock.bind(py).call0()?.extract()?;
    let now = Instant::now();
    Ok(if at >= now {
        now_py + (at - now).as_secs_f64()
    } else {
        now_py - (now - at).as_secs_f64()
    })
}

/// Run a Python callable from a cancellation: registered as a user callback, so it runs
/// in the thread that calls `cancel()`, or for a deadline on a runner thread.
pub(crate) fn call_soon_unraisable(f: Py<PyAny>) -> impl FnOnce(&Reason) + Send + 'static {
    move |_| {
        // try_attach: a deadline may fire while the interpreter is finalizing.
        Python::try_attach(|py| {
            if let Err(e) = f.call0(py) {
                e.write_unraisable(py, Some(f.bind(py)));
            }
        });
    }
}

#[pymethods]
impl PyCancelToken {
    #[new]
    #[pyo3(signature = (*, deadline = None))]
    fn new(py: Python<'_>, deadline: Option<&Bound<'_, PyAny>>) -> PyResult<Self> {
        Ok(PyCancelToken {
            token: CancelToken::new(own_deadline(py, deadline)?),
        })
    }

    #[pyo3(signature = (*, deadline = None))]
    fn child(&self, py: Python<'_>, deadline: Option<&Bound<'_, PyAny>>) -> PyResult<Self> {
        Ok(PyCancelToken {
            token: self.token.child(own_deadline(py, deadline)?),
        })
    }

    #[pyo3(signature = (reason = None))]
    fn cancel(&self, py: Python<'_>, reason: Option<Py<PyAny>>) {
        let obj = reason.unwrap_or_else(|| py.None());
        self.token.cancel(make_reason(obj));
    }

    #[getter]
    fn cancelled(&self) -> bool {
        self.token.is_cancelled()
    }

    #[getter]
    fn reason(&self, py: Python<'_>) -> Py<PyAny> {
        match self.token.reason() {
            Some(r) => reason_object(py, &r),
            None => py.None(),
        }
    }

    #[getter]
    fn deadline(&self, py: Python<'_>) -> PyResult<Option<f64>> {
        self.token
            .deadline()
            .map(|at| monotonic(py, at))
            .transpose()
    }

    #[pyo3(signature = (timeout = None))]
    fn wait(&self, py: Python<'_>, timeout: Option<&Bound<'_, PyAny>>) -> PyResult<bool> {
        let timeout = args::timeout(timeout, "timeout")?;
        if self.token.is_cancelled() {
            return Ok(true);
        }
        let until = timeout.deadline();
        let token = &self.token;
        blocking::detached(py, |interrupt| token.wait(until, interrupt))
    }

    fn wait_async<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        super::asyncio::shim_fn!(slf.py(), "wait_token")?.call1((slf,))
    }

    fn on_cancel(&self, r#fn: Bound<'_, PyAny>) -> PyResult<OnCancel> {
        if !r#fn.is_callable() {
            return Err(PyTypeError::new_err("on_cancel() needs a callable"));
        }
        let registration = self
            .token
            .on_cancel_user(call_soon_unraisable(r#fn.unbind()));
        Ok(OnCancel {
            registration: Mutex::new(registration),
        })
    }

    fn __reduce__(&self) -> PyResult<()> {
        Err(PyTypeError::new_err("cannot pickle 'CancelToken' object"))
    }

    fn __repr__(&self) -> String {
        format!(
            "<ctxlock.CancelToken cancelled={}>",
            if self.token.is_cancelled() {
                "True"
            } else {
                "False"
            }
        )
    }
}

/// What `CancelToken.on_cancel` returns: call it to unregister.
#[pyclass(name = "_OnCancel", module = "ctxlock", frozen)]
pub(crate) struct OnCancel {
    registration: Mutex<Option<Registration>>,
}

#[pymethods]
impl OnCancel {
    /// Unregister; True if that stopped the callback from running.
    fn __call__(&self) -> bool {
        let taken = self
            .registration
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        taken.is_some_and(Registration::unregister)
    }
}
