"""LockManager: named locks, in-process scope ("memory:").

Every manager of a scope is a client of the same locks: ``LockManager()`` twice are two
clients of one namespace in this process. A name's exclusive mode (``mgr.lock(n)``) and the
two modes of ``mgr.sharable_lock(n)`` are one lock. The tests here use two or three
managers wherever one would do, so that each rule is checked across clients.

The memory scope is shared by the whole process, so each test takes its names under its own
prefix (the ``ns`` fixture) and leaves nothing held. Every wait is bounded by ``PATIENCE``;
no test asserts how long anything took.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import gc
import itertools
import json
import os
import pickle
import random
import re
import socket
import subprocess
import sys
import textwrap
import threading
import time
import uuid
import warnings
import weakref
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import ctxlock
import pytest
from conftest import PATIENCE, Holders, Worker, in_thread, wait_until
from ctxlock import (
    BackendError,
    Cancelled,
    CancelToken,
    Lock,
    LockError,
    LockInfo,
    LockManager,
    LockTimeout,
    NamedLock,
    NamedSharableLock,
    SharableLock,
    Unlock,
    WouldBlock,
    _restore,
)

Spawn = Callable[..., Worker]
Managers = Callable[[int], list[LockManager]]

MB = 1 << 20


# --- fixtures and helpers ---------------------------------------------------------------------


#: How far behind ``time.time()`` a recorded grant time may be (the coarse clock's tick;
#: Linux ticks every 1 to 10 ms).
CLOCK_TICK = 0.011


@pytest.fixture
def ns() -> str:
    """A name prefix of this test's own: the memory scope is shared by the whole process."""
    return f"test-{uuid.uuid4().hex[:12]}:"


@pytest.fixture
def scope_url() -> str:
    """The url of this module's scope, for a test that makes a manager of its own (the
    modules of the other scopes, which run the contract tests, give theirs)."""
    return "memory:"


@pytest.fixture
def managers() -> Iterator[Managers]:
    """``managers(k)`` makes k managers of this process's scope; all are closed at teardown."""
    made: list[LockManager] = []

    def make(k: int) -> list[LockManager]:
        new = [LockManager() if i % 2 == 0 else LockManager("memory:") for i in range(k)]
        made.extend(new)
        return new

    yield make
    for mgr in made:
        mgr.close()


#: The three ways to take a name: its exclusive lock and both modes of its sharable lock.
VIEWS = ["lock", "exclusive", "shared"]


def view(mgr: LockManager, name: str, which: str) -> NamedLock:
    if which == "lock":
        return mgr.lock(name)
    rw = mgr.sharable_lock(name)
    return rw.shared if which == "shared" else rw.exclusive


def assert_taken(blocker: NamedLock) -> None:
    """``blocker`` (an exclusive view) cannot be taken now."""
    intruder = blocker.try_acquire()
    if intruder is not None:
        intruder()
        pytest.fail(f"{blocker.name!r} was free although a hold had not been released")


def assert_free(mgr: LockManager, name: str) -> None:
    """Nothing holds or waits on ``name`` in any mode, and both modes can be taken."""
    for which in VIEWS:
        stats = view(mgr, name, which).statistics()
        assert (stats.locked, stats.holders, stats.waiting) == (False, 0, 0), (which, stats)
    for which in ("lock", "shared"):
        unlock = view(mgr, name, which).acquire(deadline=0)
        unlock()


def waiting(lock: NamedLock, count: int = 1) -> bool:
    """Wait until ``count`` requests queue on the name of ``lock`` (bounded by PATIENCE)."""
    return wait_until(lambda: lock.statistics().waiting >= count)


def take_and_release(lock: NamedLock) -> None:
    """Acquire ``lock`` (waiting at most twice PATIENCE) and release it at once."""
    lock.acquire(deadline=PATIENCE * 2)()


async def until(predicate: Callable[[], object], timeout: float = PATIENCE) -> bool:
    """``wait_until`` for a coroutine: polls without blocking the event loop."""
    end = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() >= end:
            return bool(predicate())
        await asyncio.sleep(0.002)
    return True


async def bounded(awaitable: Awaitable[Any]) -> Any:
    return await asyncio.wait_for(awaitable, PATIENCE)


# --- the manager: constructor, url, close ------------------------------------------------------


@pytest.mark.parametrize("url", [None, "memory:"], ids=["default", "memory:"])
def test_a_manager_of_this_process(url: str | None) -> None:
    mgr = LockManager() if url is None else LockManager(url)
    assert mgr.url == "memory:"
    assert mgr.closed is False
    mgr.close()
    assert mgr.closed is True
    assert mgr.url == "memory:"


def test_url_is_keyword_or_positional() -> None:
    with LockManager(url="memory:") as mgr:
        assert mgr.url == "memory:"


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://app:secret@127.0.0.1:1/locks?connect_timeout=2",
        "postgres://app:secret@127.0.0.1:1/locks?connect_timeout=2",
    ],
)
def test_an_unreachable_postgresql_server_is_a_backend_error_without_the_password(
    url: str,
) -> None:
    # Port 1 of the loopback refuses at once: the manager connects when it is made.
    with pytest.raises(BackendError) as caught:
        LockManager(url)
    assert isinstance(caught.value, LockError)
    assert isinstance(caught.value.reason, str) and caught.value.reason
    assert "secret" not in str(caught.value) and "secret" not in repr(caught.value)


@pytest.mark.parametrize("url", ["redis://localhost/0", "sqlite:///locks.db", "mem:", "http://x/y"])
def test_another_scheme_is_a_value_error_naming_the_supported_ones(url: str) -> None:
    with pytest.raises(ValueError) as caught:
        LockManager(url)
    message = str(caught.value)
    for scheme in ("memory", "file", "postgres"):
        assert scheme in message, message


@pytest.mark.parametrize("url", ["", "memory", "/var/lock/ctxlock"])
def test_a_str_without_a_scheme_is_a_value_error(url: str) -> None:
    with pytest.raises(ValueError):
        LockManager(url)


@pytest.mark.parametrize("url", ["file://relative/path", "file://locks", "file:relative"])
def test_a_file_url_needs_an_absolute_directory(url: str) -> None:
    with pytest.raises(ValueError):
        LockManager(url)


@pytest.mark.parametrize("url", [42, b"memory:", ["memory:"], object()], ids=repr)
def test_a_url_that_is_not_a_str_is_a_type_error(url: object) -> None:
    with pytest.raises(TypeError):
        LockManager(url)  # type: ignore[arg-type]


def test_close_is_idempotent() -> None:
    mgr = LockManager()
    mgr.close()
    mgr.close()
    assert mgr.closed


def test_close_returns_once_the_holds_have_ended_even_while_another_close_runs(
    ns: str, managers: Managers
) -> None:
    # A close() that finds the manager already closing waits for that close: when it
    # returns, every hold of the manager has ended (lost cancelled, names free).
    mgr, other = managers(2)
    unlocks = [mgr.lock(f"{ns}{i}").acquire() for i in range(8)]
    first_fired, go_on = threading.Event(), threading.Event()

    def stall() -> None:
        # The first lost token the closing thread cancels holds that close up.
        if not first_fired.is_set():
            first_fired.set()
            go_on.wait(PATIENCE)

    for u in unlocks:
        u.lost.on_cancel(stall)
    closing = in_thread(mgr.close)
    try:
        assert first_fired.wait(PATIENCE)
        second = in_thread(mgr.close)
        time.sleep(0.05)
        returned_early = second.done()
    finally:
        go_on.set()
    closing.result(PATIENCE)
    second.result(PATIENCE)
    assert not returned_early, "close() returned while the holds were still being ended"
    assert all(u.lost.cancelled for u in unlocks)
    for u in unlocks:
        u()
    for i in range(8):
        assert_free(other, f"{ns}{i}")


def test_with_returns_the_manager_and_closes_it() -> None:
    with LockManager() as mgr:
        assert isinstance(mgr, LockManager)
        assert not mgr.closed
    assert mgr.closed


def test_with_closes_the_manager_on_an_exception_and_lets_it_through(ns: str) -> None:
    with pytest.raises(KeyError, match="boom"), LockManager() as mgr:
        unlock = mgr.lock(ns + "a").acquire()
        raise KeyError("boom")
    assert mgr.closed
    assert unlock.lost.cancelled
    unlock()
    with LockManager() as other:
        assert_free(other, ns + "a")


def test_backend_error_is_a_lock_error() -> None:
    assert issubclass(BackendError, LockError)
    assert BackendError.__module__.startswith("ctxlock")


@pytest.mark.parametrize("which", VIEWS)
def test_every_acquire_on_a_closed_manager_raises_backend_error(
    which: str, ns: str, managers: Managers
) -> None:
    mgr, other = managers(2)
    lock = view(mgr, ns + "a", which)
    mgr.close()
    with pytest.raises(BackendError) as caught:
        lock.acquire()
    assert isinstance(caught.value.reason, str)
    with pytest.raises(BackendError):
        lock.acquire(deadline=0)
    with pytest.raises(BackendError):
        lock.acquire(deadline=PATIENCE)
    with pytest.raises(BackendError):
        lock.acquire(blocking=False)
    with pytest.raises(BackendError):
        lock.acquire(CancelToken())
    with pytest.raises(BackendError):
        lock.try_acquire()
    with pytest.raises(BackendError), lock:
        pytest.fail("entered a lock of a closed manager")

    async def main() -> None:
        with pytest.raises(BackendError):
            await lock.acquire_async()
        with pytest.raises(BackendError):
            await lock.acquire_async(deadline=0)
        with pytest.raises(BackendError):
            async with lock:
                pytest.fail("entered a lock of a closed manager")

    asyncio.run(main())
    # Nothing was taken on the name.
    assert_free(other, ns + "a")


