"""Acquire and release, for every kind in ``KINDS``, threads and asyncio tasks.

``blocking=False`` raises ``WouldBlock`` on a taken lock; an ``Unlock`` releases once only;
``with``/``async with`` release on exit, exceptions too; a release wakes the next waiter;
``statistics()`` reports the holders of the view and the waiters of the lock.
"""

from __future__ import annotations

import asyncio
import random

import pytest
from conftest import PATIENCE, assert_free, in_thread, settle
from ctxlock import LockError, LockStatistics, Unlock, WouldBlock
from kinds import Target

# --- threads ----------------------------------------------------------------------------------


def test_bad_argument_types(target: Target) -> None:
    v = target.view
    with pytest.raises(TypeError):
        v.acquire(cancel=object())  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        v.acquire(deadline="1")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        v.acquire(deadline=1, blocking=False)
    assert_free(target)


def test_blocking_false_on_a_free_lock_acquires(target: Target) -> None:
    u = target.view.acquire(blocking=False)
    assert isinstance(u, Unlock)
    assert target.view.locked()
    u()
    assert_free(target)


def test_blocking_false_on_a_taken_lock_raises_would_block(target: Target, spawn) -> None:
    u = spawn(target.blocker.acquire).result()
    try:
        with pytest.raises(WouldBlock) as info:
            target.view.acquire(blocking=False)
        assert isinstance(info.value, LockError)
        assert not isinstance(info.value, TimeoutError)
        assert target.blocker.locked()
        assert target.view.statistics().waiting == 0
    finally:
        u()
    assert not target.blocker.locked()
    assert_free(target)


def test_unlock_releases_once_only(target: Target) -> None:
    """A second call of a spent ``Unlock`` does nothing, even to a later hold."""
    u = target.view.acquire()
    u()
    assert u.released
    again = target.blocker.acquire()
    u()  # spent: must not release the blocker's hold
    assert target.blocker.locked()
    assert target.view.try_acquire() is None
    again()
    again()
    assert_free(target)


def test_with_releases_on_exit_and_on_exception(target: Target) -> None:
    with target.view:
        assert target.view.locked()
        assert target.blocker.try_acquire() is None
    assert_free(target)
    with pytest.raises(ZeroDivisionError):
        with target.view:
            _ = 1 / 0
    assert_free(target)


def test_a_release_wakes_the_next_thread(target: Target, spawn, wait_until) -> None:
    holder = target.blocker.acquire()
    waiter = spawn(lambda: target.view.acquire(deadline=PATIENCE * 2))
    assert wait_until(lambda: target.view.statistics().waiting == 1)
    assert not waiter.done
    holder()
    unlock = waiter.result()
    assert target.view.locked()
    unlock()  # from this thread: an Unlock may be called from any thread
    assert_free(target)


def test_statistics(target: Target, spawn, wait_until) -> None:
    """Holders in the view's own mode; waiters of the whole lock, seen from both views."""
    free = target.view.statistics()
    assert isinstance(free, LockStatistics)
    assert (free.locked, free.holders, free.waiting) == (False, 0, 0)
    first = target.view.acquire()
    second = None if target.exclusive else target.view.acquire()
    held = target.view.statistics()
    assert held.locked
    assert held.holders == (1 if target.exclusive else 2)
    assert held.waiting == 0
    if not target.exclusive:
        # The blocker's (exclusive) mode is not held: readers hold the lock.
        blocker = target.blocker.statistics()
        assert (blocker.locked, blocker.holders) == (False, 0)
    waiter = spawn(lambda: target.blocker.acquire(deadline=PATIENCE * 2))
    assert wait_until(lambda: target.view.statistics().waiting == 1)
    assert target.blocker.statistics().waiting == 1  # one queue per lock
    first()
    if second is not None:
        second()
    unlock = waiter.result()
    stats = target.blocker.statistics()
    assert (stats.locked, stats.holders, stats.waiting) == (True, 1, 0)
    unlock()
    assert_free(target)


# --- asyncio tasks ----------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_acquire_async_returns_an_unlock(target: Target) -> None:
    unlock = await target.view.acquire_async()
    assert isinstance(unlock, Unlock)
    assert target.view.locked()
    assert target.blocker.try_acquire() is None
    unlock()
    assert unlock.released
    unlock()  # once only: a second call does nothing
    assert_free(target)


@pytest.mark.asyncio
async def test_async_with(target: Target) -> None:
    async with target.view:
        assert target.view.locked()
        assert target.blocker.try_acquire() is None
    assert_free(target)
    with pytest.raises(ZeroDivisionError):
        async with target.view:
            _ = 1 / 0
    assert_free(target)


@pytest.mark.asyncio
async def test_a_waiting_task_gets_the_lock_released_by_a_thread(target: Target) -> None:
    holder = target.blocker.acquire()
    waiter = asyncio.ensure_future(target.view.acquire_async())
    await settle()
    assert not waiter.done()
    await asyncio.wrap_future(in_thread(holder))
    unlock = await asyncio.wait_for(waiter, PATIENCE)
    assert target.view.locked()
    # An Unlock acquired in a task may be called from another thread.
    await asyncio.wrap_future(in_thread(unlock))
    assert unlock.released
    assert_free(target)


@pytest.mark.asyncio
async def test_tasks_are_served_in_fifo_order(exclusive_target: Target) -> None:
    """The promise-lock article's test: random work inside, order kept outside."""
    lock = exclusive_target.view
    out: list[int] = []

    async def worker(i: int) -> None:
        async with lock:
            await asyncio.sleep(random.random() * 0.1)
            out.append(i)

    await asyncio.gather(*(asyncio.create_task(worker(i)) for i in range(10)))
    assert out == list(range(10))
    assert_free(exclusive_target)
