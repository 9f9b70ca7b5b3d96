"""The public surface: ``__all__`` matches the stub, classes are final and documented."""

from __future__ import annotations

import ast
import re
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
EXCEPTIONS = ["Cancelled", "LockError", "LockTimeout", "WouldBlock"]


def _public_members(cls: ast.ClassDef) -> list[ast.FunctionDef]:
    return [
        node
        for node in cls.body
        if isinstance(node, ast.FunctionDef) and not node.name.startswith("_")
    ]


def test_stub_declares_the_expected_classes():
    assert set(STUB_CLASSES) == {"CancelToken", "Lock", "LockView", "SharableLock", "Unlock"}


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