def test_a_closed_manager_answers_who_holds_with_backend_error(ns: str, managers: Managers) -> None:
    # A closed manager no longer reaches its scope: "nobody" would be a wrong answer while
    # another client holds the name, so every scope raises, as its acquires do.
    mgr, other = managers(2)
    lock, rw = mgr.lock(ns + "a"), mgr.sharable_lock(ns + "a")
    held = other.lock(ns + "a").acquire()
    assert [i.name for i in mgr.query(ns + "a")] == [ns + "a"]
    mine = mgr.lock(ns + "b").acquire()
    assert " holding lock=" in repr(mine), repr(mine)
    mgr.close()
    # Its own hold ended with it: lost, before and after its unlock() (which finds nothing).
    assert " lost lock=" in repr(mine), repr(mine)
    assert mine.lost.cancelled
    mine()
    assert " lost lock=" in repr(mine), repr(mine)
    asks = {
        "query": lambda: mgr.query(ns),
        "locked": lock.locked,
        "statistics": lock.statistics,
        "shared.locked": rw.shared.locked,
        "sharable statistics": rw.statistics,
    }
    for what, ask in asks.items():
        with pytest.raises(BackendError, match="closed") as caught:
            ask()
        assert caught.value.reason == "the LockManager was closed", what
    assert repr(lock).endswith("(of a closed manager)>"), repr(lock)
    assert repr(rw).endswith("(of a closed manager)>"), repr(rw)
    # The other client's answer is as before.
    assert [i.name for i in other.query(ns)] == [ns + "a"]
    assert other.lock(ns + "a").locked()
    held()
    assert " released lock=" in repr(held), repr(held)
    assert_free(other, ns + "a")
    assert_free(other, ns + "b")


def test_closing_one_manager_leaves_the_others_working(ns: str, managers: Managers) -> None:
    closing, other = managers(2)
    held = other.lock(ns + "held").acquire()
    closing.close()
    assert not other.closed
    assert not held.lost.cancelled
    assert_taken(other.sharable_lock(ns + "held").exclusive)
    with other.lock(ns + "new"):
        assert other.lock(ns + "new").locked()
    held()
    assert_free(other, ns + "held")


# --- names ------------------------------------------------------------------------------------

FACTORIES = ["lock", "sharable_lock"]


def make(mgr: LockManager, factory: str, name: object) -> NamedLock | NamedSharableLock:
    return getattr(mgr, factory)(name)  # type: ignore[no-any-return]


@pytest.mark.parametrize("factory", FACTORIES)
@pytest.mark.parametrize(
    "name",
    ["x", "invoice:42", "x" * 1024, "é" * 512, "\N{SNOWMAN}" * 341, "🔒" * 256, " ", "a\0b"],
    ids=[
        "one",
        "invoice",
        "1024-ascii",
        "1024-bytes-2-each",
        "1023-bytes",
        "1024-bytes-4-each",
        "space",
        "nul",
    ],
)
def test_any_non_empty_str_up_to_1024_utf8_bytes_is_a_name(
    factory: str, name: str, managers: Managers
) -> None:
    assert len(name.encode()) <= 1024
    (mgr,) = managers(1)
    lock = make(mgr, factory, name)
    assert lock.name == name
    assert lock.manager is mgr
    target = lock if isinstance(lock, NamedLock) else lock.exclusive
    with target:
        assert target.locked()
    assert not target.locked()


@pytest.mark.parametrize("factory", FACTORIES)
@pytest.mark.parametrize(
    "name",
    ["", "x" * 1025, "é" * 513, "🔒" * 257, "x" * 1023 + "é"],
    ids=["empty", "1025-ascii", "1026-bytes", "1028-bytes", "1025-bytes-mixed"],
)
def test_an_empty_or_too_long_name_is_a_value_error(
    factory: str, name: str, managers: Managers
) -> None:
    (mgr,) = managers(1)
    with pytest.raises(ValueError):
        make(mgr, factory, name)


@pytest.mark.parametrize("factory", FACTORIES)
@pytest.mark.parametrize("name", [None, b"invoice", 42, ("a",), ["a"]], ids=repr)
def test_a_name_that_is_not_a_str_is_a_type_error(
    factory: str, name: object, managers: Managers
) -> None:
    (mgr,) = managers(1)
    with pytest.raises(TypeError):
        make(mgr, factory, name)


def test_named_locks_carry_their_name_mode_and_manager(ns: str, managers: Managers) -> None:
    (mgr,) = managers(1)
    lock = mgr.lock(ns + "invoice:42")
    assert isinstance(lock, NamedLock)
    assert (lock.name, lock.mode, lock.manager) == (ns + "invoice:42", "exclusive", mgr)
    assert lock.manager is mgr
    rw = mgr.sharable_lock(ns + "catalog")
    assert isinstance(rw, NamedSharableLock)
    assert (rw.name, rw.manager) == (ns + "catalog", mgr)
    assert rw.manager is mgr
    for mode in ("shared", "exclusive"):
        mode_view = getattr(rw, mode)
        assert isinstance(mode_view, NamedLock)
        assert (mode_view.name, mode_view.mode) == (ns + "catalog", mode)
        assert mode_view.manager is mgr


def test_a_named_lock_has_every_member_of_lock() -> None:
    public = {name for name in dir(Lock) if not name.startswith("_")} - {"fair"}
    assert public <= set(dir(NamedLock)), public - set(dir(NamedLock))
    for dunder in ("__enter__", "__exit__", "__aenter__", "__aexit__"):
        assert hasattr(NamedLock, dunder), dunder


# --- the rules of Lock, on each view ---------------------------------------------------------


@pytest.mark.parametrize("which", VIEWS)
def test_a_free_name_is_taken_at_once_every_way(which: str, ns: str, managers: Managers) -> None:
    mgr, other = managers(2)
    lock = view(mgr, ns + "a", which)
    unlock = lock.acquire()
    assert isinstance(unlock, Unlock)
    assert lock.locked()
    unlock()
    assert unlock.released
    for attempt in (
        lambda: lock.acquire(deadline=0),
        lambda: lock.acquire(deadline=PATIENCE),
        lambda: lock.acquire(blocking=False),
        lambda: lock.acquire(CancelToken(deadline=PATIENCE)),
        lock.try_acquire,
    ):
        got = attempt()
        assert isinstance(got, Unlock)
        got()
    with lock:
        assert lock.locked()
    assert_free(other, ns + "a")


@pytest.mark.parametrize("which", VIEWS)
def test_a_held_name_refuses_each_way(which: str, ns: str, managers: Managers) -> None:
    mgr, holder = managers(2)
    lock = view(mgr, ns + "a", which)
    held = holder.lock(ns + "a").acquire()
    assert lock.try_acquire() is None
    with pytest.raises(LockTimeout) as caught:
        lock.acquire(deadline=0)
    assert isinstance(caught.value, TimeoutError)
    with pytest.raises(LockTimeout):
        lock.acquire(deadline=0.02)
    with pytest.raises(WouldBlock):
        lock.acquire(blocking=False)
    with pytest.raises(WouldBlock):
        lock.acquire(blocking=0)
    assert lock.statistics().waiting == 0
    held()
    assert_free(mgr, ns + "a")


@pytest.mark.parametrize("which", VIEWS)
def test_an_already_cancelled_token_raises_at_once_even_when_free(
    which: str, ns: str, managers: Managers
) -> None:
    mgr, other = managers(2)
    lock = view(mgr, ns + "a", which)
    token = CancelToken()
    token.cancel("gone")
    with pytest.raises(Cancelled) as caught:
        lock.acquire(token)
    assert caught.value.reason == "gone"
    with pytest.raises(Cancelled):
        lock.acquire(token.child(), deadline=PATIENCE)

    async def main() -> None:
        with pytest.raises(Cancelled):
            await lock.acquire_async(token)

    asyncio.run(main())
    assert_free(other, ns + "a")


@pytest.mark.parametrize("which", VIEWS)
@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"deadline": -1}, ValueError),
        ({"deadline": float("nan")}, ValueError),
        ({"deadline": "1"}, TypeError),
        ({"deadline": 1, "blocking": False}, ValueError),
    ],
    ids=["negative", "nan", "str", "with-blocking-false"],
)
def test_bad_deadlines_name_deadline(
    which: str, kwargs: dict[str, Any], error: type[Exception], ns: str, managers: Managers
) -> None:
    mgr, other = managers(2)
    lock = view(mgr, ns + "a", which)
    with pytest.raises(error, match="deadline"):
        lock.acquire(**kwargs)
    if "blocking" not in kwargs:

        async def main() -> None:
            with pytest.raises(error, match="deadline"):
                await lock.acquire_async(**kwargs)

        asyncio.run(main())
    assert_free(other, ns + "a")


@pytest.mark.parametrize("which", VIEWS)
def test_a_waiter_is_cancelled_by_its_token_and_times_out_by_its_deadline(
    which: str, ns: str, managers: Managers, spawn: Spawn
) -> None:
    mgr, holder = managers(2)
    lock = view(mgr, ns + "a", which)
    held = holder.lock(ns + "a").acquire()
    token = CancelToken()
    waiter = spawn(lock.acquire, token, deadline=PATIENCE * 2)
    assert waiting(holder.lock(ns + "a"))
    token.cancel("stop")
    error = waiter.exception(PATIENCE)
    assert isinstance(error, Cancelled) and error.reason == "stop"
    with pytest.raises(LockTimeout):
        lock.acquire(deadline=0.05)
    assert holder.lock(ns + "a").statistics().waiting == 0
    held()
    assert_free(mgr, ns + "a")


