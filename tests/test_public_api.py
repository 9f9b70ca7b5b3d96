"""The public surface: ``__all__`` matches the stub, classes are final and documented."""

from __future__ import annotations

import ast
import copy
import gc
import inspect
import pickle
import re
import threading
import time
import weakref
from collections.abc import Callable
from pathlib import Path

import ctxlock
import pytest
from ctxlock import _ctxlock, _errors

ROOT = Path(__file__).resolve().parents[1]
STUB = ROOT / "python" / "ctxlock" / "_ctxlock.pyi"
STUB_TREE = ast.parse(STUB.read_text(encoding="utf-8"))

STUB_CLASSES = {
    node.name: node
    for node in STUB_TREE.body
    if isinstance(node, ast.ClassDef) and not node.name.startswith("_")
}
EXCEPTIONS = ["BackendError", "Cancelled", "LockError", "LockTimeout", "WouldBlock"]


def _public_members(cls: ast.ClassDef) -> list[ast.FunctionDef]:
    return [
        node
        for node in cls.body
        if isinstance(node, ast.FunctionDef) and not node.name.startswith("_")
    ]


def test_stub_declares_the_expected_classes():
    assert set(STUB_CLASSES) == {
        "CancelToken",
        "Lock",
        "LockInfo",
        "LockManager",
        "LockStatistics",
        "LockView",
        "NamedLock",
        "NamedSharableLock",
        "SharableLock",
        "Unlock",
    }


def test_all_matches_the_stub():
    expected = {*STUB_CLASSES, *EXCEPTIONS, "__version__"}
    assert len(ctxlock.__all__) == len(set(ctxlock.__all__))
    assert set(ctxlock.__all__) == expected
    assert set(_errors.__all__) == set(EXCEPTIONS)


@pytest.mark.parametrize("name", sorted(ctxlock.__all__))
def test_every_public_name_exists(name):
    assert hasattr(ctxlock, name)


@pytest.mark.parametrize("name", sorted(STUB_CLASSES))
def test_stub_classes_come_from_the_extension(name):
    cls = getattr(ctxlock, name)
    assert isinstance(cls, type)
    assert cls is getattr(_ctxlock, name)


def test_version_matches_cargo_toml():
    cargo = (ROOT / "Cargo.toml").read_text(encoding="utf-8")
    match = re.search(r'^version\s*=\s*"([^"]+)"', cargo, re.M)
    assert match is not None
    assert isinstance(ctxlock.__version__, str)
    assert ctxlock.__version__ == match.group(1)
    assert _ctxlock.__version__ == ctxlock.__version__


@pytest.mark.parametrize("name", sorted(STUB_CLASSES))
def test_class_is_final(name):
    cls = getattr(ctxlock, name)
    with pytest.raises(TypeError):
        type("Sub", (cls,), {})
    with pytest.raises(TypeError):

        class Sub(cls):  # type: ignore[misc, valid-type]
            pass


@pytest.mark.parametrize("name", sorted(STUB_CLASSES))
def test_stub_class_is_marked_final(name):
    decorators = [ast.unparse(d) for d in STUB_CLASSES[name].decorator_list]
    assert "final" in decorators


@pytest.mark.parametrize("name", sorted(STUB_CLASSES))
def test_stub_class_has_docstring(name):
    doc = ast.get_docstring(STUB_CLASSES[name])
    assert doc and doc.strip()


@pytest.mark.parametrize(
    "qualname",
    sorted(
        f"{cls.name}.{member.name}"
        for cls in STUB_CLASSES.values()
        for member in _public_members(cls)
    ),
)
def test_stub_public_member_has_docstring(qualname):
    cls_name, member_name = qualname.split(".")
    (member,) = [m for m in _public_members(STUB_CLASSES[cls_name]) if m.name == member_name]
    doc = ast.get_docstring(member)
    assert doc and doc.strip(), f"{qualname} has no docstring in the stub"


@pytest.mark.parametrize(
    "qualname",
    sorted(
        f"{cls.name}.{member.name}"
        for cls in STUB_CLASSES.values()
        for member in _public_members(cls)
    ),
)
def test_stub_public_member_exists_at_runtime(qualname):
    cls_name, member_name = qualname.split(".")
    assert hasattr(getattr(ctxlock, cls_name), member_name)


@pytest.mark.parametrize("name", EXCEPTIONS)
def test_exception_has_docstring(name):
    doc = getattr(ctxlock, name).__doc__
    assert doc and doc.strip()


@pytest.mark.parametrize("name", sorted(STUB_CLASSES))
def test_runtime_class_has_docstring(name):
    doc = getattr(ctxlock, name).__doc__
    assert doc and doc.strip()


def test_module_docstring():
    assert ctxlock.__doc__ and ctxlock.__doc__.strip()


