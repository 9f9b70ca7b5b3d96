"""Leak checks that do not depend on timing.

Failed, timed-out and cancelled acquires, dropped tokens and unregistered callbacks must
leave nothing behind. Rust-side memory is invisible to ``tracemalloc``, so growth is
measured two ways: ``tracemalloc`` (Python objects) and the resident set size from
``/proc/self/statm`` (everything), with bounds far above noise but far below what a
per-operation leak would add. The tight memory target (< 2 MB) is the benchmark suite's
business; these bounds only catch real leaks.
"""

from __future__ import annotations

import asyncio
import gc
import os
import queue
import sys
import threading
import tracemalloc
import weakref
from collections.abc import Callable, Iterator

import pytest
from conftest import PATIENCE, rss
from ctxlock import Cancelled, CancelToken, Lock, LockTimeout, SharableLock

MB = 1 << 20

needs_proc = pytest.mark.skipif(
    not os.path.exists("/proc/self/statm"), reason="needs /proc/self/statm (Linux)"
)


def growth(step: Callable[[], None], rounds: int, warmup: int) -> int:
    """RSS growth in bytes over ``rounds`` calls of ``step``, after ``warmup`` calls."""
    for _ in range(warmup):
        step()
    before = rss()
    for _ in range(rounds):
        step()
    return rss() - before


@pytest.fixture
def held_lock() -> Iterator[Lock]:
    lock = Lock()
    unlock = lock.acquire()
    yield lock
    unlock()
    assert not lock.locked()


# --- (a) failed acquires on a held lock -------------------------------------------------------


@needs_proc
def test_failed_acquires_do_not_grow_memory(held_lock: Lock) -> None:
    """200,000 rounds of: a zero-deadline acquire (LockTimeout), an acquire with an
    already-cancelled token (Cancelled), ``blocking=False`` and ``try_acquire``."""
    lock = held_lock
    rw = SharableLock()
    rw_unlock = rw.exclusive.acquire()
    cancelled = CancelToken()
    cancelled.cancel("gone")
    child = cancelled.child()

    def step() -> None:
        try:
            lock.acquire(deadline=0)
        except LockTimeout:
            pass
        try:
            lock.acquire(cancelled)
        except Cancelled:
            pass
        try:
            rw.shared.acquire(child, deadline=0)
        except Cancelled:
            pass
        try:
            rw.shared.acquire(deadline=0)
        except LockTimeout:
            pass
        assert lock.try_acquire() is None

    try:
        grown = growth(step, rounds=200_000, warmup=20_000)
    finally:
        rw_unlock()
    assert grown < 20 * MB, f"RSS grew by {grown / MB:.1f} MB over 200,000 failed rounds"
    assert lock.statistics().waiting == 0 and rw.exclusive.statistics().waiting == 0


@needs_proc
def test_token_cancelled_waits_do_not_grow_memory(held_lock: Lock) -> None:
    """Blocking acquires that really queue and are woken by another thread's cancel, and
    ones that end at a token's deadline: every waiter leaves the queue and the token."""
    lock = held_lock
    tokens: queue.Queue[CancelToken | None] = queue.Queue()
    scope = CancelToken()  # long-lived: every waiter's token is its child

    def canceller() -> None:
        while (token := tokens.get()) is not None:
            token.cancel("stop")

    thread = threading.Thread(target=canceller, daemon=True)
    thread.start()
    outcomes = {"cancelled": 0, "timeout": 0}

    def step() -> None:
        token = scope.child()
        tokens.put(token)
        try:
            lock.acquire(token, deadline=10)
        except Cancelled:
            outcomes["cancelled"] += 1
        try:
            lock.acquire(scope.child(deadline=0.0001))
        except LockTimeout:
            outcomes["timeout"] += 1

    try:
        grown = growth(step, rounds=3_000, warmup=300)
    finally:
        tokens.put(None)
        thread.join(10)
    assert outcomes == {"cancelled": 3_300, "timeout": 3_300}
    assert grown < 20 * MB, f"RSS grew by {grown / MB:.1f} MB over 3,000 cancelled waits"
    assert lock.statistics().waiting == 0
    assert not scope.cancelled


# --- (b) token children -----------------------------------------------------------------------


def test_dropped_children_leave_no_python_objects() -> None:
    parent = CancelToken()

    def make_children(n: int) -> None:
        for i in range(n):
            child = parent.child(deadline=3600 if i % 2 else None)
            child.child()  # a grandchild, dropped first

    make_children(1_000)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        make_children(50_000)
        gc.collect()
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    grown = sum(s.size_diff for s in after.compare_to(before, "filename"))
    # A leaked child would keep its Python object (about 50 bytes or more): 2.5 MB here.
    assert grown < 256 * 1024, f"Python allocations grew by {grown} bytes over 50,000 children"
    assert not parent.cancelled


@needs_proc
def test_dropped_children_and_their_deadlines_do_not_grow_memory() -> None:
    """A dropped child unregisters from its long-lived parent and from the timer."""
    parent = CancelToken(deadline=3600)

    def step() -> None:
        parent.child()
        parent.child(deadline=1800).child(deadline=900)

    grown = growth(step, rounds=200_000, warmup=20_000)
    # Each leaked child would hold at least a parent entry, a node and a timer entry.
    assert grown < 10 * MB, f"RSS grew by {grown / MB:.1f} MB over 600,000 dropped children"
    assert not parent.cancelled
    assert parent.wait(0) is False


