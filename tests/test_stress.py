"""Randomized stress: threads and tasks on two event loops hammer one lock at once.

Each run uses 8 threads (``CTXLOCK_STRESS_THREADS``) and 2 event loops (each in its own
thread) with 4 tasks each. They acquire in random ways (every acquire form, random
deadlines, tokens that other threads and tasks cancel, ``task.cancel()``,
``asyncio.timeout()``, ``unlock_on_cancel``) and check, inside every hold, that the lock
is held as the holders' own bookkeeping says: never two exclusive holders, never shared
holders together with an exclusive one. The bookkeeping is a pair of counters under a
plain ``threading.Lock`` used for nothing else, updated inside the critical section. At
the end the lock must be free and its wait queue empty.

It runs once per lock family (``tests/kinds.py``): on the family's exclusive lock, and on
its sharable lock (both views at once). Short by default so it runs in CI: 6 s in all,
split among the runs (at least 1 s each); ``make stress STRESS_SECONDS=600`` runs each
run that long (``CTXLOCK_STRESS_SECONDS``).
"""

from __future__ import annotations

import asyncio
import collections
import os
import random
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest
from conftest import STRESS_SECONDS, wait_until
from ctxlock import (
    Cancelled,
    CancelToken,
    Lock,
    LockTimeout,
    LockView,
    SharableLock,
    Unlock,
    WouldBlock,
)
from kinds import LOCK_FAMILIES, SHARABLE_FAMILIES, Family, over_families

# Every run: the exclusive lock of each family that has one, the sharable lock of each
# that has one.
RUNS = len(LOCK_FAMILIES) + len(SHARABLE_FAMILIES)
# Seconds per run: the default's total is split among the runs, so a new family does not
# lengthen the suite.
DEFAULT_TOTAL_SECONDS = 6.0
DURATION = max(1.0, DEFAULT_TOTAL_SECONDS / RUNS) if STRESS_SECONDS is None else STRESS_SECONDS
# Threads per run: 8 unless CTXLOCK_STRESS_THREADS says otherwise (CI runs 4 and 8 on the
# free-threaded interpreter, where they really run in parallel).
THREADS = int(os.environ.get("CTXLOCK_STRESS_THREADS", "8"))
LOOPS = 2
TASKS_PER_LOOP = 4
# How long the workers get to finish after the run ends before the test calls it a hang.
JOIN_TIMEOUT = 15.0

F = TypeVar("F", bound=Callable[..., Any])


def long_timeout(test: F) -> F:
    """A pytest-timeout limit that fits the run's length. Long runs may disable the plugin
    (its mark is then unknown, which the warnings filter would make an error)."""
    if "pytest_timeout" not in sys.modules:
        return test
    return pytest.mark.timeout(DURATION + JOIN_TIMEOUT + 30)(test)


DEADLINES: tuple[float | None, ...] = (None, 0, 0.0002, 0.001, 0.005, 0.02)


class Book:
    """The holders' own record of who holds, checked on every entry."""

    def __init__(self, exclusive: LockView | Lock, shared: LockView | None) -> None:
        self.mutex = threading.Lock()
        self.writers = 0
        self.readers = 0
        self.max_readers = 0
        self.exclusive = exclusive
        self.shared = shared
        self.errors: list[str] = []

    def views(self) -> tuple[LockView | Lock, ...]:
        if self.shared is not None:
            return (self.shared, self.exclusive)
        return (self.exclusive,)

    def is_shared(self, view: LockView | Lock) -> bool:
        return view is self.shared

    def enter(self, view: LockView | Lock) -> None:
        shared = self.is_shared(view)
        with self.mutex:
            if shared:
                ok = self.writers == 0
                self.readers += 1
                self.max_readers = max(self.max_readers, self.readers)
            else:
                ok = self.writers == 0 and self.readers == 0
                self.writers += 1
            state = (self.writers, self.readers)
        if not ok:
            self.fail(f"{'shared' if shared else 'exclusive'} hold entered with (w, r)={state}")
        self.check_locked(view)

    def leave(self, view: LockView | Lock) -> None:
        shared = self.is_shared(view)
        self.check_locked(view)
        with self.mutex:
            if shared:
                ok = self.readers > 0 and self.writers == 0
                self.readers -= 1
            else:
                ok = self.writers == 1 and self.readers == 0
                self.writers -= 1
            state = (self.writers, self.readers)
        if not ok:
            self.fail(f"{'shared' if shared else 'exclusive'} hold left with (w, r)={state}")

    def check_locked(self, view: LockView | Lock) -> None:
        """While we hold, the lock must say so, in our mode and not in the other."""
        if not view.locked():
            self.fail(f"{view!r} says unlocked while held")
        if self.shared is not None:
            other = self.exclusive if self.is_shared(view) else self.shared
            if other.locked():
                self.fail(f"{view!r} held while {other!r} says locked")

    def fail(self, message: str) -> None:
        with self.mutex:
            self.errors.append(message)


