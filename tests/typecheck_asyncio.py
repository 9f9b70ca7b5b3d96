"""Checked by mypy (``make lint``), never run: the awaitables' types fit asyncio's APIs."""

from __future__ import annotations

import asyncio

from ctxlock import CancelToken, Lock, SharableLock, Unlock


async def tasks_of_acquires() -> None:
    lock = Lock()
    rw = SharableLock()
    token = CancelToken()
    a: asyncio.Task[Unlock] = asyncio.create_task(lock.acquire_async())
    b: asyncio.Task[Unlock] = asyncio.create_task(rw.shared.acquire_async(token, deadline=1))
    c: asyncio.Task[None] = asyncio.create_task(token.wait_async())
    async with asyncio.TaskGroup() as tg:
        d: asyncio.Task[Unlock] = tg.create_task(rw.exclusive.acquire_async())
    for t in (a, b, d):
        (await t)()
    await c