# --- one namespace, many clients -------------------------------------------------------------


def test_two_managers_are_two_clients_of_the_same_locks(ns: str, managers: Managers) -> None:
    first, second = managers(2)  # LockManager() and LockManager("memory:")
    held = first.lock(ns + "invoice:42").acquire()
    assert_taken(second.lock(ns + "invoice:42"))
    assert_taken(first.lock(ns + "invoice:42"))  # a second NamedLock of the same manager too
    with second.lock(ns + "invoice:43"):  # another name is another lock
        pass
    held()
    assert_free(second, ns + "invoice:42")


@pytest.mark.parametrize("held_as", VIEWS)
@pytest.mark.parametrize("tried_as", VIEWS)
def test_the_modes_of_a_name_exclude_each_other_across_managers(
    held_as: str, tried_as: str, ns: str, managers: Managers
) -> None:
    first, second, third = managers(3)
    held = view(first, ns + "a", held_as).acquire()
    tried = view(second, ns + "a", tried_as).try_acquire()
    both_shared = held_as == tried_as == "shared"
    if both_shared:
        assert tried is not None, "two shared holds of a name overlap"
        assert view(third, ns + "a", "shared").statistics().holders == 2
        tried()
    else:
        assert tried is None, f"{tried_as} got in while {held_as} held"
    held()
    assert_free(third, ns + "a")


def test_the_exclusive_lock_of_a_name_is_the_exclusive_mode_of_its_sharable_lock(
    ns: str, managers: Managers
) -> None:
    first, second = managers(2)
    with first.lock(ns + "a"):
        assert second.sharable_lock(ns + "a").exclusive.locked()
        assert second.sharable_lock(ns + "a").exclusive.statistics().holders == 1
    with first.sharable_lock(ns + "a").exclusive:
        assert second.lock(ns + "a").locked()
    assert_free(second, ns + "a")


def test_a_blocked_acquire_gets_the_name_when_another_client_unlocks(
    ns: str, managers: Managers, spawn: Spawn
) -> None:
    first, second = managers(2)
    held = first.lock(ns + "a").acquire()
    waiter = spawn(second.lock(ns + "a").acquire, deadline=PATIENCE * 2)
    assert waiting(first.lock(ns + "a"))
    assert not waiter.done
    held()
    got = waiter.result(PATIENCE)
    assert isinstance(got, Unlock)
    assert first.lock(ns + "a").locked()
    got()
    assert_free(first, ns + "a")


@pytest.mark.parametrize("first_as", VIEWS)
@pytest.mark.parametrize("then_as", ["lock", "shared"])
def test_unlock_returns_once_the_hold_is_released(
    first_as: str, then_as: str, ns: str, managers: Managers, spawn: Spawn
) -> None:
    # Right after unlock() returns, another client's single try succeeds: every time.
    first, second = managers(2)
    name = ns + "a"
    mine = view(first, name, first_as)
    theirs = view(second, name, then_as)
    for _ in range(500):
        unlock = mine.acquire()
        unlock()
        theirs.acquire(deadline=0)()
    # Also when the hold is released from another thread.
    for _ in range(50):
        unlock = mine.acquire()
        spawn(unlock).result(PATIENCE)
        theirs.acquire(deadline=0)()
    assert_free(second, name)


def test_locked_and_statistics_count_the_holds_of_every_manager(
    ns: str, managers: Managers, spawn: Spawn
) -> None:
    first, second, third = managers(3)
    name = ns + "a"
    readers = [
        first.sharable_lock(name).shared.acquire(),
        second.sharable_lock(name).shared.acquire(),
    ]
    shared = third.sharable_lock(name).shared
    assert shared.locked()
    stats = shared.statistics()
    assert (stats.locked, stats.holders, stats.waiting) == (True, 2, 0)
    # Writers queue through two managers: every manager counts both.
    writers = [
        spawn(take_and_release, first.lock(name)),
        spawn(take_and_release, second.sharable_lock(name).exclusive),
    ]
    assert waiting(third.lock(name), 2)
    for mgr in (first, second, third):
        assert mgr.lock(name).statistics().waiting == 2
        assert mgr.sharable_lock(name).shared.statistics().waiting == 2
    for unlock in readers:
        unlock()
    for writer in writers:
        writer.result(PATIENCE)
    assert_free(third, name)


def test_exclusive_holds_never_overlap_across_managers_in_threads(
    ns: str, managers: Managers, spawn: Spawn
) -> None:
    clients = managers(3)
    name = ns + "counter"
    holders = Holders()
    rounds = 300

    def worker(me: int) -> None:
        rng = random.Random(me)
        mgr = clients[me % len(clients)]
        for _ in range(rounds):
            which = rng.choice(VIEWS)
            exclusive = which != "shared"
            with view(mgr, name, which).acquire(deadline=PATIENCE * 2):
                holders.enter(exclusive, f"worker {me}")
                if rng.random() < 0.2:
                    time.sleep(0)
                holders.leave(exclusive)

    workers = [spawn(worker, i) for i in range(6)]
    for w in workers:
        w.result(PATIENCE * 4)
    assert not holders.overlaps, holders.overlaps[:5]
    assert holders.entries == 6 * rounds
    assert_free(clients[0], name)


def test_shared_holds_of_many_managers_overlap(ns: str, managers: Managers, spawn: Spawn) -> None:
    clients = managers(3)
    name = ns + "a"
    inside = threading.Barrier(len(clients), timeout=PATIENCE)

    def reader(mgr: LockManager) -> None:
        with mgr.sharable_lock(name).shared.acquire(deadline=PATIENCE):
            inside.wait()  # all three hold at once, or the barrier breaks

    for w in [spawn(reader, mgr) for mgr in clients]:
        w.result(PATIENCE * 2)
    assert_free(clients[0], name)


@pytest.mark.asyncio
async def test_tasks_of_many_managers_exclude_each_other(ns: str, managers: Managers) -> None:
    clients = managers(3)
    name = ns + "counter"
    holders = Holders()
    rounds = 100

    async def task(me: int) -> None:
        rng = random.Random(me)
        mgr = clients[me % len(clients)]
        for _ in range(rounds):
            which = rng.choice(VIEWS)
            exclusive = which != "shared"
            async with view(mgr, name, which):
                holders.enter(exclusive, f"task {me}")
                await asyncio.sleep(0)
                holders.leave(exclusive)

    await asyncio.wait_for(asyncio.gather(*(task(i) for i in range(8))), PATIENCE * 4)
    assert not holders.overlaps, holders.overlaps[:5]
    assert holders.entries == 8 * rounds
    assert_free(clients[0], name)


@pytest.mark.asyncio
async def test_a_task_and_a_thread_of_different_managers_hand_over(
    ns: str, managers: Managers
) -> None:
    # A task and a thread wait for the name through two managers; each release lets exactly
    # one of them in (whichever the policy picks), the other only after it.
    first, second, third = managers(3)
    name = ns + "a"
    held = await first.lock(name).acquire_async()
    task = asyncio.ensure_future(second.lock(name).acquire_async(deadline=PATIENCE * 2))
    assert await until(lambda: first.lock(name).statistics().waiting == 1)
    thread = asyncio.wrap_future(
        in_thread(lambda: third.sharable_lock(name).exclusive.acquire(deadline=PATIENCE * 2))
    )
    assert await until(lambda: first.lock(name).statistics().waiting == 2)
    held()
    done, pending = await asyncio.wait(
        {task, thread}, timeout=PATIENCE, return_when="FIRST_COMPLETED"
    )
    assert len(done) == 1, "none or both of the waiters got the name"
    (winner,), (loser,) = done, pending
    assert not loser.done()
    assert_taken(first.lock(name))
    winner.result()()
    (await bounded(loser))()
    assert_free(first, name)


# --- phase-fair: a waiting exclusive request holds new shared requests back --------------------


@pytest.mark.parametrize("writer_as", ["lock", "exclusive"])
@pytest.mark.parametrize("gives_up_by", ["deadline", "token"])
def test_a_waiting_writer_holds_readers_back_until_it_gives_up(
    writer_as: str, gives_up_by: str, ns: str, managers: Managers, spawn: Spawn
) -> None:
    first, second, third = managers(3)
    name = ns + "a"
    reader0 = first.sharable_lock(name).shared.acquire()
    token = CancelToken()
    if gives_up_by == "deadline":
        writer = spawn(view(second, name, writer_as).acquire, deadline=2.0)
    else:
        writer = spawn(view(second, name, writer_as).acquire, token, deadline=PATIENCE * 2)
    assert waiting(third.lock(name))
    late = third.sharable_lock(name).shared
    assert late.try_acquire() is None, "a writer waits: new readers queue behind it"
    with pytest.raises(WouldBlock):
        late.acquire(blocking=False)
    with pytest.raises(LockTimeout):
        late.acquire(deadline=0)
    reader1 = spawn(late.acquire, deadline=PATIENCE * 2)
    assert waiting(third.lock(name), 2)
    assert not reader1.done
    if gives_up_by == "token":
        token.cancel("writer gave up")
    error = writer.exception(PATIENCE * 2)
    assert isinstance(error, Cancelled if gives_up_by == "token" else LockTimeout), error
    # The reader held back gets in at once, while reader0 still holds.
    got = reader1.result(PATIENCE)
    assert not reader0.released
    assert third.sharable_lock(name).shared.statistics().holders == 2
    got()
    reader0()
    assert_free(third, name)


