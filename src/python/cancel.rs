//! `ctxlock.CancelToken`: a thin class over the core's token tree.

use std::sync::Mutex;
use std::time::Instant;

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;

use crate::core::cancel::{CancelToken, Reason, Registration};

use super::args;
use super::blocking;
use super::errors::{deadline_reason, reason as make_reason, reason_object};

/// A cancellation signal with an optional deadline, shared by any number of acquires.
///
/// A token is cancelled once: by ``cancel(reason)``, by its deadline passing (the reason
/// is then a ``LockTimeout`` instance), or with its parent (with the parent's reason).
/// Cancelling wakes at once every thread and task waiting with this token or one of its
/// descendants. Tokens are safe to use from any thread and any event loop.
///
/// Raises:
///     ValueError: ``deadline`` is negative or NaN.
///     TypeError: ``deadline`` is not a number.
#[pyclass(name = "CancelToken", module = "ctxlock", frozen, weakref)]
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
/// in the thread that calls `cancel()`, or for a deadline on a runner thread. What it
/// raises goes to `sys.unraisablehook`, except what [`raising_interrupts`] takes.
pub(crate) fn call_soon_unraisable(f: Py<PyAny>) -> impl FnOnce(&Reason) + Send + 'static {
    move |_| {
        // Through the exit gate: a deadline may fire as the interpreter exits.
        super::exit_gate::attach(|py| {
            if let Err(e) = f.call0(py) {
                if let Some(e) = keep_interrupt(py, e) {
                    e.write_unraisable(py, Some(f.bind(py)));
                }
            }
        });
    }
}

thread_local! {
    /// In a call of [`raising_interrupts`] on this thread: the first interrupt one of the
    /// callbacks raised (`Some(None)`: none yet). `None` outside such a call.
    static INTERRUPT: std::cell::RefCell<Option<Option<PyErr>>> =
        const { std::cell::RefCell::new(None) };
}

/// A callback's exception that is not an `Exception` (`KeyboardInterrupt`, a Ctrl-C
/// that arrived while the callback ran; `SystemExit`) raised in a call of
/// [`raising_interrupts`] is kept for that call to raise: `None`. Anything else, or a
/// second one, is given back, for `sys.unraisablehook`.
fn keep_interrupt(py: Python<'_>, e: PyErr) -> Option<PyErr> {
    if e.is_instance_of::<pyo3::exceptions::PyException>(py) {
        return Some(e);
    }
    INTERRUPT.with(|kept| match &mut *kept.borrow_mut() {
        Some(slot @ None) => {
            *slot = Some(e);
            None
        }
        _ => Some(e),
    })
}

/// Run `f`, which may cancel tokens in this thread and so run their Python callbacks
/// (`cancel()`, a manager's `close()`): once every callback has run, the first
/// `KeyboardInterrupt`, `SystemExit` or other non-`Exception` one raised comes out of
/// this call, as a Ctrl-C must. (A callback's `Exception` goes to `sys.unraisablehook`:
/// the canceller cannot know what it was for.)
pub(crate) fn raising_interrupts<T>(f: impl FnOnce() -> T) -> PyResult<T> {
    // An outer call's state is set aside, and given back after: its interrupt is its own.
    let outer = INTERRUPT.with(|kept| kept.replace(Some(None)));
    struct Restore(Option<Option<PyErr>>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let outer = self.0.take();
            INTERRUPT.with(|kept| *kept.borrow_mut() = outer);
        }
    }
    let restore = Restore(outer);
    let value = f();
    let raised = INTERRUPT.with(|kept| kept.borrow_mut().as_mut().and_then(Option::take));
    drop(restore);
    match raised {
        Some(e) => Err(e),
        None => Ok(value),
    }
}

