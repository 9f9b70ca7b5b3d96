"""The asyncio half of ``CancelToken.wait_async``: only what must be Python.

The lock's own waits (``acquire_async`` and ``async with``, with or without a token or
a deadline) are done in Rust, which imports ``_set_done`` from here for its doorbell.
"""

from __future__ import annotations

import asyncio
from asyncio import events
from functools import partial
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ctxlock._ctxlock import CancelToken

__all__ = ["ring", "wait_token"]


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