# --- fences ----------------------------------------------------------------------------------


def test_a_plain_locks_unlock_has_no_fence_and_no_lost_token() -> None:
    lock = Lock()
    rw = SharableLock()
    for unlock in (lock.acquire(), rw.shared.acquire()):
        assert unlock.fence is None
        assert unlock.lost is None
        unlock()
    unlock = rw.exclusive.acquire()
    assert (unlock.fence, unlock.lost) == (None, None)
    unlock()


def test_fences_are_ints(ns: str, managers: Managers) -> None:
    (mgr,) = managers(1)
    for which in VIEWS:
        unlock = view(mgr, ns + "a", which).acquire()
        fence = unlock.fence
        unlock()
        assert isinstance(fence, int) and not isinstance(fence, bool), fence


def test_exclusive_fences_strictly_increase_across_managers(ns: str, managers: Managers) -> None:
    clients = managers(3)
    name = ns + "a"
    fences = []
    for i in range(300):
        mgr = clients[i % 3]
        unlock = view(mgr, name, "lock" if i % 2 else "exclusive").acquire()
        fences.append(unlock.fence)
        unlock()
    assert all(a < b for a, b in itertools.pairwise(fences)), fences


def test_fences_never_decrease_in_grant_order_and_writers_exceed_all_before(
    ns: str, managers: Managers
) -> None:
    first, second, third = managers(3)
    name = ns + "a"
    r1 = first.sharable_lock(name).shared.acquire()
    r2 = second.sharable_lock(name).shared.acquire()
    assert r2.fence >= r1.fence
    r1()
    r3 = third.sharable_lock(name).shared.acquire()
    assert r3.fence >= r2.fence
    r2()
    r3()
    w = first.lock(name).acquire()
    assert w.fence > max(r1.fence, r2.fence, r3.fence)
    w()
    r4 = second.sharable_lock(name).shared.acquire()
    assert r4.fence >= w.fence
    r4()
    w2 = third.sharable_lock(name).exclusive.acquire()
    assert w2.fence > r4.fence and w2.fence > w.fence
    w2()


def test_fences_keep_their_order_under_threads_of_many_managers(
    ns: str, managers: Managers, spawn: Spawn
) -> None:
    # Each holder records (exclusive, fence) while it holds. A writer's record follows the
    # records of every grant before it (they were released before it got in), so: each
    # writer's fence exceeds every fence recorded before it, and each reader's fence is at
    # least that of every writer recorded before it.
    clients = managers(3)
    name = ns + "a"
    records: list[tuple[bool, int]] = []
    meta = threading.Lock()

    def worker(me: int) -> None:
        rng = random.Random(me)
        mgr = clients[me % 3]
        for _ in range(200):
            which = rng.choice(VIEWS)
            with view(mgr, name, which).acquire(deadline=PATIENCE * 2) as unlock:
                with meta:
                    records.append((which != "shared", unlock.fence))
                time.sleep(0)

    for w in [spawn(worker, i) for i in range(6)]:
        w.result(PATIENCE * 4)
    top = top_writer = -1
    for i, (exclusive, fence) in enumerate(records):
        if exclusive:
            assert fence > top, (i, records[max(0, i - 5) : i + 1])
            top_writer = fence
        else:
            assert fence >= top_writer, (i, records[max(0, i - 5) : i + 1])
        top = max(top, fence)
    assert_free(clients[0], name)


def test_fences_keep_growing_after_the_name_was_freed(ns: str) -> None:
    name = ns + "a"
    first = LockManager()
    unlock = first.lock(name).acquire()
    before = unlock.fence
    unlock()
    first.close()
    del first, unlock
    gc.collect()
    # Nothing references the name now; other names come and go in between.
    with LockManager() as churn:
        for i in range(10_000):
            churn.lock(f"{ns}other-{i}").acquire()()
    gc.collect()
    with LockManager() as second:
        unlock = second.lock(name).acquire()
        after = unlock.fence
        unlock()
        assert after > before
        reader = second.sharable_lock(name).shared.acquire()
        assert reader.fence >= after
        reader()
        writer = second.sharable_lock(name).exclusive.acquire()
        assert writer.fence > after
        writer()


# --- lost: the hold ended without unlock() ---------------------------------------------------


@pytest.mark.parametrize("which", VIEWS)
def test_lost_is_one_token_never_cancelled_by_unlock(
    which: str, ns: str, managers: Managers
) -> None:
    (mgr,) = managers(1)
    unlock = view(mgr, ns + "a", which).acquire()
    lost = unlock.lost
    assert isinstance(lost, CancelToken)
    assert unlock.lost is lost
    assert not lost.cancelled
    unlock()
    assert unlock.lost is lost
    assert not lost.cancelled
    unlock()
    mgr.close()  # a released hold is not lost when its manager closes
    assert not lost.cancelled
    assert not lost.wait(0.01)


@pytest.mark.parametrize("which", VIEWS)
def test_closing_the_manager_loses_its_holds_and_frees_the_name(
    which: str, ns: str, managers: Managers
) -> None:
    mgr, other, third = managers(3)
    name = ns + "a"
    unlock = view(mgr, name, which).acquire()
    lost = unlock.lost
    fired: list[bool] = []
    lost.on_cancel(lambda: fired.append(True))
    mgr.close()
    assert lost.cancelled
    assert isinstance(lost.reason, BackendError), lost.reason
    assert isinstance(lost.reason.reason, str)
    assert wait_until(lambda: fired == [True]), fired
    assert unlock.lost is lost
    # The name is free for the other managers at once.
    theirs = other.lock(name).acquire(deadline=0)
    # Calling the lost hold's unlock now is harmless: it never releases their hold.
    unlock()
    unlock()
    assert_taken(third.lock(name))
    assert not theirs.lost.cancelled
    theirs()
    assert_free(third, name)


def test_lost_first_read_after_close_is_already_cancelled(ns: str, managers: Managers) -> None:
    mgr, other = managers(2)
    unlock = mgr.lock(ns + "a").acquire()
    mgr.close()
    lost = unlock.lost
    assert lost.cancelled
    assert isinstance(lost.reason, BackendError)
    unlock()
    assert_free(other, ns + "a")


def test_lost_first_read_after_close_and_unlock_is_cancelled(ns: str, managers: Managers) -> None:
    # The hold ended with its manager, before unlock() (which then released nothing):
    # it was lost, whenever ``lost`` is first read.
    mgr, other = managers(2)
    unlock = mgr.lock(ns + "a").acquire()
    mgr.close()
    unlock()
    lost = unlock.lost
    assert lost.cancelled
    assert isinstance(lost.reason, BackendError)
    assert_free(other, ns + "a")


def test_an_unlock_of_a_lost_hold_dropped_uncalled_does_not_warn(
    ns: str, managers: Managers
) -> None:
    # The hold ended with its manager: dropping its Unlock releases nothing, so there is
    # no "garbage-collected while holding its lock" ResourceWarning to give.
    mgr, other = managers(2)
    unlock = mgr.lock(ns + "a").acquire()
    mgr.close()
    with warnings.catch_warnings():
        warnings.simplefilter("error", ResourceWarning)
        seen: list[object] = []
        old_hook = sys.unraisablehook
        sys.unraisablehook = seen.append
        try:
            del unlock
            gc.collect()
        finally:
            sys.unraisablehook = old_hook
    assert seen == []
    assert_free(other, ns + "a")


def test_close_wakes_whoever_waits_on_lost(ns: str, managers: Managers, spawn: Spawn) -> None:
    mgr, other = managers(2)
    unlock = mgr.sharable_lock(ns + "a").shared.acquire()
    watcher = spawn(unlock.lost.wait, PATIENCE * 2)
    time.sleep(0.01)
    # Still waiting: the close() below is what ends its wait.
    assert not watcher.done
    in_thread(mgr.close).result(PATIENCE)
    assert watcher.result(PATIENCE) is True
    unlock()
    assert_free(other, ns + "a")


def test_a_with_never_exited_ends_with_its_manager_garbage_collected(
    ns: str, managers: Managers, scope_url: str
) -> None:
    # A manager dropped without close() ends its holds as close() does. Only holds taken
    # by a `with` (or `async with`) entered and never exited can be left then: an Unlock,
    # a waiter or a handle keeps its manager alive. Nothing else could ever release them.
    (other,) = managers(1)

    def enter_and_forget() -> weakref.ref[LockManager]:
        mgr = LockManager(scope_url)
        mgr.lock(ns + "a").__enter__()
        mgr.sharable_lock(ns + "b").shared.__enter__()

        async def enter() -> None:
            await mgr.sharable_lock(ns + "c").exclusive.__aenter__()

        asyncio.run(enter())
        return weakref.ref(mgr)

    gone = enter_and_forget()
    gc.collect()
    assert gone() is None
    for name in ("a", "b", "c"):
        assert other.lock(ns + name).acquire(deadline=PATIENCE)() is None, name


