"""The registry of lock families and kinds: every property test runs over it.

A *family* is one implementation of the lock API: a factory of exclusive locks (with the
members of ``Lock``), a factory of sharable locks (with the members of ``SharableLock``:
``shared`` and ``exclusive`` views), or both. A new family is one more line in
``FAMILIES``; everything else here is derived from it.

A *kind* is one thing a user acquires (a ``Lock``, one view of a ``SharableLock``, ...)
with what its tests need to know about it. A family's exclusive lock gives one kind,
named after the family; its sharable lock gives two, ``<family>.exclusive`` and
``<family>.shared``. The property files (``test_exclusion.py``, ``test_deadlines.py``,
``test_cancellation.py``, ``test_release.py``) and the suites that take a "which lock"
list read ``KINDS``; the model-based and stress tests (``test_state_machine.py``,
``test_stress.py``), which drive a whole lock, read ``FAMILIES``.
"""

from __future__ import annotations

import atexit
import itertools
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
from ctxlock import Lock, LockManager, LockView, NamedLock, NamedSharableLock, SharableLock
from ctxlock._bench import pg_server

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
    #: Waiters of this view are served strictly in the order they queued (the family's).
    fifo: bool
    #: The family the kind belongs to.
    family: Family = field(compare=False, repr=False)

    def new(self) -> Target:
        view, blocker = self.factory()
        return Target(self, view, blocker)

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class Family:
    """One implementation of the lock API, and how to make a fresh lock of it."""

    name: str
    #: A fresh exclusive lock (the members of ``Lock``), or None if the family has none.
    lock: Callable[[], Lock | NamedLock] | None = None
    #: A fresh sharable lock (the members of ``SharableLock``), or None.
    sharable: Callable[[], SharableLock | NamedSharableLock] | None = None
    #: Waiters are served strictly in the order they queued, threads too (a barging
    #: ``Lock`` lets a running thread overtake a queued one; tasks are always served in
    #: order).
    fifo: bool = True
    #: Every operation is a round trip to a server: the model-based test runs a quarter of
    #: its examples (its steps cost milliseconds, not microseconds).
    slow: bool = False
    #: Its kinds: the exclusive lock, then the sharable lock's exclusive and shared views.
    kinds: tuple[Kind, ...] = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.lock is None and self.sharable is None:
            raise ValueError(f"family {self.name!r} makes no lock")
        kinds: list[Kind] = []
        if self.lock is not None:
            kinds.append(Kind(self.name, _whole(self.lock), True, self.fifo, self))
        if self.sharable is not None:
            make = self.sharable
            for shared in (False, True):
                name = f"{self.name}.{'shared' if shared else 'exclusive'}"
                kinds.append(Kind(name, _view(make, shared), not shared, self.fifo, self))
        object.__setattr__(self, "kinds", tuple(kinds))

    def __str__(self) -> str:
        return self.name


def _whole(make: Callable[[], Lock | NamedLock]) -> Callable[[], tuple[View, View]]:
    def factory() -> tuple[View, View]:
        lock = make()
        return lock, lock

    return factory


def _view(
    make: Callable[[], SharableLock | NamedSharableLock], shared: bool
) -> Callable[[], tuple[View, View]]:
    def factory() -> tuple[View, View]:
        rw = make()
        return (rw.shared if shared else rw.exclusive), rw.exclusive

    return factory


_names = (f"kinds-{i}" for i in itertools.count())


def fresh_name() -> str:
    """A lock name no other test uses (named locks of one scope are shared by name)."""
    return next(_names)


_file_managers: list[LockManager] = []


def _file_manager() -> LockManager:
    """The manager of the file scope the registry's locks come from: one per test process,
    on a directory of its own (a manager is a client of the directory, with its own agent
    thread; the cross-process tests make the others)."""
    if not _file_managers:
        directory = tempfile.mkdtemp(prefix="ctxlock-kinds-")
        manager = LockManager(f"file://{directory}")
        _file_managers.append(manager)

        def remove() -> None:
            manager.close()
            shutil.rmtree(directory, ignore_errors=True)

        atexit.register(remove)
    return _file_managers[0]


_pg_managers: list[LockManager] = []


def _pg_manager() -> LockManager:
    """The manager of the postgres scope the registry's locks come from: one per test
    process, a client of this process's server (``pg_server.shared()``, started at the first
    lock made). Closed at exit before the server stops (atexit runs in reverse order)."""
    if not _pg_managers:
        manager = LockManager(pg_server.shared().url)
        _pg_managers.append(manager)
        atexit.register(manager.close)
    return _pg_managers[0]


#: Why the postgres family is left out here (no server can start), or None. A machine that
#: must run it fails the session instead (conftest.py, ``CTXLOCK_REQUIRE_PG``).
PG_MISSING = pg_server.missing()

#: Every implementation of the lock API; one line each.
FAMILIES: list[Family] = [
    Family("Lock", lock=Lock, fifo=False),
    Family("Lock(fair=True)", lock=lambda: Lock(fair=True)),
    Family("rw", sharable=SharableLock),
    Family(
        "named",
        lock=lambda: LockManager().lock(fresh_name()),
        sharable=lambda: LockManager().sharable_lock(fresh_name()),
    ),
    Family(
        "file",
        lock=lambda: _file_manager().lock(fresh_name()),
        sharable=lambda: _file_manager().sharable_lock(fresh_name()),
        # Threads of one manager may retake a name before a waiter wakes (see README).
        fifo=False,
    ),
    *(
        [
            Family(
                "pg",
                lock=lambda: _pg_manager().lock(fresh_name()),
                sharable=lambda: _pg_manager().sharable_lock(fresh_name()),
                # As the file scope: threads of one manager may retake a name first.
                fifo=False,
                slow=True,
            )
        ]
        if PG_MISSING is None
        else []
    ),
]
LOCK_FAMILIES = [f for f in FAMILIES if f.lock is not None]
SHARABLE_FAMILIES = [f for f in FAMILIES if f.sharable is not None]

KINDS: list[Kind] = [kind for family in FAMILIES for kind in family.kinds]
EXCLUSIVE_KINDS = [k for k in KINDS if k.exclusive]
FIFO_EXCLUSIVE_KINDS = [k for k in EXCLUSIVE_KINDS if k.fifo]


def kind_named(name: str) -> Kind:
    (kind,) = [k for k in KINDS if k.name == name]
    return kind


def over(kinds: list[Kind]) -> pytest.MarkDecorator:
    """Parametrize a test's ``kind`` argument by ``kinds``, with their names as ids."""
    return pytest.mark.parametrize("kind", kinds, ids=[k.name for k in kinds])


def over_families(families: list[Family]) -> pytest.MarkDecorator:
    """Parametrize a test's ``family`` argument by ``families``, with their names as ids."""
    return pytest.mark.parametrize("family", families, ids=[f.name for f in families])