class Run:
    """What every worker shares: the lock's book, a pool of tokens, the stop flag."""

    def __init__(self, exclusive: LockView | Lock, shared: LockView | None, seed: int) -> None:
        self.book = Book(exclusive, shared)
        self.seed = seed
        self.stop = threading.Event()
        self.pool: collections.deque[CancelToken] = collections.deque(maxlen=32)
        self.pool_mutex = threading.Lock()
        self.counts: collections.Counter[str] = collections.Counter()
        self.counts_mutex = threading.Lock()
        self.errors: list[str] = []

    def count(self, counts: collections.Counter[str]) -> None:
        with self.counts_mutex:
            self.counts.update(counts)

    def token(self, rng: random.Random) -> CancelToken | None:
        """No token, a fresh one others may cancel, one with a deadline, or a child."""
        kind = rng.randrange(5)
        if kind == 0:
            return None
        if kind == 1:
            token = CancelToken(deadline=rng.choice([0.0005, 0.002, 0.01]))
        elif kind == 2:
            with self.pool_mutex:
                parent = rng.choice(self.pool) if self.pool else None
            token = parent.child() if parent is not None else CancelToken()
        else:
            token = CancelToken()
        with self.pool_mutex:
            self.pool.append(token)
        return token

    def cancel_some(self, rng: random.Random) -> None:
        """Cancel a random token of the pool: it may be another worker's, mid-wait."""
        with self.pool_mutex:
            token = rng.choice(self.pool) if self.pool else None
        if token is not None:
            token.cancel(rng.choice([None, "stress"]))


# --- threads ----------------------------------------------------------------------------------


def hold_thread(run: Run, view: LockView | Lock, unlock: Unlock, rng: random.Random) -> None:
    """Inside a hold: check, maybe linger, leave the book, then release some way."""
    book = run.book
    book.enter(view)
    try:
        pause = rng.choice([0.0, 0.0, 0.0, 0.00005, 0.0005])
        if pause:
            time.sleep(pause)
        book.check_locked(view)
    finally:
        book.leave(view)
        how = rng.randrange(4)
        if how == 0:
            # Released by a token: at once, by the timer thread, or by whoever cancels.
            token = CancelToken(deadline=rng.choice([0.0, 0.001]))
            unlock.unlock_on_cancel(token)
            if rng.random() < 0.5:
                token.cancel()
        else:
            unlock()
            if how == 1:
                unlock()  # a no-op


def thread_worker(run: Run, index: int) -> None:
    rng = random.Random(run.seed * 1000 + index)
    counts: collections.Counter[str] = collections.Counter()
    views = run.book.views()
    try:
        while not run.stop.is_set():
            counts["ops"] += 1
            if counts["ops"] % 256 == 0:  # a worker stuck for good still reports
                run.count(counts)
                counts.clear()
            if rng.random() < 0.15:
                run.cancel_some(rng)
            view = rng.choice(views)
            form = rng.randrange(6)
            try:
                if form == 0:
                    got = view.try_acquire()
                    if got is None:
                        counts["busy"] += 1
                        continue
                    unlock = got
                elif form == 1:
                    unlock = view.acquire(blocking=False)
                elif form == 2:
                    with view:
                        counts["acquired"] += 1
                        run.book.enter(view)
                        run.book.leave(view)
                    continue
                else:
                    deadline = rng.choice(DEADLINES)
                    if deadline is None and form == 3:
                        deadline = 0.05  # at least one limit on most blocking forms
                    unlock = view.acquire(run.token(rng), deadline=deadline)
            except WouldBlock:
                counts["busy"] += 1
                continue
            except LockTimeout:
                counts["timeout"] += 1
                continue
            except Cancelled:
                counts["cancelled"] += 1
                continue
            counts["acquired"] += 1
            hold_thread(run, view, unlock, rng)
    except BaseException as exc:
        run.errors.append(f"thread {index}: {exc!r}")
        run.stop.set()
    finally:
        run.count(counts)