def test_a_lost_callback_finds_its_name_free_everywhere(ns: str, managers: Managers) -> None:
    # close() cancels the lost tokens once every hold has ended at every level (the
    # scope's own, a file table's kernel lock, a server's advisory lock): a callback that
    # takes the name from another manager gets it at once. (It waited for a release that
    # only the close() it ran in would make, after it.)
    mgr, other = managers(2)
    unlock = mgr.sharable_lock(ns + "a").exclusive.acquire()
    got: list[object] = []

    def take() -> None:
        try:
            other.lock(ns + "a").acquire(deadline=PATIENCE)()
            got.append("acquired")
        except LockError as exc:
            got.append(exc)

    assert unlock.lost is not None
    unlock.lost.on_cancel(take)
    in_thread(mgr.close).result(PATIENCE * 3)
    assert got == ["acquired"]
    unlock()


def test_an_interrupt_in_a_lost_callback_comes_out_of_close(
    ns: str, managers: Managers, monkeypatch: pytest.MonkeyPatch
) -> None:
    # close() cancels its holds' lost tokens, whose callbacks run in its thread: a
    # KeyboardInterrupt one raises (a Ctrl-C while it ran) comes out of close(), once
    # every hold has ended; an Exception goes to sys.unraisablehook, as for cancel().
    seen: list[type[BaseException] | None] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: seen.append(u.exc_type))
    mgr, other = managers(2)
    first, second = mgr.lock(ns + "a").acquire(), mgr.lock(ns + "b").acquire()

    def interrupt() -> None:
        raise KeyboardInterrupt

    def error() -> None:
        raise ValueError("an error")

    assert first.lost is not None and second.lost is not None
    first.lost.on_cancel(interrupt)
    second.lost.on_cancel(error)
    with pytest.raises(KeyboardInterrupt):
        mgr.close()
    assert mgr.closed
    assert first.lost.cancelled and second.lost.cancelled
    assert seen == [ValueError]
    for name in ("a", "b"):
        assert other.lock(ns + name).acquire(deadline=PATIENCE)() is None
    mgr.close()  # again: nothing left to end, nothing raised
    first()
    second()


def test_close_loses_every_hold_of_that_manager_and_no_other(ns: str, managers: Managers) -> None:
    mgr, other = managers(2)
    mine = [mgr.lock(ns + "a").acquire(), mgr.sharable_lock(ns + "b").shared.acquire()]
    mine.append(mgr.sharable_lock(ns + "b").shared.acquire())
    theirs = [other.lock(ns + "c").acquire(), other.sharable_lock(ns + "b").shared.acquire()]
    mgr.close()
    assert all(u.lost.cancelled for u in mine)
    assert not any(u.lost.cancelled for u in theirs)
    assert other.sharable_lock(ns + "b").shared.statistics().holders == 1
    assert other.lock(ns + "a").acquire(deadline=0)() is None
    for u in mine + theirs:
        u()
    for name in ("a", "b", "c"):
        assert_free(other, ns + name)


def test_a_with_exit_releases_only_a_hold_of_its_own_manager(ns: str, managers: Managers) -> None:
    # One thread holds a name's shared mode by ``with`` through two managers. Closing one
    # ends its hold only: the other ``with`` still holds the name, and every exit works.
    mgr, other, third = managers(3)
    mine, theirs = mgr.sharable_lock(ns + "x").shared, other.sharable_lock(ns + "x").shared
    with mine:
        with theirs:
            other.close()
        assert mine.locked()
        assert_taken(third.lock(ns + "x"))
    assert_free(third, ns + "x")


@pytest.mark.asyncio
async def test_an_async_with_exit_releases_only_a_hold_of_its_own_manager(
    ns: str, managers: Managers
) -> None:
    # Two tasks of one loop (one thread) hold the shared mode through two managers and
    # leave in the other order; closing the first manager must not end the second's hold.
    mgr, other, third = managers(3)
    first_in, first_out, second_in = asyncio.Event(), asyncio.Event(), asyncio.Event()

    async def first() -> None:
        async with mgr.sharable_lock(ns + "x").shared:
            first_in.set()
            await second_in.wait()
        first_out.set()

    async def second() -> None:
        await first_in.wait()
        async with other.sharable_lock(ns + "x").shared:
            second_in.set()
            await first_out.wait()
            mgr.close()
            assert other.sharable_lock(ns + "x").shared.locked()
            assert_taken(third.lock(ns + "x"))

    await bounded(asyncio.gather(first(), second()))
    assert_free(third, ns + "x")


# --- close ends the waits through that manager -------------------------------------------------


@pytest.mark.parametrize("which", VIEWS)
def test_close_ends_a_thread_waiting_through_that_manager(
    which: str, ns: str, managers: Managers, spawn: Spawn
) -> None:
    mgr, holder, bystander = managers(3)
    name = ns + "a"
    held = holder.lock(name).acquire()
    waiter = spawn(view(mgr, name, which).acquire, deadline=PATIENCE * 2)
    other_waiter = spawn(bystander.lock(name).acquire, deadline=PATIENCE * 2)
    assert waiting(holder.lock(name), 2)
    mgr.close()
    error = waiter.exception(PATIENCE)
    assert isinstance(error, BackendError), error
    # The other manager's waiter still waits, and gets the name when it is released.
    assert not other_waiter.done
    assert holder.lock(name).statistics().waiting == 1
    held()
    other_waiter.result(PATIENCE)()
    assert_free(holder, name)


def test_close_ends_both_the_hold_and_the_waiters_of_that_manager(
    ns: str, managers: Managers, spawn: Spawn
) -> None:
    # The manager's own waiter must not be handed the hold that close() ends.
    mgr, other = managers(2)
    name = ns + "a"
    held = mgr.lock(name).acquire()
    waiter = spawn(mgr.lock(name).acquire, deadline=PATIENCE * 2)
    assert waiting(other.lock(name))
    other_waiter = spawn(other.lock(name).acquire, deadline=PATIENCE * 2)
    assert waiting(other.lock(name), 2)
    in_thread(mgr.close).result(PATIENCE)
    assert isinstance(waiter.exception(PATIENCE), BackendError)
    assert held.lost.cancelled
    got = other_waiter.result(PATIENCE)
    held()
    assert_taken(other.sharable_lock(name).exclusive)
    got()
    assert_free(other, name)


@pytest.mark.asyncio
@pytest.mark.parametrize("how", ["acquire_async", "async with"])
async def test_close_ends_a_task_waiting_through_that_manager(
    how: str, ns: str, managers: Managers
) -> None:
    mgr, holder = managers(2)
    name = ns + "a"
    held = holder.lock(name).acquire()
    lock = mgr.sharable_lock(name).shared

    async def wait() -> None:
        if how == "acquire_async":
            unlock = await lock.acquire_async(deadline=PATIENCE * 2)
            unlock()
        else:
            async with lock:
                pass

    task = asyncio.create_task(wait())
    assert await until(lambda: holder.lock(name).statistics().waiting == 1)
    mgr.close()
    with pytest.raises(BackendError):
        await bounded(task)
    assert_taken(holder.lock(name))
    assert holder.lock(name).statistics().waiting == 0
    held()
    assert_free(holder, name)


@pytest.mark.asyncio
async def test_close_from_another_thread_ends_a_waiting_task(ns: str, managers: Managers) -> None:
    mgr, holder = managers(2)
    name = ns + "a"
    held = holder.lock(name).acquire()
    task = asyncio.create_task(mgr.lock(name).acquire_async(deadline=PATIENCE * 2))
    assert await until(lambda: holder.lock(name).statistics().waiting == 1)
    await bounded(asyncio.wrap_future(in_thread(mgr.close)))
    with pytest.raises(BackendError):
        await bounded(task)
    held()
    assert_free(holder, name)


# --- query ----------------------------------------------------------------------------------


def owner_prefix() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


class HoldingThread:
    """A thread named ``name`` that takes ``lock`` and holds it until ``release()``."""

    def __init__(self, name: str, lock: NamedLock) -> None:
        self._lock = lock
        self._release = threading.Event()
        self._held = threading.Event()
        self.before = time.time()
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()
        assert self._held.wait(PATIENCE), f"{name} did not get {lock.name!r}"
        self.after = time.time()

    def _run(self) -> None:
        with self._lock.acquire(deadline=PATIENCE):
            self._held.set()
            self._release.wait(PATIENCE * 4)

    def release(self) -> None:
        self._release.set()
        self.thread.join(PATIENCE)
        assert not self.thread.is_alive()


