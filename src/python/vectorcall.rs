//! Hand-written CPython entry points for the calls of `unlock = lock.acquire(); unlock()`,
//! `with lock:`, `async with lock:` and `mgr.lock(name)`.
//!
//! PyO3 wraps every call in a trampoline (attach count, panic guard), parses arguments
//! through a generic description, and wires `__call__` to `tp_call`, so `unlock()` builds
//! an argument tuple and parses it (PyO3 issue #4252). On this pair those costs were most
//! of the time spent, and the pair missed its target against `threading.Lock`
//! (BENCHMARKS.md, "Where the cost goes"). So, installed once when the module is created:
//!
//! - `acquire` (on `Lock` and on both `SharableLock` views) becomes a
//!   `METH_FASTCALL | METH_KEYWORDS` function that does the common calls itself
//!   (`acquire()` and `acquire(deadline=<number>)` when the lock is free) and hands every
//!   other call, unchanged, to the function PyO3 generated. That one stays the only
//!   parser of the full signature and owns every error and every wait; its name, docs and
//!   text signature are reused, so `help()` and `inspect` see no difference.
//! - `__enter__` and `__exit__` of the same classes take a free lock and release a
//!   `with`'s hold themselves, and `LockManager.lock` makes the handle of a name given
//!   as one positional `str`; every other call goes to the generated function.
//! - `__aenter__` and `__aexit__` of `Lock` and the views do the same for `async with`:
//!   a free lock taken, tagged with the loop's thread (`task_owner.rs`) and answered
//!   with the finished awaitable; the release with three positional arguments. Not
//!   `NamedLock`'s, whose holds record their asyncio task (calls into Python).
//! - The finished awaitable (`asyncio::Ready`) gets `am_await` and `tp_iternext` slots
//!   that return itself and end at once: two of them are awaited per `async with`.
//! - `Unlock` gets a vectorcall slot: each object carries the function pointer, and the
//!   type's `tp_vectorcall_offset` points at it. `tp_call` stays PyO3's, for callers that
//!   use `PyObject_Call`.
//!
//! Without PyO3's attach count these functions must not drop a `Py<T>` (it would be
//! deferred to PyO3's pool, still correct but late): they compare-and-swap, read
//! `sys.modules` (borrowed), take a tag's mutex, create or return an object, release,
//! and hand back errors as raised exceptions, never dropping one. The release attaches
//! itself where it drops Python references (the `Unlock`'s registrations,
//! `kind::Owner`; the asyncio doorbell).
//!
//! Generic over the classes ([`FastAcquire`], [`FastLookup`], [`FastCall`]); `mod.rs`
//! says which classes get them. CPython only: the entry points need the non-limited API
//! (the method descriptor's layout, `tp_vectorcall_offset`). Elsewhere the `install_*`
//! functions leave PyO3's entry points alone. With `freelist.rs` (the objects' own
//! allocation and deallocation), this is one of the binding's two files of raw C API calls.

use std::sync::OnceLock;

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::pyclass::boolean_struct::True;
use pyo3::PyClass;

use super::args;
use super::kind::{Held, Kind, Owner};

/// The lock classes, whose `acquire` gets the hand-written entry point: every class
/// `lock_methods!` generates the members for, whatever its kind of lock.
pub(crate) trait FastAcquire: PyClass<Frozen = True> + Sync {
    type Kind: Kind;

    /// The lock inside the object.
    fn kind(&self) -> &Self::Kind;

    /// The owner an `Unlock` of this lock keeps.
    #[inline]
    fn owner(slf: Py<Self>) -> Owner {
        Owner::new(slf, |lock| lock.kind())
    }

    /// The `Unlock` of a hold just taken through `lock`.
    fn acquired<'py>(lock: &Bound<'py, Self>, held: Held) -> PyResult<Bound<'py, PyAny>>;

    /// `__aenter__` when it takes a free lock at once (`asyncio::enter_free`); `None`
    /// passes the call to the generated function.
    fn enter_async_free<'py>(lock: &Bound<'py, Self>) -> Option<PyResult<Bound<'py, PyAny>>>;

    /// `__aexit__(exc_type, exc, tb)`'s release (`asyncio::exit`).
    fn exit_async<'py>(lock: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>>;

    /// The class's own functions PyO3 generated, kept for the calls passed on.
    fn generated() -> &'static Generated;
}

