"""The registry of lock kinds: every property test runs over ``KINDS``.

A kind is one thing a user acquires (a ``Lock``, one view of a ``SharableLock``, ...) with
what its tests need to know about it. A new kind of lock is one more line in ``KINDS``; the
property files (``test_exclusion.py``, ``test_deadlines.py``, ``test_cancellation.py``,
``test_release.py``) and the suites that take a "which lock" list all read it from here.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass

import pytest
from ctxlock import Lock, LockManager, LockView, NamedLock, SharableLock

View = Lock | LockView | NamedLock


@dataclass(frozen=True)
class Target:
    """One fresh lock of a kind: the view under test and an exclusive view that blocks it."""

    kind: Kind
    view: View
    blocker: View

    @property
    def name(self) -> str:
        return self.kind.name

    @property
    def exclusive(self) -> bool:
        return self.kind.exclusive


@dataclass(frozen=True)
class Kind:
    """A kind of lock under test.

    ``factory`` makes a fresh lock and returns (the view under test, an exclusive view of
    the same lock that blocks it; the view itself when it is exclusive).
    """

    name: str
    factory: Callable[[], tuple[View, View]]
    #: One holder at a time (False: holders of the view share it).
    exclusive: bool
    #: Waiters of this view are served strictly in the order they queued, threads too
    #: (a barging ``Lock`` lets a running thread overtake a queued one; tasks are always
    #: served in order).
    fifo: bool

    def new(self) -> Target:
        view, blocker = self.factory()
        return Target(self, view, blocker)

    def __str__(self) -> str:
        return self.name


def _lock(fair: bool) -> tuple[View, View]:
    lock = Lock(fair=fair)
    return lock, lock


def _exclusive() -> tuple[View, View]:
    rw = SharableLock()
    return rw.exclusive, rw.exclusive


def _shared() -> tuple[View, View]:
    rw = SharableLock()
    return rw.shared, rw.exclusive


#: Named locks get a fresh name each time, so tests never meet on one.
_MANAGER = LockManager()
_names = (f"kinds-{i}" for i in itertools.count())


def _named_exclusive() -> tuple[View, View]:
    lock = _MANAGER.lock(next(_names))
    return lock, lock


def _named_rw(mode: str) -> tuple[View, View]:
    rw = _MANAGER.sharable_lock(next(_names))
    # The blocker is another manager's lock of the same name: one namespace per scope.
    blocker = LockManager().lock(rw.name)
    return getattr(rw, mode), blocker


KINDS: list[Kind] = [
    Kind("Lock", lambda: _lock(False), exclusive=True, fifo=False),
    Kind("Lock(fair=True)", lambda: _lock(True), exclusive=True, fifo=True),
    Kind("rw.exclusive", _exclusive, exclusive=True, fifo=True),
    Kind("rw.shared", _shared, exclusive=False, fifo=True),
    Kind("named", _named_exclusive, exclusive=True, fifo=True),
    Kind("named.exclusive", lambda: _named_rw("exclusive"), exclusive=True, fifo=True),
    Kind("named.shared", lambda: _named_rw("shared"), exclusive=False, fifo=True),
]
EXCLUSIVE_KINDS = [k for k in KINDS if k.exclusive]
FIFO_EXCLUSIVE_KINDS = [k for k in EXCLUSIVE_KINDS if k.fifo]


def kind_named(name: str) -> Kind:
    (kind,) = [k for k in KINDS if k.name == name]
    return kind


def over(kinds: list[Kind]) -> pytest.MarkDecorator:
    """Parametrize a test's ``kind`` argument by ``kinds``, with their names as ids."""
    return pytest.mark.parametrize("kind", kinds, ids=[k.name for k in kinds])
