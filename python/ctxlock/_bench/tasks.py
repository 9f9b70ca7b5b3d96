"""Tasks on one lock (``tasks_100``, ``tasks_scaling``), and tasks with threads (``mixed_2t2t``)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from itertools import repeat
from time import perf_counter_ns

from ctxlock._bench.peers import AsyncLock, DualLock
from ctxlock._bench.workers import Workers
from ctxlock._bench.workload import AsyncWorkload, Sample, expect

__all__ = ["Mixed", "Tasks", "TasksThrough"]


class Tasks(AsyncWorkload):
    """``tasks`` tasks each do ``async with lock: await asyncio.sleep(0)`` ``n`` times.

    One operation is one hold; a second holder at any moment is an error.
    """

    def __init__(self, make_lock: Callable[[], AsyncLock], tasks: int = 100) -> None:
        make_lock()  # fail here, not in run(), if the peer is missing
        super().__init__()
        self._make_lock = make_lock
        self._tasks = tasks

    async def _main(self, n: int) -> Sample:
        lock, holding = self._make_lock(), [False]

        async def worker() -> None:
            for _ in repeat(None, n):
                async with lock:
                    expect(not holding[0], "two tasks held the lock at once")
                    holding[0] = True
                    await asyncio.sleep(0)
                    holding[0] = False

        start = perf_counter_ns()
        await asyncio.gather(*(worker() for _ in range(self._tasks)))
        return Sample(n * self._tasks, perf_counter_ns() - start)


class TasksThrough(AsyncWorkload):
    """``n`` tasks queue on one held lock, then each passes through once (``async with``).

    The time runs from creating the first task to the last one's release.
    """

    def __init__(self, make_lock: Callable[[], AsyncLock]) -> None:
        make_lock()  # fail here, not in run(), if the peer is missing
        super().__init__()
        self._make_lock = make_lock

    async def _main(self, n: int) -> Sample:
        lock, passed = self._make_lock(), [0]

        async def through() -> None:
            async with lock:
                passed[0] += 1

        await lock.__aenter__()
        held = True
        try:
            start = perf_counter_ns()
            tasks = [asyncio.ensure_future(through()) for _ in range(n)]
            await asyncio.sleep(0)  # every task runs up to the lock and queues
            held = False
            await lock.__aexit__(None, None, None)
            await asyncio.gather(*tasks)
            elapsed = perf_counter_ns() - start
        finally:
            if held:
                await lock.__aexit__(None, None, None)
        expect(passed[0] == n, f"{passed[0]} of {n} tasks got through")
        return Sample(n, elapsed)


class Mixed(AsyncWorkload):
    """Two threads (``with``) and two tasks (``async with``) increment one counter ``n`` times.

    One operation is one increment; the time runs until the last worker finishes.
    """

    def __init__(self, make_lock: Callable[[], DualLock]) -> None:
        make_lock()  # fail here, not in run(), if the peer is missing
        super().__init__()
        self._make_lock = make_lock

    async def _main(self, n: int) -> Sample:
        lock, counter = self._make_lock(), [0]
        ends: list[int] = []
        gate = threading.Event()

        def thread_worker() -> None:
            gate.wait()
            for _ in repeat(None, n):
                with lock:
                    counter[0] += 1
            ends.append(perf_counter_ns())

        async def task_worker() -> None:
            for _ in repeat(None, n):
                async with lock:
                    counter[0] += 1
            ends.append(perf_counter_ns())

        workers = Workers(thread_worker, 2)
        start = perf_counter_ns()
        gate.set()
        await asyncio.gather(task_worker(), task_worker())
        workers.join()  # the tasks are done; nothing else needs this loop
        expect(counter[0] == 4 * n, f"counted {counter[0]} increments, expected {4 * n}")
        return Sample(4 * n, max(ends) - start)
