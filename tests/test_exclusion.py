"""Exclusion, for every kind in ``KINDS``: across threads and across asyncio tasks.

An exclusive hold excludes every other hold; shared holds exclude exclusive ones only. Each
test books every hold in a ``Holders`` and fails on any overlap exclusion forbids.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time

import pytest
from conftest import PATIENCE, Holders, assert_free, in_thread
from ctxlock import Unlock, WouldBlock
from kinds import Target


def test_mutual_exclusion_under_4_threads(target: Target, spawn) -> None:
    """Threads take the view under test or its exclusive blocker, every way there is.

    ``total`` is a read-modify-write that loses updates without exclusion; it is done
    only under exclusive holds (all of them, for an exclusive kind).
    """
    holders = Holders()
    guard = threading.Lock()
    inside = 0
    max_inside = 0
    total = 0
    exclusive_holds = [0]
    n_threads, n_iter = 4, 400

    def work(seed: int) -> None:
        nonlocal inside, max_inside, total
        rng = random.Random(seed)
        for _ in range(n_iter):
            view = target.view if target.exclusive or rng.random() < 0.5 else target.blocker
            exclusive = target.exclusive or view is target.blocker
            how = rng.randrange(3)
            u = None
            if how == 0:
                u = view.acquire()
            elif how == 1:
                u = view.acquire(deadline=30)
            else:
                view.__enter__()
            holders.enter(exclusive, "thread")
            if exclusive:
                with guard:
                    inside += 1
                    max_inside = max(max_inside, inside)
            if rng.random() < 0.3:
                time.sleep(0)  # give other threads the GIL inside the critical section
            if exclusive:
                value = total
                if rng.random() < 0.1:
                    time.sleep(0)
                total = value + 1
                with guard:
                    inside -= 1
                    exclusive_holds[0] += 1
            holders.leave(exclusive)
            if u is None:
                view.__exit__(None, None, None)
            else:
                u()

    workers = [spawn(work, i) for i in range(n_threads)]
    for w in workers:
        w.result(timeout=30)
    assert not holders.overlaps, holders.overlaps[:3]
    assert max_inside == 1
    assert total == exclusive_holds[0]
    if target.exclusive:
        assert total == n_threads * n_iter
    assert holders.entries == n_threads * n_iter
    assert not target.view.locked()
    assert_free(target)


@pytest.mark.asyncio
async def test_tasks_and_a_thread_exclude_each_other(target: Target) -> None:
    """Tasks on one loop and a thread take the view and its blocker; nothing overlaps."""
    holders = Holders()
    rng = random.Random(5)
    n_tasks, n_iter = 6, 50

    async def task(i: int) -> None:
        for j in range(n_iter):
            view = target.view if (i + j) % 3 else target.blocker
            exclusive = target.exclusive or view is target.blocker
            if j % 2:
                async with view:
                    holders.enter(exclusive, f"task {i}")
                    await asyncio.sleep(0)
                    holders.leave(exclusive)
            else:
                unlock = await view.acquire_async(deadline=PATIENCE)
                holders.enter(exclusive, f"task {i}")
                await asyncio.sleep(0)
                holders.leave(exclusive)
                unlock()

    def thread() -> None:
        for _ in range(n_iter):
            with target.blocker.acquire(deadline=PATIENCE):
                holders.enter(True, "thread")
                time.sleep(rng.random() * 0.0005)
                holders.leave(True)

    other = in_thread(thread)
    await asyncio.wait_for(
        asyncio.gather(*(asyncio.create_task(task(i)) for i in range(n_tasks))), PATIENCE * 4
    )
    await asyncio.wrap_future(other)
    assert not holders.overlaps, holders.overlaps[:3]
    assert holders.entries == (n_tasks + 1) * n_iter
    assert_free(target)


@pytest.mark.asyncio
async def test_shared_tasks_share_and_exclusive_tasks_exclude(target: Target) -> None:
    """Two tasks that hold the view at once: both get in only if the kind is shared."""
    first = await target.view.acquire_async()
    second = asyncio.ensure_future(target.view.acquire_async())
    if target.exclusive:
        await asyncio.sleep(0.05)
        assert not second.done()
        assert target.view.statistics().waiting == 1
        first()
        unlock = await asyncio.wait_for(second, PATIENCE)
    else:
        unlock = await asyncio.wait_for(second, PATIENCE)
        assert target.view.statistics().holders == 2
        first()
    unlock()
    assert_free(target)


def test_try_acquire_and_locked_are_consistent(target: Target, spawn) -> None:
    """``locked``, ``try_acquire`` and ``blocking=False`` agree, in every thread.

    A hold of the view under test blocks its exclusive blocker, and a hold of the blocker
    blocks the view (the same object for an exclusive kind).
    """
    lock, blocker = target.view, target.blocker
    assert lock.locked() is False
    u = lock.try_acquire()
    assert isinstance(u, Unlock)
    assert lock.locked() is True
    assert blocker.try_acquire() is None
    assert spawn(blocker.try_acquire).result() is None
    with pytest.raises(WouldBlock):
        blocker.acquire(blocking=False)
    assert lock.locked() is True
    u()
    assert lock.locked() is False
    assert spawn(lock.locked).result() is False
    with lock:
        assert lock.locked() is True
    assert lock.locked() is False
    u = lock.acquire(blocking=False)
    assert lock.locked() is True
    u()
    assert lock.locked() is False
    held = blocker.acquire()
    assert lock.try_acquire() is None
    assert spawn(lock.try_acquire).result() is None
    with pytest.raises(WouldBlock):
        lock.acquire(blocking=False)
    held()
    assert_free(target)
