//! Argument conversion for the binding's methods (`deadline=`, `fair=`, names, urls,
//! prefixes; `cancel=` is `cancel::token`): each error names the parameter and what it got.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;

use crate::core::deadline::{BadTimeout, Timeout};

/// `deadline=`/`timeout=`: seconds from now, `None` for no limit.
#[inline]
pub(crate) fn timeout(value: Option<&Bound<'_, PyAny>>, name: &str) -> PyResult<Timeout> {
    let Some(value) = value else {
        return Ok(Timeout::NEVER);
    };
    // `extract::<f64>` takes floats directly and ints (and anything with `__float__`)
    // through `PyFloat_AsDouble`. Its `TypeError` (not a number) becomes one naming the
    // parameter, as does the `ValueError` of a `decimal.Decimal` signaling NaN (a NaN
    // like any other); anything else is the user's own `__float__` raising, and comes
    // out as is.
    let py = value.py();
    let secs = value.extract::<f64>().or_else(|e| {
        // An int too large for a float is still a number of seconds: beyond any limit
        // (infinity, no limit), or negative. So is such an int that an `__index__` gave
        // (`PyFloat_AsDouble` falls back to it).
        if e.is_instance_of::<pyo3::exceptions::PyOverflowError>(py) {
            if let Some(int) = as_int(value) {
                return Ok(if int.lt(0)? {
                    f64::NEG_INFINITY
                } else {
                    f64::INFINITY
                });
            }
        }
        let err = if e.is_instance_of::<PyTypeError>(py) {
            wrong_type(
                value,
                &format!("{name} must be a number of seconds or None"),
            )
        } else if e.is_instance_of::<PyValueError>(py) && signaling_nan(value) {
            bad_timeout(name, BadTimeout::NaN, value)
        } else {
            return Err(e);
        };
        err.set_cause(py, Some(e));
        Err(err)
    })?;
    Timeout::from_secs(secs).map_err(|e| bad_timeout(name, e, float_repr(py, secs)))
}

/// `value` as an int: itself, or what its `__index__` returns (`None` if it has none, or
/// it raised).
#[cold]
fn as_int<'py>(value: &Bound<'py, PyAny>) -> Option<Bound<'py, PyAny>> {
    if value.is_instance_of::<pyo3::types::PyInt>() {
        return Some(value.clone());
    }
    let index = value
        .py()
        .import("operator")
        .and_then(|m| m.getattr("index"));
    index.and_then(|index| index.call1((value,))).ok()
}

/// A float as Python shows it (`-1e-300`, where Rust's `Display` writes every digit).
#[cold]
fn float_repr(py: Python<'_>, secs: f64) -> String {
    pyo3::types::PyFloat::new(py, secs)
        .repr()
        .map_or_else(|_| format!("{secs:?}"), |r| r.to_string())
}

/// The `ValueError` of a deadline that is a number but not a usable one, naming the
/// parameter and what it got.
fn bad_timeout(name: &str, why: BadTimeout, got: impl std::fmt::Display) -> PyErr {
    PyValueError::new_err(format!("{name} {why}, got {got}"))
}

/// Whether `value` is a `decimal.Decimal` signaling NaN, whose `__float__` raises
/// `ValueError` (only asked on that error's path).
#[cold]
fn signaling_nan(value: &Bound<'_, PyAny>) -> bool {
    let is_snan = || -> PyResult<bool> {
        let decimal = value.py().import("decimal")?.getattr("Decimal")?;
        Ok(value.is_instance(&decimal)? && value.call_method0("is_snan")?.is_truthy()?)
    };
    is_snan().unwrap_or(false)
}

/// `blocking=`: its truth value, as `threading.Lock.acquire` takes it (`blocking=0` works).
pub(crate) fn truthy(value: &Bound<'_, PyAny>) -> PyResult<bool> {
    value.is_truthy()
}

/// The error of an acquire given `timeout=`, which it does not take: hint at `deadline=`.
pub(crate) fn timeout_keyword<T: pyo3::PyClass>() -> PyErr {
    timeout_keyword_of(T::NAME, "acquire")
}

/// [`timeout_keyword`] for `class_name.method()`.
fn timeout_keyword_of(class_name: &str, method: &str) -> PyErr {
    PyTypeError::new_err(format!(
        "{class_name}.{method}() got an unexpected keyword argument 'timeout'; \
         ctxlock takes deadline= (seconds from now)"
    ))
}

/// The error for keyword arguments `method` does not take (`acquire_async`, which takes
/// them as `**extra` only to say so): `timeout=` hints at `deadline=`, as for `acquire`;
/// any other is Python's own wording.
pub(crate) fn unexpected_keywords<T: pyo3::PyClass>(
    method: &str,
    extra: &Bound<'_, pyo3::types::PyDict>,
) -> PyErr {
    if extra.contains("timeout").unwrap_or(false) {
        return timeout_keyword_of(T::NAME, method);
    }
    let first = extra
        .iter()
        .next()
        .and_then(|(k, _)| k.str().ok().map(|s| s.to_string()))
        .unwrap_or_default();
    PyTypeError::new_err(format!(
        "{}.{method}() got an unexpected keyword argument '{first}'",
        T::NAME
    ))
}

/// `obj` as a str, or a `TypeError` saying `what` must be one (`what`: "lock name must be a
/// str", "LockManager url must be a str or None") and what it was.
pub(crate) fn a_str<'a, 'py>(
    obj: &'a Bound<'py, PyAny>,
    what: &str,
) -> PyResult<&'a Bound<'py, pyo3::types::PyString>> {
    obj.cast::<pyo3::types::PyString>()
        .map_err(|_| wrong_type(obj, what))
}

/// The UTF-8 of `s`, or a `ValueError` naming `what` ("lock name") whose cause is
/// Python's `UnicodeEncodeError` (a lone surrogate has no UTF-8).
pub(crate) fn utf8<'a>(s: &'a Bound<'_, pyo3::types::PyString>, what: &str) -> PyResult<&'a str> {
    s.to_str().map_err(|e| {
        let err = PyValueError::new_err(format!(
            "{what} must be encodable as UTF-8 (no lone surrogates)"
        ));
        err.set_cause(s.py(), Some(e));
        err
    })
}

/// A `TypeError` saying `what` ("fair must be a bool") and what `obj` was instead.
pub(crate) fn wrong_type(obj: &Bound<'_, PyAny>, what: &str) -> PyErr {
    let type_name = obj
        .get_type()
        .name()
        .map_or_else(|_| "?".to_owned(), |n| n.to_string());
    PyTypeError::new_err(format!("{what}, not {type_name}"))
}

/// `Lock(fair=...)`: a bool, strictly. Any other value is refused by name rather than
/// taken by its truth value: a lock made fair by accident would be slower for no reason.
/// (Through `from_py_with`, so the default stays `False` in the signature users see.)
pub(crate) fn fair(obj: &Bound<'_, PyAny>) -> PyResult<bool> {
    obj.cast::<pyo3::types::PyBool>()
        .map(|b| b.is_true())
        .map_err(|_| wrong_type(obj, "fair must be a bool"))
}

/// `LockManager.query(prefix=...)`: a str.
pub(crate) fn prefix(obj: &Bound<'_, PyAny>) -> PyResult<String> {
    Ok(utf8(a_str(obj, "query prefix must be a str")?, "query prefix")?.to_owned())
}