/// The functions PyO3 generated for one lock class, each kept by `replace_method` when
/// its hand-written entry point is installed: they take every call the entry point does
/// not (and own every error and every wait).
pub(crate) struct Generated {
    pub(crate) acquire: OnceLock<ffi::PyCFunctionFastWithKeywords>,
    /// `METH_NOARGS`; waits when the lock is taken.
    pub(crate) enter: OnceLock<ffi::PyCFunction>,
    /// Takes calls with other arguments than three positional ones.
    pub(crate) exit: OnceLock<ffi::PyCFunctionFastWithKeywords>,
    /// `METH_NOARGS`; makes the waiting awaitable.
    pub(crate) aenter: OnceLock<ffi::PyCFunction>,
    pub(crate) aexit: OnceLock<ffi::PyCFunctionFastWithKeywords>,
}

impl Generated {
    pub(crate) const fn new() -> Generated {
        Generated {
            acquire: OnceLock::new(),
            enter: OnceLock::new(),
            exit: OnceLock::new(),
            aenter: OnceLock::new(),
            aexit: OnceLock::new(),
        }
    }
}

/// The manager class, whose `lock(name)` gets the hand-written entry point.
pub(crate) trait FastLookup: PyClass<Frozen = True> + Sync {
    /// The lock `name` names, when the call is one the fast path takes (a valid name);
    /// `None` passes the call to the generated function, which owns every error.
    fn lookup<'py>(
        slf: &Bound<'py, Self>,
        name: &Bound<'py, PyAny>,
    ) -> Option<PyResult<Bound<'py, PyAny>>>;

    /// The `lock` PyO3 generated.
    fn generated_lookup() -> &'static OnceLock<ffi::PyCFunctionFastWithKeywords>;
}

/// The class whose objects get a vectorcall slot: `Unlock`, called as `unlock()`.
///
/// # Safety
/// Every object of the class stores `call_unlock::<Self>` in the field that
/// `vectorcall_field` points at, at the same offset in every object.
pub(crate) unsafe trait FastCall: PyClass<Frozen = True> + Sync {
    /// The call, with no arguments.
    fn call(&self);

    /// Where this object's entry point (`call_unlock::<Self>`) is stored.
    fn vectorcall_field(&self) -> *const ffi::vectorcallfunc;
}

/// Whether this interpreter has the non-limited API the entry points need.
pub(crate) const SUPPORTED: bool = cfg!(not(any(Py_LIMITED_API, PyPy, GraalPy)));

/// `lock.acquire(...)`: the plain call and a numeric `deadline=` on a free lock here,
/// everything else in the generated function.
///
/// # Safety
/// Called by CPython through a method descriptor of `T`'s type, with the thread attached.
unsafe extern "C" fn acquire<T: FastAcquire>(
    slf: *mut ffi::PyObject,
    args: *const *mut ffi::PyObject,
    nargs: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
) -> *mut ffi::PyObject {
    // SAFETY: this function's contract.
    let (py, lock) = unsafe { receiver::<T>(&slf) };
    guarded(py, || {
        // SAFETY: `args` holds `nargs` positional arguments and then one value per keyword
        // name, all borrowed for the call; `kwnames` is NULL or a tuple of str.
        let fast = nargs == 0 && unsafe { plain_or_deadline(py, args, kwnames) };
        let taken = if fast {
            Kind::try_take_up(lock.get().kind())
        } else {
            None
        };
        if let Some(taken) = taken {
            // On failure (out of memory) the value is dropped, which releases the hold,
            // and the error is raised; a kind whose backend failed raises its error.
            return super::acquire::taken_up(py, taken)
                .and_then(|held| T::acquired(lock, held))
                .map_or_else(
                    |e| {
                        e.restore(py);
                        std::ptr::null_mut()
                    },
                    Bound::into_ptr,
                );
        }
        // SAFETY: `kwnames` as above.
        if !fast && unsafe { has_keyword(py, kwnames, "timeout") } {
            // `threading.Lock`'s name for it: say what ctxlock takes instead.
            args::timeout_keyword::<T>().restore(py);
            return std::ptr::null_mut();
        }
        // SAFETY: the generated function has this very signature and contract.
        unsafe { installed(&T::generated().acquire)(slf, args, nargs, kwnames) }
    })
}

/// `with lock:`'s `__enter__`: a free lock is taken and taken up as a scoped hold here;
/// a taken one goes to the generated function, which waits.
///
/// # Safety
/// Called by CPython through a `METH_NOARGS` method descriptor of `T`'s type, with the
/// thread attached.
unsafe extern "C" fn enter<T: FastAcquire>(
    slf: *mut ffi::PyObject,
    unused: *mut ffi::PyObject,
) -> *mut ffi::PyObject {
    // SAFETY: this function's contract.
    let (py, lock) = unsafe { receiver::<T>(&slf) };
    guarded(py, || {
        if let Some(taken) = Kind::try_take_up_scoped(lock.get().kind()) {
            // As `acquire::enter` after its try: a kind whose backend failed meanwhile
            // holds nothing and raises.
            return none_or_raise(py, super::acquire::taken_up(py, taken));
        }
        // SAFETY: the generated function has this very signature and contract.
        unsafe { installed(&T::generated().enter)(slf, unused) }
    })
}