# --- tasks ------------------------------------------------------------------------------------


async def hold_task(run: Run, view: LockView | Lock, unlock: Unlock, rng: random.Random) -> None:
    book = run.book
    try:
        book.enter(view)
        try:
            if rng.random() < 0.3:
                await asyncio.sleep(0)
            if rng.random() < 0.05:
                await asyncio.sleep(0.0005)
            book.check_locked(view)
        finally:
            book.leave(view)
    finally:
        unlock()


async def with_timeout(awaitable: Awaitable[Unlock], seconds: float) -> Unlock:
    """``asyncio.timeout()`` (3.11+), else ``asyncio.wait_for``."""
    if sys.version_info >= (3, 11):
        async with asyncio.timeout(seconds):
            return await awaitable

    async def wait() -> Unlock:
        return await awaitable

    return await asyncio.wait_for(wait(), seconds)


async def task_op(run: Run, rng: random.Random, counts: collections.Counter[str]) -> None:
    views = run.book.views()
    view = rng.choice(views)
    form = rng.randrange(6)
    try:
        if form == 0:
            async with view:
                counts["acquired"] += 1
                run.book.enter(view)
                try:
                    await asyncio.sleep(0)
                finally:
                    run.book.leave(view)
            return
        if form == 1:
            # asyncio's timeout cancels the wait (TimeoutError), or comes too late.
            unlock = await with_timeout(
                view.acquire_async(run.token(rng)), rng.choice([0.0005, 0.002, 0.01])
            )
        elif form == 2:
            # task.cancel() of a sub-task waiting for (or holding) the lock.
            async def sub() -> None:
                got = await view.acquire_async(run.token(rng), deadline=0.05)
                counts["acquired"] += 1
                await hold_task(run, view, got, rng)

            task = asyncio.ensure_future(sub())
            for _ in range(rng.randrange(3)):
                await asyncio.sleep(0)
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                counts["task_cancelled"] += 1
            return
        else:
            deadline = rng.choice(DEADLINES)
            if deadline is None and form == 3:
                deadline = 0.05
            unlock = await view.acquire_async(run.token(rng), deadline=deadline)
    except LockTimeout:
        counts["timeout"] += 1
        return
    except Cancelled:
        counts["cancelled"] += 1
        return
    except TimeoutError:
        counts["asyncio_timeout"] += 1
        return
    counts["acquired"] += 1
    await hold_task(run, view, unlock, rng)


async def task_worker(run: Run, index: int) -> None:
    rng = random.Random(run.seed * 1000 + 100 + index)
    counts: collections.Counter[str] = collections.Counter()
    try:
        while not run.stop.is_set():
            counts["ops"] += 1
            if counts["ops"] % 256 == 0:
                run.count(counts)
                counts.clear()
            if rng.random() < 0.15:
                run.cancel_some(rng)
            await task_op(run, rng, counts)
            if rng.random() < 0.2:
                await asyncio.sleep(0)
    except BaseException as exc:
        run.errors.append(f"task {index}: {exc!r}")
        run.stop.set()
    finally:
        run.count(counts)


def loop_worker(run: Run, index: int) -> None:
    async def main() -> None:
        tasks = [
            asyncio.ensure_future(task_worker(run, index * TASKS_PER_LOOP + i))
            for i in range(TASKS_PER_LOOP)
        ]
        await asyncio.gather(*tasks)

    try:
        asyncio.run(main())
    except BaseException as exc:
        run.errors.append(f"loop {index}: {exc!r}")
        run.stop.set()


# --- the runs ---------------------------------------------------------------------------------