@pytest.mark.asyncio
async def test_query_lists_the_holds_and_waiters_of_every_manager(
    ns: str, managers: Managers
) -> None:
    first, second, third = managers(3)
    tag = uuid.uuid4().hex[:8]
    windows: dict[tuple[str, str], tuple[float, float]] = {}
    # (name, mode, state) -> who: the thread or task name that the owner should contain.
    expected: dict[tuple[str, str, str], str] = {}

    # Holds taken by named threads through two managers, kept while the query runs.
    holder_a = HoldingThread(f"holder-a-{tag}", first.lock(ns + "a"))
    windows[("a", "held")] = (holder_a.before, holder_a.after)
    expected[(ns + "a", "exclusive", "held")] = f"holder-a-{tag}"
    holder_b = HoldingThread(f"holder-b-{tag}", second.sharable_lock(ns + "b").shared)
    windows[("b", "held")] = (holder_b.before, holder_b.after)
    expected[(ns + "b", "shared", "held")] = f"holder-b-{tag}"

    # A hold taken by a task.
    t0 = time.time()
    hold_c = await bounded(
        asyncio.ensure_future(third.sharable_lock(ns + "c").shared.acquire_async())
    )
    windows[("c", "held")] = (t0, time.time())
    expected[(ns + "c", "shared", "held")] = ""

    # A thread waiting through the third manager, a task waiting through the first.
    t0 = time.time()
    wait_a = in_thread(
        named_thread(f"waiter-a-{tag}", lambda: third.lock(ns + "a").acquire(deadline=PATIENCE * 2))
    )
    assert await until(lambda: first.lock(ns + "a").statistics().waiting == 1)
    windows[("a", "waiting")] = (t0, time.time())
    expected[(ns + "a", "exclusive", "waiting")] = f"waiter-a-{tag}"
    t0 = time.time()
    wait_b = asyncio.ensure_future(first.lock(ns + "b").acquire_async(deadline=PATIENCE * 2))
    assert await until(lambda: first.lock(ns + "b").statistics().waiting == 1)
    windows[("b", "waiting")] = (t0, time.time())
    expected[(ns + "b", "exclusive", "waiting")] = ""

    try:
        for mgr in (first, second, third):
            infos = mgr.query(ns)
            assert all(isinstance(info, LockInfo) for info in infos)
            assert sorted((i.name, i.mode, i.state) for i in infos) == sorted(expected), infos
            for info in infos:
                assert owner_prefix() in info.owner, info
                assert expected[(info.name, info.mode, info.state)] in info.owner, info
                lo, hi = windows[(info.name[len(ns) :], info.state)]
                assert isinstance(info.since, (int, float))
                # A grant's time is read from the coarse clock (one clock tick, a few
                # milliseconds, behind time.time() at most).
                assert lo - CLOCK_TICK <= info.since <= hi + 0.001, (info, lo, hi)
        # The prefix filters by name; the default prefix lists everything, ours included.
        assert {(i.name, i.state) for i in third.query(ns + "a")} == {
            (ns + "a", "held"),
            (ns + "a", "waiting"),
        }
        assert first.query(ns + "zzz") == []
        assert first.query(ns + "ax") == []
        assert set(expected) <= {(i.name, i.mode, i.state) for i in second.query()}
        assert set(expected) <= {(i.name, i.mode, i.state) for i in second.query(prefix=ns)}
    finally:
        holder_a.release()
        (await bounded(asyncio.wrap_future(wait_a)))()
        holder_b.release()
        (await bounded(wait_b))()
        hold_c()
    assert first.query(ns) == []


@pytest.mark.asyncio
async def test_query_names_the_task_that_holds_or_waits(ns: str, managers: Managers) -> None:
    first, second = managers(2)
    tag = uuid.uuid4().hex[:8]

    async def take() -> Unlock:
        return await first.lock(ns + "a").acquire_async()

    held = await bounded(asyncio.create_task(take(), name=f"task-holds-{tag}"))
    waiter = asyncio.create_task(
        second.lock(ns + "a").acquire_async(deadline=PATIENCE * 2), name=f"task-waits-{tag}"
    )
    try:
        assert await until(lambda: first.lock(ns + "a").statistics().waiting == 1)
        owners = {i.state: i.owner for i in second.query(ns)}
        assert set(owners) == {"held", "waiting"}, owners
        assert owner_prefix() in owners["held"] and owner_prefix() in owners["waiting"]
        assert f"task-holds-{tag}" in owners["held"], owners
        assert f"task-waits-{tag}" in owners["waiting"], owners
    finally:
        held()
        (await bounded(waiter))()
    assert first.query(ns) == []


async def hand_to_an_unrun_task(
    mgr: LockManager, releaser: LockManager, name: str, task_name: str | None = None
) -> asyncio.Task[Unlock]:
    """A task's acquire of ``name`` through ``mgr``, queued behind a hold of ``releaser``,
    which is then released: the name is handed to the task, which has not run since (the
    caller awaits nothing until it wants the task to run)."""
    holder = releaser.lock(name).acquire()
    task = asyncio.create_task(mgr.lock(name).acquire_async(deadline=PATIENCE * 2), name=task_name)
    try:
        assert await until(lambda: mgr.lock(name).statistics().waiting == 1)
    finally:
        holder()
    return task


@pytest.mark.asyncio
@pytest.mark.parametrize("releaser", ["same manager", "other manager"])
async def test_a_hold_handed_to_a_task_that_has_not_run_yet_shows_as_its_hold(
    ns: str, managers: Managers, releaser: str
) -> None:
    # The task takes its hold up only when the event loop next runs it. Until then the
    # name is its: query() names it as the holder, and every client sees the name locked.
    mgr, other = managers(2)
    tag = uuid.uuid4().hex[:8]
    giver = mgr if releaser == "same manager" else other
    task = await hand_to_an_unrun_task(mgr, giver, ns + "a", f"arriving-{tag}")
    try:
        # No await from here on: the task cannot run, whoever handed it the name.

        def shown() -> list[tuple[str, bool]]:
            return [(i.state, f"arriving-{tag}" in i.owner) for i in mgr.query(ns)]

        assert wait_until(lambda: shown() == [("held", True)]), shown()
        assert [i.state for i in other.query(ns)] == ["held"]
        for m in (mgr, other):
            stats = m.lock(ns + "a").statistics()
            assert (stats.locked, stats.holders, stats.waiting) == (True, 1, 0), stats
        assert_taken(other.lock(ns + "a"))
    finally:
        (await bounded(task))()
    assert mgr.query(ns) == [] and other.query(ns) == []


@pytest.mark.asyncio
@pytest.mark.parametrize("releaser", ["same manager", "other manager"])
async def test_a_task_cancelled_before_it_took_its_handed_hold_gives_it_back(
    ns: str, managers: Managers, releaser: str
) -> None:
    mgr, other = managers(2)
    giver = mgr if releaser == "same manager" else other
    task = await hand_to_an_unrun_task(mgr, giver, ns + "a")
    assert wait_until(lambda: [i.state for i in mgr.query(ns)] == ["held"]), mgr.query(ns)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await bounded(task)
    assert mgr.query(ns) == [] and other.query(ns) == []
    other.lock(ns + "a").acquire(deadline=0)()


@pytest.mark.asyncio
async def test_a_hold_handed_to_a_task_goes_with_its_manager_s_close(
    ns: str, managers: Managers
) -> None:
    mgr, other = managers(2)
    task = await hand_to_an_unrun_task(mgr, mgr, ns + "a")
    assert wait_until(lambda: [i.state for i in other.query(ns)] == ["held"]), other.query(ns)
    mgr.close()
    if other.url == "memory:":
        # Here the hold is the task's own hold of the name's lock: it goes as the task
        # runs and its acquire fails.
        with pytest.raises(BackendError):
            await bounded(task)
        assert other.query(ns) == []
        return
    # Still no await: the task has not run. Its hold is gone with the manager, for every
    # client (at the postgres scope the server frees it moments after close() returns);
    # the closed manager itself no longer answers.
    assert wait_until(lambda: other.query(ns) == []), other.query(ns)
    with pytest.raises(BackendError, match="closed"):
        mgr.query(ns)
    other.lock(ns + "a").acquire(deadline=PATIENCE)()
    with pytest.raises(BackendError):
        await bounded(task)
    assert other.query(ns) == []


@pytest.mark.asyncio
async def test_query_names_the_task_still_inside_async_with(ns: str, managers: Managers) -> None:
    # Two tasks of one loop hold the shared mode by ``async with`` and leave in the order
    # they came in: the hold left is the second task's, and query() says so.
    (mgr,) = managers(1)
    tag = uuid.uuid4().hex[:8]
    first_in, first_out, second_in = asyncio.Event(), asyncio.Event(), asyncio.Event()
    owners: list[str] = []

    async def first() -> None:
        async with mgr.sharable_lock(ns + "x").shared:
            first_in.set()
            await second_in.wait()
        first_out.set()

    async def second() -> None:
        await first_in.wait()
        async with mgr.sharable_lock(ns + "x").shared:
            second_in.set()
            await first_out.wait()
            owners.extend(i.owner for i in mgr.query(ns))

    await bounded(
        asyncio.gather(
            asyncio.create_task(first(), name=f"first-{tag}"),
            asyncio.create_task(second(), name=f"second-{tag}"),
        )
    )
    assert len(owners) == 1 and f"second-{tag}" in owners[0], owners
    assert mgr.query(ns) == []


@pytest.mark.asyncio
@pytest.mark.parametrize("which", ["lock", "shared"])
async def test_a_blocking_acquire_behind_an_async_with_of_another_manager_raises(
    ns: str, managers: Managers, which: str
) -> None:
    # A task of this loop holds the name by `async with` through one manager; a blocking
    # acquire with no deadline on the loop's thread, through another manager of the same
    # scope, would wait for that task forever. (If it hangs, closing the holder's manager
    # ends the wait with another error, and the test fails.)
    holder, other = managers(2)
    rescue = threading.Timer(PATIENCE, holder.close)
    rescue.start()
    try:
        async with view(holder, ns + "a", "lock"):
            with pytest.raises(RuntimeError, match=r"(?i)deadlock"):
                view(other, ns + "a", which).acquire()
            # With a deadline the wait ends by itself: no error but its own.
            with pytest.raises(LockTimeout):
                view(other, ns + "a", which).acquire(deadline=0.05)
    finally:
        rescue.cancel()
    view(other, ns + "a", which).acquire(deadline=0)()