/// `__exit__(exc_type, exc, tb)` as a `with` statement calls it: the scoped release here;
/// any other arguments go to the generated function.
///
/// # Safety
/// Called by CPython through a `METH_FASTCALL | METH_KEYWORDS` method descriptor of `T`'s
/// type, with the thread attached.
unsafe extern "C" fn exit<T: FastAcquire>(
    slf: *mut ffi::PyObject,
    args: *const *mut ffi::PyObject,
    nargs: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
) -> *mut ffi::PyObject {
    // SAFETY: this function's contract.
    let (py, lock) = unsafe { receiver::<T>(&slf) };
    // SAFETY: `kwnames` as CPython passes it to a fastcall method.
    if nargs == 3 && unsafe { no_keywords(kwnames) } {
        return guarded(py, || {
            none_or_raise(py, super::acquire::exit(lock.get().kind()))
        });
    }
    // SAFETY: the generated function has this very signature and contract.
    unsafe { installed(&T::generated().exit)(slf, args, nargs, kwnames) }
}

/// `async with lock:`'s `__aenter__`: a free lock is taken here (`T::enter_async_free`);
/// every other case goes to the generated function.
///
/// # Safety
/// Called by CPython through a `METH_NOARGS` method descriptor of `T`'s type, with the
/// thread attached.
unsafe extern "C" fn aenter<T: FastAcquire>(
    slf: *mut ffi::PyObject,
    unused: *mut ffi::PyObject,
) -> *mut ffi::PyObject {
    // SAFETY: this function's contract.
    let (py, lock) = unsafe { receiver::<T>(&slf) };
    let mut pass_on = false;
    let entered = guarded(py, || match T::enter_async_free(lock) {
        Some(result) => object_or_raise(py, result),
        None => {
            pass_on = true;
            std::ptr::null_mut()
        }
    });
    if !pass_on {
        return entered;
    }
    // SAFETY: the generated function has this very signature and contract.
    unsafe { installed(&T::generated().aenter)(slf, unused) }
}

/// `__aexit__(exc_type, exc, tb)` as an `async with` statement calls it: the release
/// here; any other arguments go to the generated function.
///
/// # Safety
/// Called by CPython through a `METH_FASTCALL | METH_KEYWORDS` method descriptor of `T`'s
/// type, with the thread attached.
unsafe extern "C" fn aexit<T: FastAcquire>(
    slf: *mut ffi::PyObject,
    args: *const *mut ffi::PyObject,
    nargs: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
) -> *mut ffi::PyObject {
    // SAFETY: this function's contract.
    let (py, lock) = unsafe { receiver::<T>(&slf) };
    // SAFETY: `kwnames` as CPython passes it to a fastcall method.
    if nargs == 3 && unsafe { no_keywords(kwnames) } {
        return guarded(py, || object_or_raise(py, T::exit_async(lock)));
    }
    // SAFETY: the generated function has this very signature and contract.
    unsafe { installed(&T::generated().aexit)(slf, args, nargs, kwnames) }
}

/// `manager.lock(name)`: one positional name that `T::lookup` takes here, every other
/// call in the generated function.
///
/// # Safety
/// Called by CPython through a `METH_FASTCALL | METH_KEYWORDS` method descriptor of `T`'s
/// type, with the thread attached.
unsafe extern "C" fn lookup<T: FastLookup>(
    slf: *mut ffi::PyObject,
    args: *const *mut ffi::PyObject,
    nargs: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
) -> *mut ffi::PyObject {
    // SAFETY: this function's contract.
    let (py, manager) = unsafe { receiver::<T>(&slf) };
    // SAFETY: `kwnames` as CPython passes it to a fastcall method.
    if nargs == 1 && unsafe { no_keywords(kwnames) } {
        // SAFETY: one positional argument, borrowed for the call.
        let name = unsafe { Bound::ref_from_ptr(py, &*args) };
        let mut pass_on = false;
        let found = guarded(py, || match T::lookup(manager, name) {
            Some(Ok(lock)) => lock.into_ptr(),
            Some(Err(e)) => {
                e.restore(py);
                std::ptr::null_mut()
            }
            None => {
                pass_on = true;
                std::ptr::null_mut()
            }
        });
        if !pass_on {
            return found;
        }
    }
    // SAFETY: the generated function has this very signature and contract.
    unsafe { installed(T::generated_lookup())(slf, args, nargs, kwnames) }
}

