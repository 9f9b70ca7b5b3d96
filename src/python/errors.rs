//! The one place where core errors become Python exceptions.
//!
//! The exception classes are defined in `ctxlock/_errors.py` (`LockTimeout` has two
//! bases, which an extension-made exception type cannot have) and imported here.

use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::core::cancel::Reason;
use crate::core::error::AcquireError;

pyo3::import_exception!(ctxlock._errors, LockTimeout);
pyo3::import_exception!(ctxlock._errors, Cancelled);
pyo3::import_exception!(ctxlock._errors, WouldBlock);
pyo3::import_exception!(ctxlock._errors, BackendError);

/// A Python object carried as a token's cancellation reason.
pub(crate) struct PyReason(pub(crate) Py<PyAny>);

/// The `LockTimeout` a token's deadline cancels it with (`deadline_reason`): told apart
/// from a `LockTimeout` a user cancels a token with, whose acquire must not say that a
/// deadline passed.
struct DeadlineReason(Py<PyAny>);

pub(crate) fn reason(obj: Py<PyAny>) -> Reason {
    std::sync::Arc::new(PyReason(obj))
}

/// The Python object behind a reason (`None` for one that did not come from Python).
pub(crate) fn reason_object(py: Python<'_>, r: &Reason) -> Py<PyAny> {
    if let Some(p) = r.downcast_ref::<PyReason>() {
        return p.0.clone_ref(py);
    }
    if let Some(d) = r.downcast_ref::<DeadlineReason>() {
        return d.0.clone_ref(py);
    }
    // A hold the core found lost (a database session gone): a BackendError saying why.
    match r.downcast_ref::<crate::core::named::Failure>() {
        Some(f) => py
            .get_type::<BackendError>()
            .call1((f.0.as_str(),))
            .map(|e| e.unbind())
            .unwrap_or_else(|_| py.None()),
        None => py.None(),
    }
}

/// The Python exception of an acquire that did not acquire. Every message is the core
/// error's own (`AcquireError`'s `Display`), but that of a user's `LockTimeout` reason;
/// arguments that disagree raise `ValueError`. A token cancelled with a `LockTimeout`
/// reason (by its deadline, see `deadline_reason`, or by a user) times the acquire out,
/// with the reason as the cause; any other reason raises `Cancelled(reason)`.
pub(crate) fn to_pyerr<E: Into<PyErr>>(py: Python<'_>, e: AcquireError<E>) -> PyErr {
    let e = match e {
        AcquireError::Cancelled(r) if r.downcast_ref::<DeadlineReason>().is_some() => {
            AcquireError::TokenDeadline(r)
        }
        e => e,
    };
    let message = e.to_string();
    match e {
        AcquireError::Timeout | AcquireError::TakenNow => LockTimeout::new_err(message),
        AcquireError::TokenDeadline(r) => timed_out_by(py, message, reason_object(py, &r)),
        AcquireError::Cancelled(r) => {
            let reason = reason_object(py, &r);
            if reason.bind(py).is_instance_of::<LockTimeout>() {
                // A user's own `LockTimeout`: a timeout too, with no word of a deadline.
                let message =
                    "the cancel token was cancelled with a LockTimeout before the lock was acquired";
                timed_out_by(py, message.to_owned(), reason)
            } else {
                Cancelled::new_err((reason,))
            }
        }
        AcquireError::WouldBlock => WouldBlock::new_err(message),
        AcquireError::DeadlineWithoutBlocking => PyValueError::new_err(message),
        AcquireError::Abandoned => PyRuntimeError::new_err(message),
        AcquireError::Backend(why) => BackendError::new_err((why,)),
        AcquireError::Interrupted(e) => e.into(),
    }
}

/// A `LockTimeout` saying `message`, caused by a token's `LockTimeout` reason.
fn timed_out_by(py: Python<'_>, message: String, reason: Py<PyAny>) -> PyErr {
    let err = LockTimeout::new_err(message);
    err.set_cause(py, Some(PyErr::from_value(reason.into_bound(py))));
    err
}

/// A new `BackendError` instance saying `why`: the reason a `lost` token cancels with.
pub(crate) fn backend_reason(py: Python<'_>, why: &str) -> PyResult<Reason> {
    let exc = py.get_type::<BackendError>().call1((why,))?;
    Ok(reason(exc.unbind()))
}

/// A new `LockTimeout` instance: the reason a token with a deadline cancels with.
pub(crate) fn deadline_reason(py: Python<'_>) -> PyResult<Reason> {
    let args = PyTuple::new(py, ["the cancel token's deadline passed"])?;
    let exc = py.get_type::<LockTimeout>().call1(args)?;
    Ok(std::sync::Arc::new(DeadlineReason(exc.unbind())))
}

/// What `__reduce__` raises for every class: a lock, token or `Unlock` cannot be pickled or
/// copied. Names the public class (`ctxlock.Lock`), not the Rust type behind it.
pub(crate) fn not_picklable(obj: &Bound<'_, PyAny>) -> PyErr {
    match obj.get_type().fully_qualified_name() {
        Ok(name) => PyTypeError::new_err(format!("cannot pickle '{name}' object")),
        Err(e) => e,
    }
}