# --- runtime docs and signatures match the stub ---------------------------------------------


def _runtime_member(cls_name: str, member: str) -> object:
    # Through the class __dict__: a property's own docstring, not its value's.
    return vars(getattr(ctxlock, cls_name))[member]


@pytest.mark.parametrize("name", sorted(STUB_CLASSES))
def test_runtime_class_doc_is_the_stubs(name):
    assert getattr(ctxlock, name).__doc__ == ast.get_docstring(STUB_CLASSES[name])


@pytest.mark.parametrize(
    "qualname",
    sorted(
        f"{cls.name}.{member.name}"
        for cls in STUB_CLASSES.values()
        for member in _public_members(cls)
    ),
)
def test_runtime_member_doc_is_the_stubs(qualname):
    cls_name, member_name = qualname.split(".")
    (member,) = [m for m in _public_members(STUB_CLASSES[cls_name]) if m.name == member_name]
    runtime = _runtime_member(cls_name, member_name)
    assert runtime.__doc__ == ast.get_docstring(member), qualname


def _stub_parameters(node: ast.FunctionDef) -> list[tuple[str, str, str | None]]:
    """(name, kind, default) of each parameter after ``self``/``cls``."""
    args = node.args
    positional = [*args.posonlyargs, *args.args]
    defaults: list[ast.expr | None] = [None] * (len(positional) - len(args.defaults))
    defaults += args.defaults
    params = [
        (a.arg, "POSITIONAL_ONLY" if a in args.posonlyargs else "POSITIONAL_OR_KEYWORD", d)
        for a, d in zip(positional, defaults, strict=True)
    ][1:]
    params += [
        (a.arg, "KEYWORD_ONLY", d) for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True)
    ]
    return [(n, k, None if d is None else ast.unparse(d)) for n, k, d in params]


def _runtime_parameters(obj: object) -> list[tuple[str, str, str | None]]:
    params = list(inspect.signature(obj).parameters.values())  # type: ignore[arg-type]
    if not isinstance(obj, type):
        params = params[1:]  # self
    return [
        (p.name, p.kind.name, None if p.default is inspect.Parameter.empty else repr(p.default))
        for p in params
    ]


@pytest.mark.parametrize(
    "qualname",
    sorted(
        f"{cls.name}.{node.name}"
        for cls in STUB_CLASSES.values()
        for node in cls.body
        if isinstance(node, ast.FunctionDef)
        and (not node.name.startswith("_") or node.name == "__new__")
        and not any(ast.unparse(d) == "property" for d in node.decorator_list)
    ),
)
def test_runtime_signature_is_the_stubs(qualname):
    cls_name, member_name = qualname.split(".")
    (node,) = [
        n
        for n in STUB_CLASSES[cls_name].body
        if isinstance(n, ast.FunctionDef) and n.name == member_name
    ]
    cls = getattr(ctxlock, cls_name)
    runtime = cls if member_name == "__new__" else _runtime_member(cls_name, member_name)
    assert runtime.__text_signature__ is not None, qualname  # type: ignore[attr-defined]
    assert _runtime_parameters(runtime) == _stub_parameters(node)


# --- weak references and pickling ------------------------------------------------------------


def _instances() -> dict[str, Callable[[], object]]:
    def info() -> object:
        manager = ctxlock.LockManager()
        with manager.lock("public-api-info"):
            (found,) = manager.query("public-api-info")
        return found

    def released_unlock() -> object:
        unlock = ctxlock.Lock().acquire()
        unlock()
        return unlock

    return {
        "Lock": ctxlock.Lock,
        "SharableLock": ctxlock.SharableLock,
        "LockView": lambda: ctxlock.SharableLock().shared,
        "LockStatistics": lambda: ctxlock.Lock().statistics(),
        "CancelToken": ctxlock.CancelToken,
        "Unlock": released_unlock,
        "LockManager": ctxlock.LockManager,
        "NamedLock": lambda: ctxlock.LockManager().lock("public-api"),
        "NamedSharableLock": lambda: ctxlock.LockManager().sharable_lock("public-api"),
        "LockInfo": info,
    }


@pytest.mark.parametrize("name", sorted(STUB_CLASSES))
def test_weak_reference(name):
    obj = _instances()[name]()
    assert type(obj).__name__ == name
    ref = weakref.ref(obj)
    assert ref() is obj
    proxy = weakref.proxy(obj)
    assert repr(proxy) and type(obj).__name__ in repr(proxy)
    registry = weakref.WeakValueDictionary({"key": obj})
    del obj
    gc.collect()
    assert ref() is None
    assert "key" not in registry


def test_an_unlock_with_weak_references_still_releases_through_its_fast_call():
    lock = ctxlock.Lock()
    unlock = lock.acquire()
    ref = weakref.ref(unlock)
    ref()()
    assert not lock.locked()
    assert unlock.released
    assert "Unlock.__call__" in _ctxlock._fast_calls