/// The attached thread's token and the receiver of a method call on `T`.
///
/// # Safety
/// Called from an entry point that CPython calls through a method descriptor of `T`'s
/// type: the thread is attached, and `slf` is borrowed for the call and an instance of
/// `T`'s type (which the descriptor checked; the classes cannot be subclassed).
#[inline]
unsafe fn receiver<T: PyClass>(slf: &*mut ffi::PyObject) -> (Python<'_>, &Bound<'_, T>) {
    // SAFETY: attached (the contract).
    let py = unsafe { Python::assume_attached() };
    // SAFETY: a live instance of `T` borrowed for the call (the contract).
    let lock = unsafe { Bound::ref_from_ptr(py, slf).cast_unchecked::<T>() };
    (py, lock)
}

/// `None` for a success, else the error raised (NULL).
#[inline]
fn none_or_raise<T>(py: Python<'_>, result: PyResult<T>) -> *mut ffi::PyObject {
    match result {
        Ok(_) => super::refcount::none(py),
        Err(e) => {
            e.restore(py);
            std::ptr::null_mut()
        }
    }
}

/// The object (a new reference), else the error raised (NULL).
#[inline]
fn object_or_raise(py: Python<'_>, result: PyResult<Bound<'_, PyAny>>) -> *mut ffi::PyObject {
    result.map_or_else(
        |e| {
            e.restore(py);
            std::ptr::null_mut()
        },
        Bound::into_ptr,
    )
}

/// A generated function kept by `replace_method`, which stores it before it installs the
/// entry point that reads it (so it is never missing; if it were, nothing could go on).
#[inline]
fn installed<F: Copy>(generated: &OnceLock<F>) -> F {
    generated
        .get()
        .copied()
        .unwrap_or_else(|| std::process::abort())
}

/// Whether the keyword arguments are none, or only `deadline=` with an `int` or
/// `float` that is a valid deadline (`args::timeout` decides, as for every acquire).
/// Anything else (tokens, `blocking=`, bad values and their errors) goes to the
/// generated function.
///
/// # Safety
/// `args`/`kwnames` as CPython passes them to a `METH_FASTCALL | METH_KEYWORDS` method
/// with no positional arguments.
#[inline(always)]
unsafe fn plain_or_deadline(
    py: Python<'_>,
    args: *const *mut ffi::PyObject,
    kwnames: *mut ffi::PyObject,
) -> bool {
    // The plain call answers here, in the caller: the compiler kept the whole function
    // out of line, and its register saves cost the plain call some twenty instructions.
    // SAFETY: this function's contract, passed on.
    kwnames.is_null() || unsafe { keywords_plain_or_deadline(py, args, kwnames) }
}

/// [`plain_or_deadline`] with keyword names (`kwnames` not NULL).
///
/// # Safety
/// As [`plain_or_deadline`]'s, and `kwnames` is not NULL.
unsafe fn keywords_plain_or_deadline(
    py: Python<'_>,
    args: *const *mut ffi::PyObject,
    kwnames: *mut ffi::PyObject,
) -> bool {
    // SAFETY: a non-NULL `kwnames` is a tuple (the fastcall protocol).
    let names =
        unsafe { Bound::ref_from_ptr(py, &kwnames).cast_unchecked::<pyo3::types::PyTuple>() };
    match names.len() {
        0 => true,
        1 => {
            // SAFETY: one keyword name, so one value at `args[0]` (no positionals).
            let value = unsafe { Bound::ref_from_ptr(py, &*args) };
            let is_number = value.is_exact_instance_of::<pyo3::types::PyFloat>()
                || value.is_exact_instance_of::<pyo3::types::PyInt>();
            is_number
                && names.get_item(0).is_ok_and(|n| {
                    // Keyword names from code objects are interned: usually an identity test.
                    n.is(pyo3::intern!(py, "deadline")) || exact_str_is(&n, "deadline")
                })
                && args::timeout(Some(value), "deadline").is_ok()
        }
        _ => false,
    }
}

/// Whether a fastcall passed no keyword arguments.
///
/// # Safety
/// `kwnames` is NULL or a tuple, as CPython passes it to a fastcall method.
#[inline]
unsafe fn no_keywords(kwnames: *mut ffi::PyObject) -> bool {
    // SAFETY: a non-NULL `kwnames` is a tuple (this function's contract).
    kwnames.is_null() || unsafe { ffi::PyTuple_GET_SIZE(kwnames) } == 0
}

