"""The asyncio half of ``acquire_async`` and ``async with``: only what must be Python.

The Rust side has already tried the uncontended path, and it waits itself for the
contended ``async with`` and plain ``acquire_async()`` (no frame of their own). Here a
contended acquire with a token or a deadline creates one future, queues in the lock's
wait queue (the same queue blocked threads use), and awaits the future. The future is a
doorbell, rung when the lock is handed to this task, when its token is cancelled, or at
its deadline; who owns the lock is decided in Rust, once, so a cancellation racing a
hand-off can neither leak the lock nor hold it twice.
"""

from __future__ import annotations

import asyncio
import time
from asyncio import events
from functools import partial
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ctxlock._ctxlock import CancelToken, Unlock

__all__ = ["acquire", "ring", "wait_token"]


def _set_done(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


def ring(loop: asyncio.AbstractEventLoop, fut: asyncio.Future[None]) -> bool:
    """Complete ``fut`` on ``loop`` from any thread; False if the loop is closed.

    (The lock's own doorbell does the same in Rust; this one serves token callbacks.)
    """
    if events._get_running_loop() is loop:
        _set_done(fut)
        return True
    try:
        loop.call_soon_threadsafe(_set_done, fut)
    except RuntimeError:  # the loop is closed: the task will never run again
        return False
    return True


async def acquire(lock: Any, token: CancelToken | None, timeout: float | None) -> Unlock:
    """Wait in the lock's queue until granted, the token is cancelled or the deadline."""
    loop = events.get_running_loop()
    fut: asyncio.Future[None] = loop.create_future()
    waiting = lock._queue_task(loop, fut)
    if not waiting.granted():
        timers: list[asyncio.TimerHandle] = []
        if timeout is not None:
            timers.append(loop.call_later(timeout, _set_done, fut))
        unregister = None if token is None else token.on_cancel(partial(ring, loop, fut))
        if token is not None and token.deadline is not None:
            _at_token_deadline(loop, fut, waiting, token, timers)
        try:
            await fut
        except BaseException:  # task.cancel(), asyncio.timeout(), coroutine closed
            waiting.cancel()
            raise
        finally:
            for timer in timers:
                timer.cancel()
            if unregister is not None:
                unregister()
    result: Unlock = waiting.finish(token, True)
    return result


def _at_token_deadline(
    loop: asyncio.AbstractEventLoop,
    fut: asyncio.Future[None],
    waiting: Any,
    token: CancelToken,
    timers: list[asyncio.TimerHandle],
) -> None:
    """Cancel the token once its deadline is due (rings ``fut``), else check again then.

    The token's deadline is on the ``time.monotonic()`` clock; the loop's clock may differ
    (uvloop's) or fire a little early, so the wait is re-armed until the token says the
    deadline passed. The token is cancelled before the waiter sees the error, even when
    ctxlock's timer thread has not got to it yet.
    """
    if fut.done():
        return
    if waiting.expire(token):
        _set_done(fut)
        return
    deadline = token.deadline
    assert deadline is not None
    left = max(deadline - time.monotonic(), 0.001)
    timers.append(loop.call_later(left, _at_token_deadline, loop, fut, waiting, token, timers))


async def wait_token(token: CancelToken) -> None:
    """Wait until ``token`` is cancelled, from any thread or loop."""
    if token.cancelled:
        return
    loop = events.get_running_loop()
    fut: asyncio.Future[None] = loop.create_future()
    unregister = token.on_cancel(partial(ring, loop, fut))
    try:
        await fut
    finally:
        unregister()
