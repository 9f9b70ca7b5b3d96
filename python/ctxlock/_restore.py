"""Pickling of named locks: only what must be Python.

A ``NamedLock`` or ``NamedSharableLock`` of a scope that other processes share
(``"file:///dir"``, ``"postgresql://…"``) pickles as its manager's url, its name and which
object it is, so it can be passed to ``multiprocessing`` children, where it is the same
lock. The binding's ``__reduce__`` hands those three facts to ``_reduce``; the rules are
here.

A pickle names a lock, not a client: it carries no hold and no manager. Unpickling gives
the lock of that name from this process's own manager of the url (``manager_for``), so
an unpickled lock is another client of the scope than the pickled one, even in the same
process, and its holds exclude the original's. That is also why a lock of a closed
manager pickles like any other: the lock it names still exists, and the unpickled copy
uses the process's open manager of the url.
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING

from ctxlock._ctxlock import LockManager

if TYPE_CHECKING:
    from ctxlock._ctxlock import NamedLock, NamedSharableLock

__all__ = ["manager_for", "restore"]

#: Which object a pickle rebuilds: ``manager.lock(name)`` (which is the same lock, and the
#: same kind of object, as ``manager.sharable_lock(name).exclusive``), the shared view,
#: or the ``NamedSharableLock`` itself.
_WHICH = ("exclusive", "shared", "sharable")

_managers: dict[str, LockManager] = {}
_managers_lock = threading.Lock()
#: The managers a forked child inherited from its parent's ``_managers``: kept alive and
#: never used (see ``_after_fork_in_child``).
_inherited: list[LockManager] = []


def manager_for(url: str) -> LockManager:
    """This process's ``LockManager`` of ``url``, made by the first call for that url.

    Unpickled named locks come from it: one manager per url per process, shared by every
    lock unpickled here. The library never closes such a manager (it lives as long as the
    process); closing it yourself makes every lock unpickled from it raise
    ``BackendError``, and later unpickling of that url makes a new manager. A forked child
    makes its own: it never uses its parent's.

    Raises:
        ValueError: ``url`` is not a url of a scope.
        BackendError: the scope cannot be reached (or is not available in this build).
    """
    with _managers_lock:
        mgr = _managers.get(url)
        if mgr is None or mgr.closed:
            mgr = LockManager(url)
            _managers[url] = mgr
        return mgr


def restore(url: str, name: str, which: str) -> NamedLock | NamedSharableLock:
    """The named lock a pickle names: ``name`` at the scope ``url``, from ``manager_for(url)``.

    ``which`` is ``"exclusive"`` (``manager.lock(name)``), ``"shared"``
    (``manager.sharable_lock(name).shared``) or ``"sharable"``
    (``manager.sharable_lock(name)``). Any scope's url works here, ``"memory:"`` included
    (a memory-scope lock is never pickled, but restoring one names this process's lock).

    Raises:
        ValueError: ``which`` is none of those, or ``url`` or ``name`` is not valid.
        TypeError: ``url`` or ``name`` is not a str.
        BackendError: the scope cannot be reached (or is not available in this build).
    """
    if which not in _WHICH:
        raise ValueError(f"cannot restore a named lock of kind {which!r}; expected one of {_WHICH}")
    mgr = manager_for(url)
    if which == "exclusive":
        return mgr.lock(name)
    rw = mgr.sharable_lock(name)
    return rw.shared if which == "shared" else rw


def _reduce(url: str, name: str, which: str) -> tuple[object, tuple[str, str, str]]:
    """``__reduce__`` of a named lock: ``restore`` and its arguments.

    Raises:
        TypeError: the lock is of the ``"memory:"`` scope, a lock of this process only.
    """
    if url.startswith("memory:"):
        cls = "NamedSharableLock" if which == "sharable" else "NamedLock"
        raise TypeError(
            f"cannot pickle 'ctxlock.{cls}' object of the {url!r} scope: a memory-scope lock "
            "is a lock of this process only; use a LockManager('file:///dir') or "
            "LockManager('postgresql://…') to share a lock between processes"
        )
    return restore, (url, name, which)


def _after_fork_in_child() -> None:
    """A forked child starts with no managers: its parent's are another client's.

    The inherited managers are kept, not dropped, so that nothing of the parent's (a file
    descriptor, a connection) is closed or written to from the child.
    """
    global _managers, _managers_lock
    _inherited.extend(_managers.values())
    _managers = {}
    _managers_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