@pytest.mark.asyncio
@pytest.mark.parametrize("which", ["lock", "shared"])
async def test_a_blocking_acquire_behind_an_async_with_of_a_closed_manager_gets_the_name(
    ns: str, managers: Managers, which: str
) -> None:
    # The holder's manager closed inside the `async with`: that hold ended, and nothing on
    # this loop stands in the way. A blocking acquire with no deadline through another
    # manager, behind a third manager's hold that a thread lets go of, waits for it and
    # takes the name (no RuntimeError). (If it hangs, closing that manager ends the wait
    # with BackendError, and the test fails.)
    holder, other, third = managers(3)
    rescue = threading.Timer(PATIENCE * 2, other.close)
    rescue.start()
    try:
        async with view(holder, ns + "a", "lock"):
            holder.close()
            acquire_behind_a_release(view(other, ns + "a", which), third.lock(ns + "a"))
    finally:
        rescue.cancel()
    view(other, ns + "a", which).acquire(deadline=0)()


def acquire_behind_a_release(waiter: NamedLock, holder: NamedLock) -> None:
    """``holder`` takes the name and a thread lets it go 0.2 s later; meanwhile ``waiter``
    acquires it with no deadline and no token, on this thread, and lets it go."""
    taken = holder.acquire(deadline=PATIENCE)
    threading.Timer(0.2, taken).start()
    unlock = waiter.acquire()
    assert taken.released and not unlock.released
    unlock()


def named_thread(name: str, fn: Callable[[], Any]) -> Callable[[], Any]:
    def run() -> Any:
        threading.current_thread().name = name
        return fn()

    return run


def test_query_lists_each_shared_holder(ns: str, managers: Managers) -> None:
    first, second = managers(2)
    readers = [first.sharable_lock(ns + "a").shared.acquire() for _ in range(2)]
    readers.append(second.sharable_lock(ns + "a").shared.acquire())
    infos = second.query(ns)
    assert [(i.name, i.mode, i.state) for i in infos] == [(ns + "a", "shared", "held")] * 3
    assert all(threading.current_thread().name in i.owner for i in infos)
    for unlock in readers:
        unlock()
    assert second.query(ns) == []


def test_query_forgets_a_lost_hold(ns: str, managers: Managers) -> None:
    mgr, other = managers(2)
    unlock = mgr.lock(ns + "a").acquire()
    assert len(other.query(ns)) == 1
    mgr.close()
    if other.url.startswith(("postgresql:", "postgres:")):
        # The server frees a closed session's locks as it ends the session, moments after
        # close() returns (README, "close()" at the postgres scope); the others free
        # them within close().
        assert wait_until(lambda: other.query(ns) == [])
    assert other.query(ns) == []
    unlock()


def test_query_forgets_a_waiter_that_gave_up(ns: str, managers: Managers, spawn: Spawn) -> None:
    first, second = managers(2)
    held = first.lock(ns + "a").acquire()
    token = CancelToken()
    waiter = spawn(second.lock(ns + "a").acquire, token, deadline=PATIENCE * 2)
    assert wait_until(lambda: len(first.query(ns)) == 2)
    token.cancel()
    assert isinstance(waiter.exception(PATIENCE), Cancelled)
    assert [i.state for i in first.query(ns)] == ["held"]
    held()
    assert first.query(ns) == []


# --- memory -------------------------------------------------------------------------------------

needs_proc = pytest.mark.skipif(
    not os.path.exists("/proc/self/statm"), reason="needs /proc/self/statm (Linux)"
)

_MILLION_NAMES = """
import gc, json, sys
import ctxlock
from ctxlock._bench.memory import rss_bytes

first, second = ctxlock.LockManager(), ctxlock.LockManager("memory:")

def take(start, stop):
    for i in range(start, stop):
        name = f"name-{i}"
        if i % 3 == 0:
            first.lock(name).acquire()()
        elif i % 3 == 1:
            second.sharable_lock(name).shared.acquire()()
        else:
            held = first.sharable_lock(name).exclusive.acquire()
            try:
                second.lock(name).acquire(deadline=0)
            except ctxlock.LockTimeout:
                pass
            held()

take(0, 100_000)
gc.collect()
before = rss_bytes()
take(100_000, 1_000_000)
gc.collect()
after = rss_bytes()
left = first.query()
print(json.dumps({"growth": after - before, "left": len(left)}))
"""


@needs_proc
def test_a_million_names_used_once_leave_memory_flat() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", _MILLION_NAMES],
        capture_output=True,
        text=True,
        timeout=55,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["left"] == 0
    assert report["growth"] < 10 * MB, (
        f"RSS grew by {report['growth'] / MB:.1f} MB over 900,000 names used once"
    )


# --- pickling --------------------------------------------------------------------------------


def _pickle_targets(mgr: LockManager, ns: str) -> dict[str, list[object]]:
    rw = mgr.sharable_lock(ns + "b")
    return {
        "LockManager": [mgr],
        "NamedLock": [mgr.lock(ns + "a"), rw.shared, rw.exclusive],
        "NamedSharableLock": [rw],
    }


@pytest.mark.parametrize("cls", ["LockManager", "NamedLock", "NamedSharableLock"])
def test_pickling_names_the_public_class(cls: str, ns: str, managers: Managers) -> None:
    (mgr,) = managers(1)
    message = re.escape(f"cannot pickle 'ctxlock.{cls}' object")
    for obj in _pickle_targets(mgr, ns)[cls]:
        assert type(obj).__name__ == cls
        for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
            with pytest.raises(TypeError, match=message):
                pickle.dumps(obj, protocol)
        with pytest.raises(TypeError, match=message):
            copy.copy(obj)
        with pytest.raises(TypeError, match=message):
            copy.deepcopy(obj)


#: Each kind of named object (see ``VIEWS``, plus the ``NamedSharableLock`` itself) and the
#: ``which`` its pickle names: ``mgr.lock(n)`` and ``mgr.sharable_lock(n).exclusive`` are the
#: same lock and the same kind of object.
PICKLED = {
    "lock": "exclusive",
    "exclusive": "exclusive",
    "shared": "shared",
    "sharable": "sharable",
}


def named(mgr: LockManager, name: str, kind: str) -> NamedLock | NamedSharableLock:
    return mgr.sharable_lock(name) if kind == "sharable" else view(mgr, name, kind)


def modes(obj: NamedLock | NamedSharableLock) -> list[NamedLock]:
    return [obj.shared, obj.exclusive] if isinstance(obj, NamedSharableLock) else [obj]


def assert_same_lock_other_client(
    original: NamedLock | NamedSharableLock, restored: NamedLock | NamedSharableLock
) -> None:
    """``restored`` is the same kind of object for the same lock, from another manager of the
    same url: a hold of either excludes the other."""
    assert type(restored) is type(original)
    assert restored.name == original.name
    assert [m.mode for m in modes(restored)] == [m.mode for m in modes(original)]
    assert restored.manager is not original.manager
    assert restored.manager.url == original.manager.url
    exclusive = original.manager.lock(original.name)
    unlock = exclusive.acquire(deadline=PATIENCE)
    for m in modes(restored):
        assert m.try_acquire() is None, m
    unlock()
    for m in modes(restored):
        unlock = m.acquire(deadline=PATIENCE)
        assert_taken(exclusive)
        unlock()
    assert_free(original.manager, original.name)