def stress(
    lock: Lock | SharableLock,
    exclusive: LockView | Lock,
    shared: LockView | None,
    request: pytest.FixtureRequest,
) -> dict[str, Any]:
    """Run the workers on ``lock``: its ``exclusive`` view (the lock itself when it is
    exclusive) and its ``shared`` view if it has one."""
    seed = random.randrange(1 << 30)
    run = Run(exclusive, shared, seed)
    workers = [
        threading.Thread(target=thread_worker, args=(run, i), daemon=True) for i in range(THREADS)
    ]
    workers += [
        threading.Thread(target=loop_worker, args=(run, i), daemon=True) for i in range(LOOPS)
    ]
    for w in workers:
        w.start()
    run.stop.wait(DURATION)
    run.stop.set()
    end = time.monotonic() + JOIN_TIMEOUT
    for w in workers:
        w.join(max(0.0, end - time.monotonic()))
    stuck = sum(w.is_alive() for w in workers)
    counts = dict(run.counts)
    if shared is not None:
        counts["max_readers"] = run.book.max_readers
    book = (run.book.writers, run.book.readers)
    info = f"seed={seed} counts={counts} lock={lock!r} book (writers, readers)={book}"
    request.node.user_properties.append(("stress_counts", counts))
    assert stuck == 0, f"{stuck} worker(s) still running {JOIN_TIMEOUT} s after the end: {info}"
    assert not run.errors, f"{run.errors[:5]} {info}"
    assert not run.book.errors, f"{run.book.errors[:5]} {info}"
    assert run.book.writers == 0 and run.book.readers == 0, info

    # Holds released through `unlock_on_cancel` with a deadline token end on the timer
    # thread, so the lock may still be held for a moment.
    assert wait_until(lambda: not exclusive.locked()), f"still locked at the end: {info}"
    assert exclusive.statistics().waiting == 0, f"waiters left at the end: {info}"
    probe = exclusive.try_acquire()
    assert probe is not None, f"lock not free at the end: {info}"
    probe()
    if shared is not None:
        assert not shared.locked()
    assert counts.get("ops", 0) > 0 and counts.get("acquired", 0) > 0, info
    return counts


@pytest.mark.stress
@long_timeout
@over_families(LOCK_FAMILIES)
def test_stress_lock(family: Family, request: pytest.FixtureRequest) -> None:
    assert family.lock is not None
    lock = family.lock()
    stress(lock, lock, None, request)


@pytest.mark.stress
@long_timeout
@over_families(SHARABLE_FAMILIES)
def test_stress_sharable_lock(family: Family, request: pytest.FixtureRequest) -> None:
    assert family.sharable is not None
    rw = family.sharable()
    counts = stress(rw, rw.exclusive, rw.shared, request)
    # Readers really shared the lock at some point (thousands of shared holds per run).
    assert counts["max_readers"] >= 2, counts


# --- the race behind `unlock_on_cancel(CancelToken(deadline=0))` in the runs above ----------


@pytest.mark.parametrize("deadline", [0.0, 1e-6])
def test_tokens_whose_deadline_is_already_due_cancel_themselves(deadline: float) -> None:
    """A token whose deadline passes while it is being created must still be cancelled
    by the timer (``cancelled``, ``on_cancel``, ``unlock_on_cancel`` depend on it); none
    may be forgotten."""
    tokens = []
    for i in range(500):
        tokens.append(CancelToken(deadline=deadline))
        if i % 10 == 0:
            time.sleep(0.0005)  # let the timer thread run between some of them
    assert wait_until(lambda: all(t.cancelled for t in tokens), timeout=5.0), (
        f"{sum(not t.cancelled for t in tokens)} of {len(tokens)} tokens with "
        f"deadline={deadline} still not cancelled 5 s later"
    )
    assert all(isinstance(t.reason, LockTimeout) for t in tokens)


def test_unlock_on_cancel_with_already_due_deadline_releases() -> None:
    lock = Lock()
    for i in range(300):
        unlock = lock.acquire(deadline=5)
        unlock.unlock_on_cancel(CancelToken(deadline=0))
        released = wait_until(lambda: not lock.locked(), timeout=5.0)
        unlock()
        assert released, f"round {i}: the token's deadline passed but the lock stayed held"
