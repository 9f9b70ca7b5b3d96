"""Cancellation, for every kind in ``KINDS``, threads and asyncio tasks.

A token that is already cancelled raises ``Cancelled`` even when the lock is free; a cancel
ends a wait at once; a waiter cancelled as the lock is handed to it passes the lock on, so
nothing leaks (``task.cancel()`` likewise for tasks).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import random
import threading
import time

import pytest
from conftest import PATIENCE, RACE_ROUNDS, RACE_SECONDS, Holders, assert_free, settle
from ctxlock import Cancelled, CancelToken
from kinds import Target

# --- threads ----------------------------------------------------------------------------------


def test_token_cancel_ends_the_wait(target: Target, spawn, wait_until) -> None:
    lock = target.view
    holder = target.blocker.acquire()
    token = CancelToken()
    started = threading.Event()

    def waiter():
        started.set()
        return lock.acquire(token, deadline=30)

    w = spawn(waiter)
    assert started.wait(5)
    assert wait_until(lambda: lock.statistics().waiting == 1)
    assert not w.done
    t_cancel = time.monotonic()
    token.cancel("stop")
    exc = w.exception(timeout=10)
    assert isinstance(exc, Cancelled), exc
    assert exc.reason == "stop"
    assert time.monotonic() - t_cancel < PATIENCE  # bounds a hang, not speed
    assert target.blocker.locked()
    assert lock.statistics().waiting == 0
    holder()
    assert not lock.locked()
    assert_free(target)


def test_already_cancelled_token_raises_even_if_free(target: Target) -> None:
    lock = target.view
    token = CancelToken()
    token.cancel("early")
    with pytest.raises(Cancelled) as info:
        lock.acquire(token)
    assert info.value.reason == "early"
    assert not lock.locked()
    with pytest.raises(Cancelled):
        lock.acquire(token, blocking=False)
    with pytest.raises(Cancelled):
        lock.acquire(token, deadline=0)
    assert_free(target)


def test_no_leak_when_unlock_races_cancel(target: Target, spawn) -> None:
    rng = random.Random(11)

    def attempt(token):
        try:
            u = target.view.acquire(token, deadline=10)
        except Cancelled:
            return "cancelled"
        u()
        return "acquired"

    for _ in range(25):
        holder = target.blocker.acquire()
        token = CancelToken()
        started = threading.Event()
        w = spawn(lambda token=token, started=started: (started.set(), attempt(token))[1])
        assert started.wait(5)
        time.sleep(rng.uniform(0.0, 0.01))
        releaser = spawn(holder)
        token.cancel()
        releaser.result()
        assert w.result(timeout=10) in ("cancelled", "acquired")
        assert not target.view.locked()
        assert_free(target)


# --- asyncio tasks ----------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_task_cancel_while_waiting(target: Target) -> None:
    holder = target.blocker.acquire()
    first = asyncio.ensure_future(target.view.acquire_async())
    await settle()
    second = asyncio.ensure_future(target.view.acquire_async())
    await settle()
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    holder()
    # The cancelled waiter left the queue: the one behind it gets the lock.
    unlock = await asyncio.wait_for(second, PATIENCE)
    unlock()
    assert_free(target)


@pytest.mark.asyncio
async def test_task_cancel_inside_async_with_releases(target: Target) -> None:
    entered = asyncio.Event()

    async def holder() -> None:
        async with target.view:
            entered.set()
            await asyncio.sleep(PATIENCE * 2)

    task = asyncio.create_task(holder())
    await asyncio.wait_for(entered.wait(), PATIENCE)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert_free(target)


@pytest.mark.asyncio
async def test_token_cancelled_from_a_thread(target: Target) -> None:
    holder = target.blocker.acquire()
    token = CancelToken()
    timer = threading.Timer(0.1, token.cancel, args=("from a thread",))
    timer.start()
    try:
        with pytest.raises(Cancelled) as cancelled:
            await asyncio.wait_for(target.view.acquire_async(token), PATIENCE)
    finally:
        timer.cancel()
    assert cancelled.value.reason == "from a thread"
    holder()
    assert_free(target)


@pytest.mark.asyncio
async def test_token_cancelled_from_another_task(target: Target) -> None:
    holder = target.blocker.acquire()
    token = CancelToken()

    async def canceller() -> None:
        await asyncio.sleep(0.05)
        token.cancel("from a task")

    other = asyncio.create_task(canceller())
    with pytest.raises(Cancelled) as cancelled:
        await asyncio.wait_for(target.view.acquire_async(token), PATIENCE)
    await other
    assert cancelled.value.reason == "from a task"
    holder()
    assert_free(target)


@pytest.mark.asyncio
async def test_a_cancelled_token_raises_even_when_free(target: Target) -> None:
    token = CancelToken()
    token.cancel("early")
    with pytest.raises(Cancelled) as cancelled:
        await target.view.acquire_async(token)
    assert cancelled.value.reason == "early"
    assert_free(target)


@pytest.mark.stress
@pytest.mark.asyncio
async def test_task_cancel_races_unlock(
    target: Target, other_thread: concurrent.futures.ThreadPoolExecutor
) -> None:
    rng = random.Random(1)
    holders = Holders()
    outcomes = {"acquired": 0, "cancelled": 0}
    end = time.monotonic() + RACE_SECONDS

    async def waiter() -> None:
        async with target.view:
            holders.enter(target.exclusive, "task")
            outcomes["acquired"] += 1
            try:
                if rng.random() < 0.3:
                    await asyncio.sleep(0)  # may be cancelled here, inside
            finally:
                holders.leave(target.exclusive)

    rounds = 0
    while rounds < RACE_ROUNDS and time.monotonic() < end:
        rounds += 1
        holder = target.blocker.try_acquire()
        assert holder is not None, f"round {rounds}: the lock leaked"
        holders.enter(True, "holder")
        task = asyncio.create_task(waiter())
        for _ in range(rng.randrange(3)):
            await asyncio.sleep(0)
        holders.leave(True)
        how = rng.randrange(5)
        released: concurrent.futures.Future[None] | None = None
        if how == 0:
            holder()
            task.cancel()
        elif how == 1:
            task.cancel()
            holder()
        elif how == 2:
            released = other_thread.submit(holder)
            task.cancel()
        elif how == 3:
            task.cancel()
            released = other_thread.submit(holder)
        else:
            holder()
            await asyncio.sleep(0)
            task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            outcomes["cancelled"] += 1
        if released is not None:
            await asyncio.wrap_future(released)
        assert holder.released
        assert not holders.overlaps, holders.overlaps[:3]
        unlock = target.blocker.try_acquire()
        assert unlock is not None, f"round {rounds} (how={how}): the lock leaked"
        unlock()
    assert outcomes["cancelled"] > 0, outcomes
    assert rounds > 100


@pytest.mark.stress
@pytest.mark.asyncio
async def test_token_cancel_races_unlock(
    target: Target, other_thread: concurrent.futures.ThreadPoolExecutor
) -> None:
    rng = random.Random(2)
    holders = Holders()
    outcomes = {"acquired": 0, "cancelled": 0}
    end = time.monotonic() + RACE_SECONDS

    async def waiter(token: CancelToken) -> None:
        try:
            unlock = await target.view.acquire_async(token)
        except Cancelled as exc:
            assert exc.reason == "race"
            outcomes["cancelled"] += 1
            return
        with unlock:
            holders.enter(target.exclusive, "task")
            outcomes["acquired"] += 1
            holders.leave(target.exclusive)

    rounds = 0
    while rounds < RACE_ROUNDS and time.monotonic() < end:
        rounds += 1
        holder = target.blocker.try_acquire()
        assert holder is not None, f"round {rounds}: the lock leaked"
        holders.enter(True, "holder")
        token = CancelToken()
        task = asyncio.create_task(waiter(token))
        for _ in range(rng.randrange(3)):
            await asyncio.sleep(0)
        holders.leave(True)
        how = rng.randrange(5)
        done: concurrent.futures.Future[None] | None = None
        if how == 0:
            holder()
            token.cancel("race")
        elif how == 1:
            token.cancel("race")
            holder()
        elif how == 2:
            done = other_thread.submit(token.cancel, "race")
            holder()
        elif how == 3:
            done = other_thread.submit(holder)
            token.cancel("race")
        else:
            holder()
            await asyncio.wait_for(asyncio.shield(task), PATIENCE)
            token.cancel("race")
        await asyncio.wait_for(task, PATIENCE)
        if done is not None:
            await asyncio.wrap_future(done)
        assert not holders.overlaps, holders.overlaps[:3]
        unlock = target.blocker.try_acquire()
        assert unlock is not None, f"round {rounds} (how={how}): the lock leaked"
        unlock()
    assert outcomes["acquired"] > 0 and outcomes["cancelled"] > 0, outcomes
    assert rounds > 100
