"""Deadlines, for every kind in ``KINDS``, threads and asyncio tasks.

``deadline=0`` tries once; a deadline (``deadline=`` or the token's) that passes ends the
wait with ``LockTimeout``, a ``TimeoutError``; a waiter that times out leaves the queue
without the lock, and one handed the lock as its deadline passes keeps it: nothing leaks.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import math
import random
import sys
import time

import pytest
from conftest import PATIENCE, RACE_ROUNDS, RACE_SECONDS, Holders, assert_free
from ctxlock import CancelToken, LockError, LockTimeout
from kinds import Target

# Slack for comparing a deadline with time.monotonic(): both use CLOCK_MONOTONIC.
EPS = 0.005
# An upper bound for "promptly": it bounds a hang (a lost wake-up), never measures speed.
PROMPT = PATIENCE

# --- threads ----------------------------------------------------------------------------------


@pytest.mark.parametrize("deadline", [-1, -0.001, math.nan, -math.inf])
def test_bad_deadline_is_a_value_error(target: Target, deadline: float) -> None:
    v = target.view
    with pytest.raises(ValueError, match="deadline"):
        v.acquire(deadline=deadline)
    assert_free(target)


def test_deadline_zero_on_a_free_lock_acquires(target: Target) -> None:
    u = target.view.acquire(deadline=0)
    assert target.view.locked()
    u()
    assert_free(target)


def test_deadline_zero_on_a_taken_lock_raises_lock_timeout_at_once(target: Target, spawn) -> None:
    u = spawn(target.blocker.acquire).result()
    try:
        t0 = time.monotonic()
        with pytest.raises(LockTimeout):
            target.view.acquire(deadline=0)
        assert time.monotonic() - t0 < PROMPT
        assert target.blocker.locked()
        # It tried once and never queued.
        assert target.view.statistics().waiting == 0
    finally:
        u()
    assert not target.view.locked()
    assert_free(target)


def test_deadline(target: Target, spawn) -> None:
    holder = spawn(target.blocker.acquire).result()
    try:
        with pytest.raises(LockTimeout):
            target.view.acquire(deadline=0)
        t0 = time.monotonic()
        with pytest.raises(LockTimeout) as info:
            target.view.acquire(deadline=0.15)
        assert type(info.value) is LockTimeout
        assert isinstance(info.value, TimeoutError)
        assert isinstance(info.value, LockError)
        assert 0.15 - EPS <= time.monotonic() - t0 < 5.0
        t0 = time.monotonic()
        with pytest.raises(LockTimeout):
            target.view.acquire(CancelToken(deadline=0.15))
        assert 0.15 - EPS <= time.monotonic() - t0 < 5.0
        assert target.blocker.locked()
        assert target.view.statistics().waiting == 0
    finally:
        holder()
    assert not target.blocker.locked()
    assert_free(target)


def test_a_token_whose_deadline_passed_raises_even_when_free(target: Target) -> None:
    """A passed deadline never queues, and never takes a free lock either."""
    token = CancelToken(deadline=0.01)
    assert token.wait(PATIENCE)
    with pytest.raises(LockTimeout):
        target.view.acquire(token)
    with pytest.raises(LockTimeout):
        target.view.acquire(token.child(), deadline=PATIENCE)
    assert_free(target)


def test_no_leak_on_timeout(target: Target, spawn, wait_until) -> None:
    holder = target.blocker.acquire()
    waiters = [spawn(target.view.acquire, deadline=0.5 + 0.02 * i) for i in range(3)]
    # All three queue (the statistics count them), then all three leave the queue.
    assert wait_until(lambda: target.view.statistics().waiting == 3 or any(w.done for w in waiters))
    for w in waiters:
        assert isinstance(w.exception(timeout=10), LockTimeout)
    assert target.blocker.locked()
    assert target.view.statistics().waiting == 0
    holder()
    assert not target.blocker.locked()
    assert_free(target)


def test_no_leak_when_unlock_races_the_deadline(target: Target, spawn) -> None:
    """A waiter whose deadline passes as the lock is handed to it either keeps it or not."""
    rng = random.Random(7)
    outcomes = {"acquired": 0, "timeout": 0}

    def attempt(deadline):
        try:
            u = target.view.acquire(deadline=deadline)
        except LockTimeout:
            return "timeout"
        u()
        return "acquired"

    for _ in range(25):
        holder = target.blocker.acquire()
        w = spawn(attempt, 0.01)
        time.sleep(rng.uniform(0.005, 0.015))
        holder()
        outcomes[w.result(timeout=10)] += 1
        assert not target.view.locked(), outcomes
        assert_free(target)


# --- asyncio tasks ----------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_wait_for_timeout(target: Target) -> None:
    holder = target.blocker.acquire()
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(target.view.acquire_async(), 0.1)
    holder()
    assert_free(target)


@pytest.mark.skipif(sys.version_info < (3, 11), reason="asyncio.timeout is new in 3.11")
@pytest.mark.asyncio
async def test_asyncio_timeout(target: Target) -> None:
    holder = target.blocker.acquire()
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.1):  # type: ignore[attr-defined,unused-ignore]
            await target.view.acquire_async()
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.1):  # type: ignore[attr-defined,unused-ignore]
            async with target.view:
                pass
    holder()
    assert_free(target)


@pytest.mark.asyncio
async def test_deadline_raises_lock_timeout(target: Target) -> None:
    holder = target.blocker.acquire()
    with pytest.raises(LockTimeout):
        await target.view.acquire_async(deadline=0.1)
    with pytest.raises(LockTimeout):
        await target.view.acquire_async(deadline=0)
    with pytest.raises(LockTimeout):
        await target.view.acquire_async(CancelToken(deadline=0.1))
    holder()
    assert_free(target)


@pytest.mark.stress
@pytest.mark.asyncio
async def test_deadline_races_unlock(
    target: Target, other_thread: concurrent.futures.ThreadPoolExecutor
) -> None:
    rng = random.Random(3)
    holders = Holders()
    end = time.monotonic() + RACE_SECONDS / 2
    rounds = 0
    while rounds < RACE_ROUNDS // 4 and time.monotonic() < end:
        rounds += 1
        holder = target.blocker.try_acquire()
        assert holder is not None, f"round {rounds}: the lock leaked"
        deadline = rng.random() * 0.002
        task = asyncio.ensure_future(target.view.acquire_async(deadline=deadline))
        await asyncio.sleep(rng.random() * 0.002)
        await asyncio.wrap_future(other_thread.submit(holder))
        try:
            unlock = await asyncio.wait_for(task, PATIENCE)
        except LockTimeout:
            pass
        else:
            holders.enter(target.exclusive, "task")
            holders.leave(target.exclusive)
            unlock()
        assert_free(target)
    assert not holders.overlaps