/// Whether a keyword argument is called `name`.
///
/// # Safety
/// `kwnames` is NULL or a tuple of str, as CPython passes it to a fastcall method.
unsafe fn has_keyword(py: Python<'_>, kwnames: *mut ffi::PyObject, name: &str) -> bool {
    if kwnames.is_null() {
        return false;
    }
    // SAFETY: a non-NULL `kwnames` is a tuple (the fastcall protocol).
    let names =
        unsafe { Bound::ref_from_ptr(py, &kwnames).cast_unchecked::<pyo3::types::PyTuple>() };
    names.iter().any(|n| exact_str_is(&n, name))
}

/// Whether a keyword name is the exact `str` `name`. A subclass of `str` (which
/// `f(**{Name("deadline"): 1})` can pass) is never compared here: its `__eq__` is the
/// user's and could raise, where this check has no error to give. The generated
/// function parses such calls, without calling it.
fn exact_str_is(n: &Bound<'_, PyAny>, name: &str) -> bool {
    n.is_exact_instance_of::<pyo3::types::PyString>() && n.eq(name).unwrap_or(false)
}

/// Replace `T.acquire` with a descriptor of `acquire::<T>`, keeping the generated function
/// for the calls it passes on. Leaves the class alone (false) if `acquire` is not the
/// expected `METH_FASTCALL | METH_KEYWORDS` method descriptor.
pub(crate) fn install_acquire<T: FastAcquire>(py: Python<'_>) -> PyResult<bool> {
    if !SUPPORTED {
        return Ok(false);
    }
    install_acquire_descriptor::<T>(py)
}

#[cfg(not(any(Py_LIMITED_API, PyPy, GraalPy)))]
fn install_acquire_descriptor<T: FastAcquire>(py: Python<'_>) -> PyResult<bool> {
    replace_fastcall::<T>(py, "acquire", acquire::<T>, &T::generated().acquire)
}

/// [`replace_method`] for a `METH_FASTCALL | METH_KEYWORDS` method: `fast` in its place,
/// the generated function kept in `generated`.
#[cfg(not(any(Py_LIMITED_API, PyPy, GraalPy)))]
fn replace_fastcall<T: PyClass>(
    py: Python<'_>,
    name: &str,
    fast: ffi::PyCFunctionFastWithKeywords,
    generated: &OnceLock<ffi::PyCFunctionFastWithKeywords>,
) -> PyResult<bool> {
    let keep = |m: ffi::PyMethodDefPointer| {
        // SAFETY: the flags checked by `replace_method` say this is the member in use.
        generated
            .set(unsafe { m.PyCFunctionFastWithKeywords })
            .is_ok()
    };
    let fast = ffi::PyMethodDefPointer {
        PyCFunctionFastWithKeywords: fast,
    };
    replace_method::<T>(
        py,
        name,
        ffi::METH_FASTCALL | ffi::METH_KEYWORDS,
        fast,
        keep,
    )
}

/// Replace `T.lock` with a descriptor of `lookup::<T>`, keeping the generated function
/// for the calls it passes on. False (the class left alone) where not supported or if
/// `lock` is not the expected method descriptor.
pub(crate) fn install_lookup<T: FastLookup>(py: Python<'_>) -> PyResult<bool> {
    if !SUPPORTED {
        return Ok(false);
    }
    install_lookup_descriptor::<T>(py)
}

#[cfg(not(any(Py_LIMITED_API, PyPy, GraalPy)))]
fn install_lookup_descriptor<T: FastLookup>(py: Python<'_>) -> PyResult<bool> {
    replace_fastcall::<T>(py, "lock", lookup::<T>, T::generated_lookup())
}

#[cfg(any(Py_LIMITED_API, PyPy, GraalPy))]
fn install_lookup_descriptor<T: FastLookup>(_py: Python<'_>) -> PyResult<bool> {
    Ok(false)
}

