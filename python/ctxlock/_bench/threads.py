"""Threads contending for one lock: ``contended_4`` and ``drain_100``."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from itertools import repeat
from time import perf_counter_ns

from ctxlock._bench.peers import SyncLock
from ctxlock._bench.workers import Workers, switches, wait_until
from ctxlock._bench.workload import Sample, Workload, expect

__all__ = ["DRAIN_SETTLE_S", "Contended", "Drain"]

#: How long ``drain_100`` lets its blocked threads settle before the release, in seconds.
DRAIN_SETTLE_S = 0.02


class Contended(Workload):
    """``threads`` threads each increment a shared counter ``n`` times under ``with lock:``.

    One operation is one increment; each acquire is timed and the longest is kept. The
    count is checked (a lock that lets two threads in loses increments) unless
    ``excludes=False``: the no-lock control, which loses them wherever threads run in
    parallel (a free-threaded interpreter) and may lose them under a GIL too.
    """

    def __init__(
        self, make_lock: Callable[[], SyncLock], threads: int = 4, *, excludes: bool = True
    ) -> None:
        self._lock = make_lock()
        self._threads = threads
        self._excludes = excludes

    def run(self, n: int) -> Sample:
        lock, counter = self._lock, [0]
        worst: list[int] = []
        ends: list[int] = []
        gate = threading.Event()

        def worker() -> None:
            gate.wait()
            clock, longest = perf_counter_ns, 0
            for _ in repeat(None, n):
                before = clock()
                with lock:
                    after = clock()
                    counter[0] += 1
                longest = max(longest, after - before)
            worst.append(longest)
            ends.append(clock())

        workers = Workers(worker, self._threads)
        before = switches()
        start = perf_counter_ns()
        gate.set()
        workers.join()
        switched = switches() - before
        total = n * self._threads
        if self._excludes:
            expect(counter[0] == total, f"counted {counter[0]} increments, expected {total}")
        return Sample(total, max(ends) - start, max(worst), switched)


class Drain(Workload):
    """``n`` threads block on a held lock; one release lets all of them through once.

    One operation is one thread passing (acquire + release); the time runs from the
    release until the last thread has released.
    """

    def __init__(self, make_lock: Callable[[], SyncLock]) -> None:
        make_lock()  # fail here, not in run(), if the peer is missing
        self._make_lock = make_lock

    def run(self, n: int) -> Sample:
        lock = self._make_lock()
        ready: list[None] = []
        ends: list[int] = []

        def waiter() -> None:
            ready.append(None)
            with lock:
                pass
            ends.append(perf_counter_ns())

        lock.__enter__()
        held = True
        try:
            workers = Workers(waiter, n)
            wait_until(lambda: len(ready) == n)
            time.sleep(DRAIN_SETTLE_S)  # let the last ones get from append() into acquire
            start = perf_counter_ns()
            held = False
            lock.__exit__(None, None, None)
            workers.join()
        finally:
            if held:
                lock.__exit__(None, None, None)
        expect(len(ends) == n, f"{len(ends)} of {n} threads got through")
        return Sample(n, max(ends) - start)