@pytest.mark.parametrize("name", sorted(STUB_CLASSES))
def test_pickling_names_the_public_class(name):
    obj = _instances()[name]()
    message = re.escape(f"cannot pickle 'ctxlock.{name}' object")
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        with pytest.raises(TypeError, match=message):
            pickle.dumps(obj, protocol)
    with pytest.raises(TypeError, match=message):
        copy.copy(obj)
    with pytest.raises(TypeError, match=message):
        copy.deepcopy(obj)


# --- reprs -------------------------------------------------------------------------------------


def test_cancel_token_repr():
    assert repr(ctxlock.CancelToken()) == "<ctxlock.CancelToken cancelled=False deadline=None>"
    token = ctxlock.CancelToken(deadline=100)
    match = re.fullmatch(
        r"<ctxlock\.CancelToken cancelled=False deadline_in=(\d+\.\d{3})s>", repr(token)
    )
    assert match, repr(token)
    assert 90 < float(match.group(1)) <= 100
    token.cancel("client went away")
    assert repr(token) == "<ctxlock.CancelToken cancelled=True reason='client went away'>"
    timed_out = ctxlock.CancelToken(deadline=0.01)
    assert timed_out.wait(5)
    assert repr(timed_out).startswith("<ctxlock.CancelToken cancelled=True reason=LockTimeout(")


def test_cancel_token_repr_survives_a_reason_whose_repr_fails():
    class Bad:
        def __repr__(self) -> str:
            raise RuntimeError("no repr")

    token = ctxlock.CancelToken()
    token.cancel(Bad())
    assert re.fullmatch(
        r"<ctxlock\.CancelToken cancelled=True reason=<[\w.<>]*\.Bad object>>", repr(token)
    )


def _wait_for(predicate: Callable[[], bool]) -> None:
    end = time.monotonic() + 10
    while not predicate():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.005)


def test_lock_view_repr_shows_mode_state_and_waiters():
    rw = ctxlock.SharableLock()
    assert repr(rw.shared) == "<ctxlock.LockView shared unlocked waiting=0>"
    assert repr(rw.exclusive) == "<ctxlock.LockView exclusive unlocked waiting=0>"
    reader = rw.shared.acquire()
    assert repr(rw.shared) == "<ctxlock.LockView shared locked waiting=0>"
    assert repr(rw) == "<ctxlock.SharableLock shared by 1 waiting=0>"
    writer = threading.Thread(target=lambda: rw.exclusive.acquire(deadline=10)())
    writer.start()
    try:
        _wait_for(lambda: "waiting=1" in repr(rw.exclusive))
        assert repr(rw.exclusive) == "<ctxlock.LockView exclusive unlocked waiting=1>"
        assert repr(rw.shared) == "<ctxlock.LockView shared locked waiting=1>"
        assert repr(rw) == "<ctxlock.SharableLock shared by 1 waiting=1>"
    finally:
        reader()
        writer.join(10)
    with rw.exclusive:
        assert repr(rw.exclusive) == "<ctxlock.LockView exclusive locked waiting=0>"
        assert repr(rw) == "<ctxlock.SharableLock locked exclusive waiting=0>"
    assert repr(rw) == "<ctxlock.SharableLock unlocked waiting=0>"


def test_unlock_repr_shows_its_lock():
    lock = ctxlock.Lock(fair=True)
    unlock = lock.acquire()
    assert repr(unlock) == (
        "<ctxlock.Unlock exclusive holding lock=<ctxlock.Lock locked fair=True waiting=0>>"
    )
    unlock()
    assert repr(unlock) == (
        "<ctxlock.Unlock exclusive released lock=<ctxlock.Lock unlocked fair=True waiting=0>>"
    )
    rw = ctxlock.SharableLock()
    with rw.shared.acquire() as reader:
        assert repr(reader) == (
            "<ctxlock.Unlock shared holding lock=<ctxlock.LockView shared locked waiting=0>>"
        )


def test_lock_statistics_repr_and_value():
    rw = ctxlock.SharableLock()
    free = rw.shared.statistics()
    assert repr(free) == "LockStatistics(locked=False, holders=0, waiting=0)"
    with rw.shared, rw.shared:
        held = rw.shared.statistics()
        assert repr(held) == "LockStatistics(locked=True, holders=2, waiting=0)"
        assert repr(rw.exclusive.statistics()) == free.__repr__()
    assert held != free and rw.shared.statistics() == free
    assert hash(rw.exclusive.statistics()) == hash(free)
    with pytest.raises(AttributeError):
        free.locked = True  # type: ignore[misc]
    with pytest.raises(TypeError):
        ctxlock.LockStatistics()  # type: ignore[call-arg]