/// Replace `T`'s method `name`, a method descriptor with `flags`, with one of the same
/// name, docs and flags whose function is `fast`; `keep` stores the generated function
/// (false if it was stored before: installed already). False (the class left alone) if
/// the method is not such a descriptor.
#[cfg(not(any(Py_LIMITED_API, PyPy, GraalPy)))]
fn replace_method<T: PyClass>(
    py: Python<'_>,
    name: &str,
    flags: std::ffi::c_int,
    fast: ffi::PyMethodDefPointer,
    keep: impl FnOnce(ffi::PyMethodDefPointer) -> bool,
) -> PyResult<bool> {
    let ty = py.get_type::<T>();
    let descr = ty.getattr(name)?;
    let method_descr_type = std::ptr::addr_of_mut!(ffi::PyMethodDescr_Type);
    // SAFETY: `descr` is a live object; reading its type pointer.
    if unsafe { ffi::Py_TYPE(descr.as_ptr()) } != method_descr_type {
        return Ok(false);
    }
    // SAFETY: a `method_descriptor` has this layout; its `d_method` points at the
    // generated method's static `PyMethodDef`.
    let generated_def = unsafe { &*(*descr.as_ptr().cast::<ffi::PyMethodDescrObject>()).d_method };
    if generated_def.ml_flags != flags {
        return Ok(false);
    }
    if !keep(generated_def.ml_meth) {
        // Installed already (the module was initialised twice): nothing to do.
        return Ok(true);
    }
    // The descriptor keeps a pointer to its `PyMethodDef` for the life of the class, so
    // the definition is leaked, once per class and method. Name and docs (with the text
    // signature) are the generated ones, which are static.
    let def = Box::leak(Box::new(ffi::PyMethodDef {
        ml_name: generated_def.ml_name,
        ml_meth: fast,
        ml_flags: flags,
        ml_doc: generated_def.ml_doc,
    }));
    // SAFETY: a live type object and a `PyMethodDef` that outlives it; the result is a
    // new reference or NULL with an exception set.
    let fast =
        unsafe { Bound::from_owned_ptr_or_err(py, ffi::PyDescr_NewMethod(ty.as_type_ptr(), def))? };
    // PyO3 classes are mutable types: `type.__setattr__` stores it and invalidates
    // CPython's method caches.
    ty.setattr(name, fast)?;
    Ok(true)
}

/// Replace `T.__enter__` and `T.__exit__` with descriptors of `enter::<T>` and
/// `exit::<T>`, keeping the generated functions for the calls they pass on. False for a
/// method left alone (not the expected method descriptor).
pub(crate) fn install_with<T: FastAcquire>(py: Python<'_>) -> PyResult<(bool, bool)> {
    let generated = T::generated();
    install_pair::<T>(
        py,
        ("__enter__", enter::<T>, &generated.enter),
        ("__exit__", exit::<T>, &generated.exit),
    )
}

/// The same for `T.__aenter__` and `T.__aexit__`, with `aenter::<T>` and `aexit::<T>`.
pub(crate) fn install_async_with<T: FastAcquire>(py: Python<'_>) -> PyResult<(bool, bool)> {
    let generated = T::generated();
    install_pair::<T>(
        py,
        ("__aenter__", aenter::<T>, &generated.aenter),
        ("__aexit__", aexit::<T>, &generated.aexit),
    )
}

/// A no-argument entry method and a fastcall exit method of `T`, each with its own
/// function in place of the generated one (kept where the last item says).
type EnterMethod = (
    &'static str,
    ffi::PyCFunction,
    &'static OnceLock<ffi::PyCFunction>,
);
type ExitMethod = (
    &'static str,
    ffi::PyCFunctionFastWithKeywords,
    &'static OnceLock<ffi::PyCFunctionFastWithKeywords>,
);

fn install_pair<T: PyClass>(
    py: Python<'_>,
    enter: EnterMethod,
    exit: ExitMethod,
) -> PyResult<(bool, bool)> {
    if !SUPPORTED {
        return Ok((false, false));
    }
    install_pair_descriptors::<T>(py, enter, exit)
}

#[cfg(not(any(Py_LIMITED_API, PyPy, GraalPy)))]
fn install_pair_descriptors<T: PyClass>(
    py: Python<'_>,
    (enter_name, enter, enter_generated): EnterMethod,
    (exit_name, exit, exit_generated): ExitMethod,
) -> PyResult<(bool, bool)> {
    let keep_enter = |m: ffi::PyMethodDefPointer| {
        // SAFETY: the flags checked by `replace_method` say this is the member in use.
        let generated = unsafe { m.PyCFunction };
        enter_generated.set(generated).is_ok()
    };
    let entered = replace_method::<T>(
        py,
        enter_name,
        ffi::METH_NOARGS,
        ffi::PyMethodDefPointer { PyCFunction: enter },
        keep_enter,
    )?;
    let exited = replace_fastcall::<T>(py, exit_name, exit, exit_generated)?;
    Ok((entered, exited))
}

