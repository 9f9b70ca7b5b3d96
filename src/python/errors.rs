//! The one place where core errors become Python exceptions.
//!
//! The exception classes are defined in `ctxlock/_errors.py` (`LockTimeout` has two
//! bases, which an extension-made exception type cannot have) and imported here.

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::core::cancel::Reason;
use crate::core::error::AcquireError;

pyo3::import_exception!(ctxlock._errors, LockTimeout);
pyo3::import_exception!(ctxlock._errors, Cancelled);
pyo3::import_exception!(ctxlock._errors, WouldBlock);

/// A Python object carried as a token's cancellation reason.
pub(crate) struct PyReason(pub(crate) Py<PyAny>);

pub(crate) fn reason(obj: Py<PyAny>) -> Reason {
    std::sync::Arc::new(PyReason(obj))
}

/// The Python object behind a reason (`None` for one that did not come from Python).
pub(crate) fn reason_object(py: Python<'_>, r: &Reason) -> Py<PyAny> {
    match r.downcast_ref::<PyReason>() {
        Some(p) => p.0.clone_ref(py),
        None => py.None(),
    }
}

/// The error an acquire raises when its token was cancelled with `reason`: a token
/// cancelled by a deadline (its reason is a `LockTimeout`) times out the acquire.
pub(crate) fn cancelled(py: Python<'_>, r: &Reason) -> PyErr {
    let obj = reason_object(py, r);
    if obj.bind(py).is_instance_of::<LockTimeout>() {
        let err =
            LockTimeout::new_err("the cancel token's deadline passed before the lock was acquired");
        err.set_cause(py, Some(PyErr::from_value(obj.into_bound(py))));
        err
    } else {
        Cancelled::new_err((obj,))
    }
}

pub(crate) fn to_pyerr(py: Python<'_>, e: AcquireError<PyErr>) -> PyErr {
    match e {
        AcquireError::Timeout => {
            LockTimeout::new_err("the deadline passed before the lock was acquired")
        }
        AcquireError::Cancelled(r) => cancelled(py, &r),
        AcquireError::WouldBlock => WouldBlock::new_err("the lock is taken"),
        AcquireError::Interrupted(e) => e,
    }
}

/// A new `LockTimeout` instance: the reason a token with a deadline cancels with.
pub(crate) fn deadline_reason(py: Python<'_>) -> PyResult<Reason> {
    let args = PyTuple::new(py, ["the cancel token's deadline passed"])?;
    let exc = py.get_type::<LockTimeout>().call1(args)?;
    Ok(reason(exc.unbind()))
}

/// What `__reduce__` raises for every class: a lock, token or `Unlock` cannot be pickled or
/// copied. Names the public class (`ctxlock.Lock`), not the Rust type behind it.
pub(crate) fn not_picklable(obj: &Bound<'_, PyAny>) -> PyErr {
    match obj.get_type().fully_qualified_name() {
        Ok(name) => PyTypeError::new_err(format!("cannot pickle '{name}' object")),
        Err(e) => e,
    }
}
