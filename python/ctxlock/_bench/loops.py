"""One thread or one task in a loop on one uncontended lock: the micro rows' workloads."""

from __future__ import annotations

import threading
from collections.abc import Callable
from itertools import repeat
from time import perf_counter_ns

import ctxlock
from ctxlock._bench.peers import AsyncLock, SyncLock
from ctxlock._bench.workload import AsyncWorkload, Sample, Workload

__all__ = [
    "AsyncWith",
    "CtxlockAcquireDeadline",
    "CtxlockAcquireUnlock",
    "ThreadingAcquireKept",
    "ThreadingAcquireRelease",
    "ThreadingAcquireTimeout",
    "WithLoop",
]


class CtxlockAcquireUnlock(Workload):
    """``u = acq(); u()`` with ``acq = Lock().acquire`` pre-bound."""

    def __init__(self) -> None:
        self._acquire = ctxlock.Lock().acquire

    def run(self, n: int) -> Sample:
        acq = self._acquire
        start = perf_counter_ns()
        for _ in repeat(None, n):
            u = acq()
            u()
        return Sample(n, perf_counter_ns() - start)


class ThreadingAcquireRelease(Workload):
    """``a(); r()`` with a ``threading.Lock``'s ``acquire`` and ``release`` pre-bound."""

    def __init__(self) -> None:
        lock = threading.Lock()
        self._lock = lock
        self._acquire = lock.acquire
        self._release = lock.release

    def run(self, n: int) -> Sample:
        a, r = self._acquire, self._release
        start = perf_counter_ns()
        for _ in repeat(None, n):
            a()
            r()
        return Sample(n, perf_counter_ns() - start)


class ThreadingAcquireKept(ThreadingAcquireRelease):
    """``a(); kept = lock; r()``: ``ThreadingAcquireRelease`` taking a reference to its lock
    on every hold, as an ``Unlock`` must (it may outlive every other reference to the lock).
    A control: on the free-threaded build, a reference to an object another thread made is
    an atomic count, so this measures what holding one costs there."""

    def run(self, n: int) -> Sample:
        lock, a, r = self._lock, self._acquire, self._release
        start = perf_counter_ns()
        for _ in repeat(None, n):
            a()
            _kept = lock
            r()
        return Sample(n, perf_counter_ns() - start)


class CtxlockAcquireDeadline(Workload):
    """``acq(deadline=30.0)()``: an acquire with a deadline that is never reached."""

    def __init__(self) -> None:
        self._acquire = ctxlock.Lock().acquire

    def run(self, n: int) -> Sample:
        acq = self._acquire
        start = perf_counter_ns()
        for _ in repeat(None, n):
            acq(deadline=30.0)()
        return Sample(n, perf_counter_ns() - start)


class ThreadingAcquireTimeout(Workload):
    """``a(timeout=30.0); r()`` on a ``threading.Lock``."""

    def __init__(self) -> None:
        lock = threading.Lock()
        self._acquire = lock.acquire
        self._release = lock.release

    def run(self, n: int) -> Sample:
        a, r = self._acquire, self._release
        start = perf_counter_ns()
        for _ in repeat(None, n):
            a(timeout=30.0)
            r()
        return Sample(n, perf_counter_ns() - start)


class WithLoop(Workload):
    """``with lock: pass`` on one lock made once by ``make_lock``."""

    def __init__(self, make_lock: Callable[[], SyncLock]) -> None:
        self._lock = make_lock()

    def run(self, n: int) -> Sample:
        lock = self._lock
        start = perf_counter_ns()
        for _ in repeat(None, n):
            with lock:
                pass
        return Sample(n, perf_counter_ns() - start)


class AsyncWith(AsyncWorkload):
    """``async with lock: pass`` in one task, on one lock made once."""

    def __init__(self, make_lock: Callable[[], AsyncLock]) -> None:
        self._lock = make_lock()
        super().__init__()

    async def _main(self, n: int) -> Sample:
        lock = self._lock
        start = perf_counter_ns()
        for _ in repeat(None, n):
            async with lock:
                pass
        return Sample(n, perf_counter_ns() - start)
