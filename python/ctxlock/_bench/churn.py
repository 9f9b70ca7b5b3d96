"""``churn_rss``: RSS growth over many acquire / timeout / cancel cycles of one lock."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Callable
from time import perf_counter_ns

import ctxlock
from ctxlock._bench.config import Config
from ctxlock._bench.memory import rss_bytes
from ctxlock._bench.result import RowResult, format_value
from ctxlock._bench.row import Row
from ctxlock._bench.workload import BenchError, expect

__all__ = ["CHURN_ASYNC_EVERY", "CHURN_WAIT_EVERY", "churn_row"]

#: One churn cycle in this many also really queues and times out (slow: a timer fires).
CHURN_WAIT_EVERY = 100
#: One async (task cancel) churn cycle per this many sync cycles.
CHURN_ASYNC_EVERY = 8

MB = 1_000_000


def _churn_sync(lock: ctxlock.Lock, cycles: int) -> None:
    """Acquire, fail to acquire by timeout and by a cancelled token, release; repeat.

    One cycle in ``CHURN_WAIT_EVERY`` also really queues: once until ``deadline=``
    passes and once until a parent token's deadline cancels a child token.
    """
    acquire = lock.acquire
    for i in range(cycles):
        unlock = acquire(deadline=30.0)
        try:
            _expect_refused(acquire, deadline=0)
            token = ctxlock.CancelToken()
            token.cancel("churn")
            _expect_refused(acquire, token)
            if i % CHURN_WAIT_EVERY == 0:
                _expect_refused(acquire, deadline=0.0001)
                _expect_refused(acquire, ctxlock.CancelToken(deadline=0.0001).child())
        finally:
            unlock()


def _expect_refused(
    acquire: Callable[..., ctxlock.Unlock], *args: object, **kwargs: object
) -> None:
    """``acquire(*args, **kwargs)`` on a held lock must raise LockTimeout or Cancelled."""
    try:
        unlock = acquire(*args, **kwargs)
    except (ctxlock.LockTimeout, ctxlock.Cancelled):
        return
    unlock()
    raise BenchError("an acquire succeeded on a lock that was held")


async def _churn_async(lock: ctxlock.Lock, cycles: int) -> None:
    """A task queues on the held lock and is cancelled; an async try times out; repeat."""
    unlock = await lock.acquire_async()
    try:
        for _ in range(cycles):
            waiter = asyncio.ensure_future(lock.acquire_async())
            await asyncio.sleep(0)  # let it queue
            waiter.cancel()
            await asyncio.wait([waiter])
            expect(waiter.cancelled(), "a cancelled acquire_async got the held lock")
            try:
                got = await lock.acquire_async(deadline=0)
            except ctxlock.LockTimeout:
                continue
            got()
            raise BenchError("acquire_async(deadline=0) succeeded on a held lock")
    finally:
        unlock()


def _churn(lock: ctxlock.Lock, loop: asyncio.AbstractEventLoop, cycles: int) -> None:
    _churn_sync(lock, cycles)
    loop.run_until_complete(_churn_async(lock, cycles // CHURN_ASYNC_EVERY))


def churn_row(row: Row, cfg: Config) -> RowResult:
    if rss_bytes() is None:
        return row.skipped("skipped: no way to read the RSS on this platform")
    lock = ctxlock.Lock()
    loop = asyncio.new_event_loop()
    try:
        _churn(lock, loop, min(20_000, max(cfg.churn_cycles // 10, 1_000)))  # warm-up
        gc.collect()
        before = rss_bytes() or 0
        start = perf_counter_ns()
        _churn(lock, loop, cfg.churn_cycles)
        elapsed = perf_counter_ns() - start
        gc.collect()
        growth = (rss_bytes() or 0) - before
    finally:
        loop.close()
    full_hint = "" if cfg.churn_cycles >= 1_000_000 else "; --full-churn runs 1,000,000"
    note = (
        f"{cfg.churn_cycles:,} acquire/timeout/cancel cycles + "
        f"{cfg.churn_cycles // CHURN_ASYNC_EVERY:,} task-cancel cycles in "
        f"{format_value(elapsed, 'ns')}, one in {CHURN_WAIT_EVERY} really waiting"
        f"{full_hint}"
    )
    extra = {"cycles": float(cfg.churn_cycles), "elapsed_ns": float(elapsed)}
    return row.result(float(growth), None, max(growth, 0) / MB, note=note, extra=extra)