#[cfg(any(Py_LIMITED_API, PyPy, GraalPy))]
fn install_pair_descriptors<T: PyClass>(
    _py: Python<'_>,
    _enter: EnterMethod,
    _exit: ExitMethod,
) -> PyResult<(bool, bool)> {
    Ok((false, false))
}

/// Give `T`, an awaitable that is finished when made (`asyncio::Ready`), an `__await__`
/// slot that returns the object itself and an `__next__` slot that ends the iteration
/// at once with `None`, without PyO3's trampolines: `async with` on a free lock awaits
/// one such object on entry and one on exit. The methods `T` declares stay as they are
/// (calling `__await__` or `__next__` by name gives the same results through PyO3).
/// False where the entry points are not supported or `T` lacks either slot.
pub(crate) fn install_finished_awaitable<T: PyClass>(py: Python<'_>) -> bool {
    if !SUPPORTED {
        return false;
    }
    install_finished_slots::<T>(py)
}

#[cfg(not(any(Py_LIMITED_API, PyPy, GraalPy)))]
fn install_finished_slots<T: PyClass>(py: Python<'_>) -> bool {
    let tp = py.get_type::<T>().as_type_ptr();
    // SAFETY: reading fields of a live type object; a heap type's `tp_as_async` is NULL
    // or points into the type object itself.
    let has_both = unsafe {
        (*tp).tp_iternext.is_some()
            && !(*tp).tp_as_async.is_null()
            && (*(*tp).tp_as_async).am_await.is_some()
    };
    if !has_both {
        return false;
    }
    // SAFETY: the module is being initialised, attached, before any code can use the
    // type; both slots keep their signatures, and `PyType_Modified` drops cached lookups.
    unsafe {
        (*(*tp).tp_as_async).am_await = Some(await_self);
        (*tp).tp_iternext = Some(finished_next);
        ffi::PyType_Modified(tp);
    }
    true
}

#[cfg(any(Py_LIMITED_API, PyPy, GraalPy))]
fn install_finished_slots<T: PyClass>(_py: Python<'_>) -> bool {
    false
}

/// `__await__` of a finished awaitable: the object itself, as its own iterator.
///
/// # Safety
/// Called by CPython with a live object and the thread attached.
#[cfg(not(any(Py_LIMITED_API, PyPy, GraalPy)))]
unsafe extern "C" fn await_self(slf: *mut ffi::PyObject) -> *mut ffi::PyObject {
    // SAFETY: a live object (the contract); the new reference is the result's.
    unsafe { ffi::Py_INCREF(slf) };
    slf
}

/// `__next__` of a finished awaitable: NULL with no exception set, which ends the
/// iteration with the value `None` (as `return None` ends a coroutine).
///
/// # Safety
/// Called by CPython with a live object and the thread attached.
#[cfg(not(any(Py_LIMITED_API, PyPy, GraalPy)))]
unsafe extern "C" fn finished_next(_slf: *mut ffi::PyObject) -> *mut ffi::PyObject {
    std::ptr::null_mut()
}

#[cfg(any(Py_LIMITED_API, PyPy, GraalPy))]
fn install_acquire_descriptor<T: FastAcquire>(_py: Python<'_>) -> PyResult<bool> {
    Ok(false)
}

/// `unlock()`: the vectorcall slot of every `Unlock` (`T`).
///
/// # Safety
/// Called by CPython for a `T` object (the only type whose `tp_vectorcall_offset`
/// points at this function), with the thread attached.
pub(crate) unsafe extern "C" fn call_unlock<T: FastCall>(
    callable: *mut ffi::PyObject,
    _args: *const *mut ffi::PyObject,
    nargsf: usize,
    kwnames: *mut ffi::PyObject,
) -> *mut ffi::PyObject {
    // SAFETY: plain arithmetic on the argument count.
    let nargs = unsafe { ffi::PyVectorcall_NARGS(nargsf) };
    let nkw = if kwnames.is_null() {
        0
    } else {
        // SAFETY: a non-NULL `kwnames` is a tuple (the vectorcall protocol).
        unsafe { ffi::PyTuple_GET_SIZE(kwnames) }
    };
    if nargs != 0 || nkw != 0 {
        // SAFETY: attached; both arguments are valid C strings / a live exception type.
        unsafe {
            ffi::PyErr_SetString(
                ffi::PyExc_TypeError,
                c"Unlock.__call__() takes no arguments".as_ptr(),
            );
        }
        return std::ptr::null_mut();
    }
    // SAFETY: CPython calls with the thread attached.
    let py = unsafe { Python::assume_attached() };
    // SAFETY: `callable` is a live `T` (see the function's contract).
    let unlock = unsafe { Bound::ref_from_ptr(py, &callable).cast_unchecked::<T>() };
    guarded(py, || {
        unlock.get().call();
        super::refcount::none(py)
    })
}