impl PyCancelToken {
    /// The Python object of a core token.
    pub(crate) fn from_core(token: CancelToken) -> Self {
        PyCancelToken { token }
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

    /// A token cancelled with this one (and its reason) or by its own deadline.
    ///
    /// Cancelling the child never cancels the parent. The child's effective deadline is
    /// the earlier of its own and its parent's.
    #[pyo3(signature = (*, deadline = None))]
    fn child(&self, py: Python<'_>, deadline: Option<&Bound<'_, PyAny>>) -> PyResult<Self> {
        Ok(PyCancelToken {
            token: self.token.child(own_deadline(py, deadline)?),
        })
    }

    /// Cancel the token and its descendants. Idempotent: the first reason wins.
    ///
    /// The ``on_cancel`` functions this runs run before it returns. An exception one of
    /// them raises goes to ``sys.unraisablehook``, except a ``KeyboardInterrupt`` (a
    /// Ctrl-C while it ran), ``SystemExit`` or other ``BaseException`` that is not an
    /// ``Exception``: the first such comes out of ``cancel()``, once all have run.
    #[pyo3(signature = (reason = None))]
    fn cancel(&self, py: Python<'_>, reason: Option<Py<PyAny>>) -> PyResult<()> {
        let obj = reason.unwrap_or_else(|| py.None());
        raising_interrupts(|| {
            self.token.cancel(make_reason(obj));
        })
    }

    /// True once the token has been cancelled.
    #[getter]
    fn cancelled(&self) -> bool {
        self.token.is_cancelled()
    }

    /// The reason given to the first ``cancel()``; ``None`` until then.
    ///
    /// Go's ``context.Cause``.
    #[getter]
    fn reason(&self, py: Python<'_>) -> Py<PyAny> {
        match self.token.reason() {
            Some(r) => reason_object(py, &r),
            None => py.None(),
        }
    }

    /// The effective deadline on the ``time.monotonic()`` clock, or ``None``.
    #[getter]
    fn deadline(&self, py: Python<'_>) -> PyResult<Option<f64>> {
        self.token
            .deadline()
            .map(|at| monotonic(py, at))
            .transpose()
    }

    /// Block (with the GIL released) until cancelled or ``timeout`` seconds pass.
    ///
    /// Returns True if the token is cancelled. Signal handlers run while waiting in the
    /// main thread (Ctrl-C raises ``KeyboardInterrupt``).
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

    /// Wait in an asyncio task until the token is cancelled (from any thread or loop).
    fn wait_async<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        super::shim::shim_fn!(slf.py(), "wait_token")?.call1((slf,))
    }

    /// Run ``fn()`` once when the token is cancelled; at once if it already is.
    ///
    /// Where ``fn`` runs: for ``cancel()`` (of this token or an ancestor), in the
    /// caller's thread before ``cancel()`` returns; for a deadline, in a callback
    /// thread of ctxlock's own, one per callback running at the same time, so a ``fn``
    /// that blocks delays neither the token (``cancelled``, waiters, releases by
    /// ``unlock_on_cancel``) nor other callbacks. ``fn`` must not assume the thread it
    /// runs in, and a ``fn`` that blocks keeps its thread (and delays a ``cancel()``
    /// caller). An exception it raises goes to ``sys.unraisablehook``, except that a
    /// ``BaseException`` that is not an ``Exception`` (``KeyboardInterrupt``) comes out
    /// of the ``cancel()`` or ``LockManager.close()`` that ran ``fn``.
    ///
    /// ``fn`` runs even if nothing else references the token: a registration keeps
    /// the token until ``fn`` has run or been unregistered. Returns a function that
    /// unregisters ``fn`` and returns True if that stopped ``fn`` from running (Go's
    /// ``context.AfterFunc``).
    ///
    /// At interpreter exit, ctxlock's ``atexit`` hook waits up to 2 s for ``fn`` calls
    /// under way; once finalization has begun, a ``fn`` due in any thread but the
    /// exiting one is skipped (see the README's "Interpreter exit").
    fn on_cancel(&self, r#fn: Bound<'_, PyAny>) -> PyResult<OnCancel> {
        if !r#fn.is_callable() {
            return Err(super::args::wrong_type(
                &r#fn,
                "on_cancel() fn must be callable",
            ));
        }
        // On a cancelled token `fn` runs here, at once: its interrupt comes out here.
        let registration = raising_interrupts(|| {
            self.token
                .on_cancel_user(call_soon_unraisable(r#fn.unbind()))
        })?;
        Ok(OnCancel {
            registration: Mutex::new(registration),
        })
    }

    fn __reduce__(slf: &Bound<'_, Self>) -> PyResult<()> {
        Err(super::errors::not_picklable(slf.as_any()))
    }

    // Cancelled: the reason's repr; otherwise the time left until the deadline.
    fn __repr__(&self, py: Python<'_>) -> String {
        if let Some(r) = self.token.reason() {
            let reason = reason_object(py, &r);
            let reason = reason.bind(py);
            let shown = match reason.repr() {
                Ok(text) => text.to_string(),
                // A reason whose repr fails still leaves the token printable.
                Err(_) => match reason.get_type().fully_qualified_name() {
                    Ok(name) => format!("<{name} object>"),
                    Err(_) => "<? object>".to_string(),
                },
            };
            return format!("<ctxlock.CancelToken cancelled=True reason={shown}>");
        }
        match self.token.deadline() {
            None => "<ctxlock.CancelToken cancelled=False deadline=None>".to_string(),
            Some(at) => {
                let left = at.saturating_duration_since(Instant::now()).as_secs_f64();
                format!("<ctxlock.CancelToken cancelled=False deadline_in={left:.3}s>")
            }
        }
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

/// `cancel=`: a `CancelToken` or `None`.
#[inline]
pub(crate) fn token<'a, 'py>(
    value: Option<&'a Bound<'py, PyAny>>,
) -> PyResult<Option<&'a Bound<'py, PyCancelToken>>> {
    match value {
        None => Ok(None),
        Some(v) if v.is_none() => Ok(None),
        Some(v) => v
            .cast::<PyCancelToken>()
            .map(Some)
            .map_err(|_| super::args::wrong_type(v, "cancel must be a CancelToken or None")),
    }
}