@pytest.fixture
def restore_managers(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """``_restore.manager_for`` starts with no managers; the ones this test made are closed."""
    fresh: dict[str, LockManager] = {}
    monkeypatch.setattr(_restore, "_managers", fresh)
    yield
    for mgr in fresh.values():
        mgr.close()


@pytest.mark.parametrize("kind", sorted(PICKLED))
def test_a_memory_scope_lock_cannot_be_pickled_and_says_why(
    kind: str, ns: str, managers: Managers
) -> None:
    (mgr,) = managers(1)
    obj = named(mgr, ns + "a", kind)
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        with pytest.raises(TypeError) as info:
            pickle.dumps(obj, protocol)
        message = str(info.value)
        assert f"cannot pickle 'ctxlock.{type(obj).__name__}' object" in message
        assert "of the 'memory:' scope" in message
        assert "a lock of this process only" in message
        assert "LockManager('file:///dir')" in message
        assert "LockManager('postgresql://" in message


@pytest.mark.parametrize("kind", sorted(PICKLED))
def test_a_named_lock_pickles_as_its_url_name_and_kind(
    kind: str, ns: str, managers: Managers, monkeypatch: pytest.MonkeyPatch, restore_managers: None
) -> None:
    # The binding hands its facts to ``_restore._reduce``; with the memory scope's rule taken
    # out, the whole round trip runs in this process (the file scope's test is below).
    seen: list[tuple[str, str, str]] = []

    def reduce_any_scope(url: str, name: str, which: str) -> tuple[object, tuple[str, ...]]:
        seen.append((url, name, which))
        return _restore.restore, (url, name, which)

    monkeypatch.setattr(_restore, "_reduce", reduce_any_scope)
    (mgr,) = managers(1)
    obj = named(mgr, ns + "a", kind)
    restored = pickle.loads(pickle.dumps(obj))
    assert seen == [("memory:", ns + "a", PICKLED[kind])]
    assert restored.manager is _restore.manager_for("memory:")
    assert_same_lock_other_client(obj, restored)


@pytest.mark.parametrize(
    ("which", "cls", "mode"),
    [
        ("exclusive", NamedLock, "exclusive"),
        ("shared", NamedLock, "shared"),
        ("sharable", NamedSharableLock, None),
    ],
)
def test_restore_returns_the_object_a_pickle_names(
    which: str, cls: type, mode: str | None, ns: str, restore_managers: None
) -> None:
    obj = _restore.restore("memory:", ns + "a", which)
    assert type(obj) is cls
    assert obj.name == ns + "a"
    if isinstance(obj, NamedLock):
        assert obj.mode == mode
    assert obj.manager is _restore.manager_for("memory:")
    assert obj.manager.url == "memory:"
    assert not obj.manager.closed
    assert pickle.loads(pickle.dumps(_restore.restore)) is _restore.restore


def test_restore_refuses_what_no_pickle_names(
    ns: str, restore_managers: None, tmp_path: Path
) -> None:
    with pytest.raises(ValueError, match="'lock'"):
        _restore.restore("memory:", ns + "a", "lock")
    with pytest.raises(ValueError):
        _restore.restore("memory:", "", "exclusive")
    with pytest.raises(ValueError):
        _restore.restore("ftp://x", ns + "a", "exclusive")
    (tmp_path / "a-file").write_text("")
    with pytest.raises(BackendError):  # a scope that cannot be reached: a dir under a file
        _restore.restore(f"file://{tmp_path}/a-file/locks", ns + "a", "exclusive")


def test_restore_uses_one_manager_per_url_per_process(restore_managers: None) -> None:
    got: list[LockManager] = []
    start = threading.Barrier(8)

    def get() -> None:
        start.wait(PATIENCE)
        got.append(_restore.manager_for("memory:"))

    threads = [threading.Thread(target=get) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(PATIENCE)
    assert len(got) == 8
    assert all(m is got[0] for m in got)
    assert _restore.manager_for("memory:") is got[0]
    # Never closed by the library; one closed by its user is replaced.
    got[0].close()
    again = _restore.manager_for("memory:")
    assert again is not got[0]
    assert not again.closed


@pytest.fixture
def file_url(tmp_path: Any) -> str:
    """The url of a fresh file scope; skips the test while this build has none."""
    url = f"file://{tmp_path}"
    try:
        LockManager(url).close()
    except BackendError as e:
        pytest.skip(f"the file scope ('file:///dir') is not built yet: {e.reason}")
    return url


@pytest.mark.parametrize("kind", sorted(PICKLED))
def test_a_file_scope_lock_pickles_as_the_same_lock(
    kind: str, ns: str, file_url: str, restore_managers: None
) -> None:
    with LockManager(file_url) as mgr:
        obj = named(mgr, ns + "a", kind)
        for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
            restored = pickle.loads(pickle.dumps(obj, protocol))
            assert restored.manager is _restore.manager_for(file_url)
            assert_same_lock_other_client(obj, restored)


def test_a_lock_of_a_closed_manager_pickles_as_a_lock_of_an_open_one(
    ns: str, file_url: str, restore_managers: None
) -> None:
    mgr = LockManager(file_url)
    lock = mgr.lock(ns + "a")
    mgr.close()
    restored = pickle.loads(pickle.dumps(lock))
    assert not restored.manager.closed
    restored.acquire(deadline=PATIENCE)()


def try_in_child(lock: NamedLock) -> bool:
    """In a ``multiprocessing`` child: whether ``lock`` could be taken there (then let go)."""
    unlock = lock.try_acquire()
    if unlock is None:
        return False
    unlock()
    return True


def test_a_file_scope_lock_reaches_a_multiprocessing_child(
    ns: str, file_url: str, restore_managers: None
) -> None:
    import multiprocessing

    with LockManager(file_url) as mgr, multiprocessing.get_context("spawn").Pool(1) as pool:
        lock = mgr.lock(ns + "a")
        unlock = lock.acquire(deadline=PATIENCE)
        assert pool.apply(try_in_child, (lock,)) is False
        unlock()
        assert pool.apply(try_in_child, (lock,)) is True
        assert pool.apply(try_in_child, (mgr.sharable_lock(ns + "a").shared,)) is True


def test_the_new_names_are_exported() -> None:
    for name in ("LockManager", "LockInfo", "BackendError", "NamedLock", "NamedSharableLock"):
        assert name in ctxlock.__all__, name
        assert getattr(ctxlock, name).__module__.startswith("ctxlock"), name


# --- misuse never crashes --------------------------------------------------------------------


def test_unlock_twice_and_close_twice_are_harmless(ns: str, managers: Managers) -> None:
    mgr, other = managers(2)
    unlock = mgr.lock(ns + "a").acquire()
    unlock()
    unlock()
    theirs = other.lock(ns + "a").acquire(deadline=0)
    unlock()  # stale: never releases their hold
    assert_taken(mgr.lock(ns + "a"))
    theirs()
    mgr.close()
    mgr.close()
    unlock()
    assert_free(other, ns + "a")


def test_an_unlock_called_from_another_thread_after_close_is_harmless(
    ns: str, managers: Managers, spawn: Spawn
) -> None:
    mgr, other = managers(2)
    unlock = mgr.lock(ns + "a").acquire()
    mgr.close()
    theirs = other.lock(ns + "a").acquire(deadline=0)
    spawn(unlock).result(PATIENCE)
    assert_taken(other.lock(ns + "a"))
    theirs()
    assert_free(other, ns + "a")


_FORK_GHOST_WAITER = """
import os, sys, threading, time, ctxlock
mgr = ctxlock.LockManager()
held = mgr.lock("f").acquire()
t = threading.Thread(target=lambda: mgr.lock("f").acquire(deadline=5)(), daemon=True)
t.start()
end = time.monotonic() + 5
while mgr.lock("f").statistics().waiting < 1 and time.monotonic() < end:
    time.sleep(0.001)
pid = os.fork()
if pid == 0:
    # Only this thread exists here: the parent's waiter is gone with its thread.
    held()
    os._exit(0 if mgr.query("f") == [] else 3)
_, status = os.waitpid(pid, 0)
held()
t.join(5)
sys.exit(os.waitstatus_to_exitcode(status))
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_forgets_the_waiters_of_the_parents_threads() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_FORK_GHOST_WAITER)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr


_MISUSE = """
import asyncio, gc, threading, warnings
import ctxlock

warnings.simplefilter("ignore", ResourceWarning)

def attempt(fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except Exception:
        return None

mgr = ctxlock.LockManager()
other = ctxlock.LockManager()
lock, rw, entered = mgr.lock("a"), mgr.sharable_lock("b"), mgr.lock("i")

# Holds that outlive their manager, used and dropped in every order.
u1 = lock.acquire()
u2 = rw.shared.acquire()
entered.__enter__()
rw.shared.__enter__()
rw.exclusive  # a view made before close
mgr.close()
for u in (u1, u2):
    u(); u()
    attempt(u.unlock_on_cancel, ctxlock.CancelToken())
    u.lost.cancel("again")
attempt(entered.__exit__, None, None, None)
attempt(entered.__exit__, None, None, None)
attempt(rw.shared.__exit__, None, None, None)
attempt(rw.shared.__exit__, None, None, None)
attempt(lock.acquire)
attempt(lock.try_acquire)
attempt(rw.exclusive.acquire, deadline=0)
attempt(mgr.lock, "c")
attempt(mgr.sharable_lock, "c")
attempt(mgr.query)
attempt(lock.statistics)
attempt(lock.locked)
mgr.close()
del u1, u2
gc.collect()

# A with block whose manager closes inside it.
m3 = ctxlock.LockManager()
attempt(lambda: [m3.lock("d").__enter__(), m3.close(), m3.lock("d").__exit__(None, None, None)])

# An Unlock of a closed manager dropped without being called.
m4 = ctxlock.LockManager()
dropped = m4.lock("e").acquire()
m4.close()
del dropped, m4
gc.collect()

# A manager and its lock dropped while a hold is still live (the Unlock kept).
m5 = ctxlock.LockManager()
kept = m5.lock("f").acquire()
del m5
gc.collect()
kept()

# Close racing with acquires and unlocks in threads.
for _ in range(50):
    m6 = ctxlock.LockManager()
    stop = threading.Event()
    def churn(m=m6):
        while not stop.is_set():
            u = attempt(m.lock("g").acquire, deadline=0.01)
            if u is not None:
                u()
    threads = [threading.Thread(target=churn) for _ in range(3)]
    for t in threads:
        t.start()
    m6.close()
    stop.set()
    for t in threads:
        t.join(10)

# Close racing with tasks waiting on a held name.
async def main():
    m7 = ctxlock.LockManager()
    held = other.lock("h").acquire()
    tasks = [asyncio.ensure_future(m7.lock("h").acquire_async(deadline=5)) for _ in range(5)]
    await asyncio.sleep(0)
    m7.close()
    await asyncio.gather(*tasks, return_exceptions=True)
    held()

asyncio.run(main())
for name in "abcdefghi":
    other.lock(name).acquire(deadline=0)()
other.close()
print("ok")
"""


@pytest.mark.parametrize(
    "flags", [(), ("-W", "error"), ("-X", "dev")], ids=["default", "-W error", "-X dev"]
)
def test_misuse_never_crashes(flags: tuple[str, ...]) -> None:
    proc = subprocess.run(
        [sys.executable, *flags, "-c", textwrap.dedent(_MISUSE)],
        capture_output=True,
        text=True,
        timeout=55,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"
    for bad in ("Fatal Python error", "panicked", "SystemError", "Segmentation"):
        assert bad not in proc.stderr, proc.stderr


def test_a_named_lock_keeps_its_manager_alive(ns: str) -> None:
    lock = LockManager().lock(ns + "a")
    gc.collect()
    assert not lock.manager.closed
    with contextlib.closing(lock.manager):
        with lock:
            assert lock.locked()
        assert not lock.locked()