/// Run `body`, turning a panic (only a bug can cause one) into a raised
/// `PanicException`, as PyO3's own entry points do: a panic must not unwind into C.
#[inline]
fn guarded(py: Python<'_>, body: impl FnOnce() -> *mut ffi::PyObject) -> *mut ffi::PyObject {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)) {
        Ok(result) => result,
        Err(_) => {
            pyo3::panic::PanicException::new_err("ctxlock: a Rust panic in a hand-written entry point (acquire, unlock, with, async with or lock(name))")
                .restore(py);
            std::ptr::null_mut()
        }
    }
}

/// Point `T`'s `tp_vectorcall_offset` at the `vectorcall` field of its objects. False
/// (nothing done) where the entry points are not supported.
///
/// The offset of a Rust field inside a PyO3 object is not a public constant, so it is
/// measured on a live object: `sample` acquires a lock and returns it with its `T`;
/// then that object is called through the new slot, which must release the lock: the
/// slot is checked end to end before any user code runs.
pub(crate) fn install_call<'py, T: FastCall>(
    py: Python<'py>,
    sample: impl FnOnce() -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyAny>)>,
) -> PyResult<bool> {
    if !SUPPORTED {
        return Ok(false);
    }
    let (lock, unlock) = sample()?;
    install_call_slot(py, lock, unlock.cast_into::<T>()?)?;
    Ok(true)
}

#[cfg(not(any(Py_LIMITED_API, PyPy, GraalPy)))]
fn install_call_slot<T: FastCall>(
    _py: Python<'_>,
    lock: Bound<'_, PyAny>,
    unlock: Bound<'_, T>,
) -> PyResult<()> {
    use pyo3::exceptions::PyRuntimeError;

    let field = unlock.get().vectorcall_field() as usize;
    let offset = field.wrapping_sub(unlock.as_ptr() as usize);
    let ty = unlock.as_any().get_type();
    let tp = ty.as_type_ptr();
    // SAFETY: reading a field of a live type object.
    let basicsize = unsafe { (*tp).tp_basicsize } as usize;
    if offset + std::mem::size_of::<ffi::vectorcallfunc>() > basicsize {
        return Err(PyRuntimeError::new_err(
            "BUG: the vectorcall field is outside the object",
        ));
    }
    // SAFETY: the module is being initialised, attached, before any `T` but this one can
    // be called; the offset points at a `vectorcallfunc` inside every `T` object (the
    // same field of the same layout, holding `call_unlock::<T>`: `FastCall`'s contract),
    // and `PyType_Modified` drops cached lookups of the type.
    unsafe {
        (*tp).tp_vectorcall_offset = offset as ffi::Py_ssize_t;
        set_vectorcall_flag(tp);
        ffi::PyType_Modified(tp);
    }
    unlock.as_any().call0()?;
    if lock.call_method0("locked")?.is_truthy()? {
        return Err(PyRuntimeError::new_err(
            "BUG: the vectorcall slot did not release",
        ));
    }
    Ok(())
}

#[cfg(any(Py_LIMITED_API, PyPy, GraalPy))]
fn install_call_slot<T: FastCall>(
    _py: Python<'_>,
    _lock: Bound<'_, PyAny>,
    _unlock: Bound<'_, T>,
) -> PyResult<()> {
    Ok(())
}

/// Sets `Py_TPFLAGS_HAVE_VECTORCALL` on a type. Free-threaded builds make `tp_flags` an
/// atomic (other threads may read it while a type is being set up), so the bit is set
/// with `fetch_or` there, as PyO3 does for its own types.
///
/// # Safety
/// `tp` points at a live type object.
#[inline]
unsafe fn set_vectorcall_flag(tp: *mut ffi::PyTypeObject) {
    #[cfg(not(Py_GIL_DISABLED))]
    // SAFETY: the caller passes a live type object; module init is attached (GIL held).
    unsafe {
        (*tp).tp_flags |= ffi::Py_TPFLAGS_HAVE_VECTORCALL;
    }
    #[cfg(Py_GIL_DISABLED)]
    // SAFETY: the caller passes a live type object. ORDERING: Relaxed: nothing else is
    // published with the bit; `PyType_Modified`, called next, invalidates type caches.
    unsafe {
        (*tp).tp_flags.fetch_or(
            ffi::Py_TPFLAGS_HAVE_VECTORCALL,
            std::sync::atomic::Ordering::Relaxed,
        );
    }
}