# --- (c) asyncio waits ended by task.cancel(), tokens, deadlines and timeouts -----------------


def futures() -> int:
    gc.collect()
    return sum(isinstance(o, asyncio.Future) for o in gc.get_objects())


def test_cancelled_async_waits_leave_nothing_behind() -> None:
    lock = Lock()
    rw = SharableLock()
    scope = CancelToken()  # long-lived: every waiter registers on it
    batch = 50
    rounds = 20

    async def acquire(view: Lock | object, token: CancelToken | None, **kw: object) -> None:
        unlock = await view.acquire_async(token, **kw)  # type: ignore[attr-defined]
        unlock()

    async def main() -> None:
        held = await lock.acquire_async()
        rw_held = await rw.exclusive.acquire_async()
        base_tasks = len(asyncio.all_tasks())
        base_futures = futures()
        base_referrers = len(gc.get_referrers(lock))
        for _ in range(rounds):
            # task.cancel() while queued.
            tasks = [asyncio.ensure_future(acquire(lock, scope)) for _ in range(batch)]
            tasks += [asyncio.ensure_future(acquire(rw.shared, scope)) for _ in range(batch)]
            await asyncio.sleep(0)
            assert lock.statistics().waiting == batch and rw.exclusive.statistics().waiting == batch
            for t in tasks:
                t.cancel()
            results = await asyncio.gather(*tasks, return_exceptions=True)
            assert all(isinstance(r, asyncio.CancelledError) for r in results)
            # A token cancelled from another thread.
            token = scope.child()
            tasks = [asyncio.ensure_future(acquire(lock, token)) for _ in range(batch)]
            await asyncio.sleep(0)
            assert lock.statistics().waiting == batch
            canceller = threading.Thread(target=token.cancel, args=("stop",))
            canceller.start()
            results = await asyncio.gather(*tasks, return_exceptions=True)
            canceller.join(PATIENCE)
            assert not canceller.is_alive()
            assert all(isinstance(r, Cancelled) for r in results), results
            # Deadlines: the acquire's own and the token's.
            tasks = [
                asyncio.ensure_future(acquire(lock, scope, deadline=0.001)),
                asyncio.ensure_future(acquire(rw.exclusive, scope.child(deadline=0.001))),
            ]
            results = await asyncio.gather(*tasks, return_exceptions=True)
            assert all(isinstance(r, LockTimeout) for r in results), results
            # asyncio's own timeout.
            try:
                await asyncio.wait_for(acquire(lock, scope), 0.001)
            except TimeoutError:
                pass
            else:
                raise AssertionError("acquired a held lock")
        await asyncio.sleep(0)
        assert lock.statistics().waiting == 0 and rw.exclusive.statistics().waiting == 0
        assert len(asyncio.all_tasks()) == base_tasks
        del tasks, results
        assert futures() <= base_futures + 5, (futures(), base_futures)
        assert len(gc.get_referrers(lock)) == base_referrers
        held()
        rw_held()
        # The lock still works: no waiter was left to be handed the lock.
        await acquire(lock, scope)
        await acquire(rw.exclusive, scope)

    asyncio.run(main())
    assert not lock.locked() and not rw.exclusive.locked()
    assert not scope.cancelled


# --- (d) on_cancel and unlock_on_cancel registrations -----------------------------------------


class Callback:
    """A callable that can be weakly referenced, to see when a token lets go of it."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> None:
        self.calls += 1


def test_unregistered_on_cancel_callbacks_are_dropped() -> None:
    token = CancelToken()
    refs = []
    for _ in range(1_000):
        fn = Callback()
        refs.append(weakref.ref(fn))
        stop = token.on_cancel(fn)
        del fn
        assert stop() is True
        assert stop() is False
    gc.collect()
    assert all(r() is None for r in refs), "a callback outlived its unregistration"

    # A callback that ran is dropped too, and so is one whose token was dropped.
    ran = Callback()
    ran_ref = weakref.ref(ran)
    token.on_cancel(ran)
    dropped = Callback()
    dropped_ref = weakref.ref(dropped)
    other = CancelToken()
    other_stop = other.on_cancel(dropped)
    token.cancel()
    assert ran.calls == 1
    del ran, dropped, other, other_stop
    gc.collect()
    assert ran_ref() is None and dropped_ref() is None


@needs_proc
def test_many_on_cancel_registrations_do_not_grow_memory() -> None:
    token = CancelToken()
    fn = Callback()

    def step() -> None:
        stop = token.on_cancel(fn)
        stop()

    grown = growth(step, rounds=500_000, warmup=50_000)
    assert grown < 10 * MB, f"RSS grew by {grown / MB:.1f} MB over 500,000 registrations"
    assert fn.calls == 0
    token.cancel()
    assert fn.calls == 0  # every registration was undone


def test_unlock_drops_its_unlock_on_cancel_registration() -> None:
    """After ``unlock()``, a long-lived token no longer keeps the ``Unlock`` alive."""
    lock = Lock()
    scope = CancelToken()
    unlock = lock.acquire()
    base = sys.getrefcount(unlock)
    unlock.unlock_on_cancel(scope)
    assert sys.getrefcount(unlock) > base  # the token's callback holds it
    unlock()
    assert sys.getrefcount(unlock) == base
    for _ in range(10_000):
        u = lock.acquire()
        u.unlock_on_cancel(scope)
        u()
    scope.cancel()
    assert not lock.locked()
