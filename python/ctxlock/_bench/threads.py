"""Threads contending for one lock: the ``contended_*`` rows and ``drain_100``.

Each workload's timed loop is written out whole, though several differ from another in
one statement only (the controls): a call or a branch shared between them would be timed
too, and would not cost the same in each.
"""

from __future__ import annotations

import abc
import threading
import time
from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import repeat
from time import perf_counter_ns

import ctxlock
from ctxlock._bench.peers import SyncLock
from ctxlock._bench.workers import Workers, switches, wait_until
from ctxlock._bench.workload import Sample, Workload, expect

__all__ = [
    "DRAIN_SETTLE_S",
    "Contended",
    "CtxlockContendedAcquire",
    "Drain",
    "NoLockContendedAcquire",
    "Progress",
    "ThreadingContendedAcquire",
    "ThreadingKeptAcquire",
    "ThreadingShapedAcquire",
    "progress",
]

#: How long ``drain_100`` lets its blocked threads settle before the release, in seconds.
DRAIN_SETTLE_S = 0.02


@dataclass(frozen=True)
class Progress:
    """How the threads of one contended run shared the lock.

    The *window* runs from the moment the last thread started waiting for its first
    acquire until the first thread finished its ``n``: the time when all of them were
    competing. ``shares``: each thread's share of the acquires in the window (fair is
    ``1 / threads``); empty when the window is (under a GIL a thread can run its whole
    ``n`` before another one first gets the interpreter: the threads then ran one after
    another, and no lock was competed for). ``starved``: threads that were already waiting
    for the lock before every other thread had finished, yet acquired it for none of their
    operations until then (they only got it once they were alone).
    """

    shares: tuple[float, ...]
    starved: int


def progress(
    attempts: Sequence[Sequence[int]], acquired: Sequence[Sequence[int]], ends: Sequence[int]
) -> Progress:
    """Thread i's acquire attempts and acquires (times, ascending) and when it finished."""
    opened = max(times[0] for times in attempts)
    closed = min(ends)
    in_window = [
        bisect_right(times, closed) - bisect_right(times, opened) if opened < closed else 0
        for times in acquired
    ]
    total = sum(in_window)
    shares = tuple(count / total for count in in_window) if total else ()
    starved = 0
    for i, times in enumerate(acquired):
        others = [end for j, end in enumerate(ends) if j != i]
        if not others:
            continue
        others_done = max(others)
        if attempts[i][0] < others_done and bisect_right(times, others_done) == 0:
            starved += 1
    return Progress(shares, starved)


class _ContendedBase(Workload):
    """``threads`` threads each increment a shared counter ``n`` times under a lock.

    One operation is one increment. Each thread notes the time before and after each
    acquire (outside the critical section, in lists, so the loop costs the same for every
    lock); the longest single wait and the threads' ``Progress`` come from those after the
    run. The count is checked (a lock that lets two threads in loses increments) unless
    ``excludes=False``: the no-lock control, which loses them wherever threads run in
    parallel (a free-threaded interpreter) and may lose them under a GIL too.
    """

    def __init__(self, threads: int, excludes: bool) -> None:
        self._threads = threads
        self._excludes = excludes

    @abc.abstractmethod
    def _loop(
        self,
        n: int,
        counter: list[int],
        before: Callable[[int], None],
        after: Callable[[int], None],
    ) -> None:
        """``n`` increments of ``counter[0]`` under the lock, noting each acquire's times."""

    def run(self, n: int) -> Sample:
        counter = [0]
        runs: list[tuple[list[int], list[int], int]] = []
        gate = threading.Event()

        def worker() -> None:
            befores: list[int] = []
            afters: list[int] = []
            gate.wait()
            self._loop(n, counter, befores.append, afters.append)
            runs.append((befores, afters, perf_counter_ns()))

        workers = Workers(worker, self._threads)
        before = switches()
        start = perf_counter_ns()
        gate.set()
        workers.join()
        switched = switches() - before
        total = n * self._threads
        if self._excludes:
            expect(counter[0] == total, f"counted {counter[0]} increments, expected {total}")
        longest = max(
            (max(map(int.__sub__, afters, befores), default=0) for befores, afters, _ in runs),
            default=0,
        )
        shared = progress(
            [befores for befores, _, _ in runs],
            [afters for _, afters, _ in runs],
            [end for _, _, end in runs],
        )
        return Sample(
            total,
            max(end for _, _, end in runs) - start,
            longest,
            switched,
            shares=shared.shares,
            starved=shared.starved,
        )


class Contended(_ContendedBase):
    """``with lock: counter[0] += 1`` on one lock made once by ``make_lock``."""

    def __init__(
        self, make_lock: Callable[[], SyncLock], threads: int = 4, *, excludes: bool = True
    ) -> None:
        super().__init__(threads, excludes)
        self._lock = make_lock()

    def _loop(
        self,
        n: int,
        counter: list[int],
        before: Callable[[int], None],
        after: Callable[[int], None],
    ) -> None:
        lock, clock = self._lock, perf_counter_ns
        for _ in repeat(None, n):
            b = clock()
            with lock:
                a = clock()
                counter[0] += 1
            before(b)
            after(a)


class CtxlockContendedAcquire(_ContendedBase):
    """``u = acq(); counter[0] += 1; u()`` with ``acq = Lock().acquire`` pre-bound."""

    def __init__(self, threads: int = 4) -> None:
        super().__init__(threads, True)
        self._acquire = ctxlock.Lock().acquire

    def _loop(
        self,
        n: int,
        counter: list[int],
        before: Callable[[int], None],
        after: Callable[[int], None],
    ) -> None:
        acq, clock = self._acquire, perf_counter_ns
        for _ in repeat(None, n):
            b = clock()
            u = acq()
            a = clock()
            counter[0] += 1
            u()
            before(b)
            after(a)


class ThreadingContendedAcquire(_ContendedBase):
    """``acquire(); counter[0] += 1; release()`` on a ``threading.Lock``, both pre-bound."""

    def __init__(self, threads: int = 4) -> None:
        super().__init__(threads, True)
        lock = threading.Lock()
        self._lock = lock
        self._acquire = lock.acquire
        self._release = lock.release

    def _loop(
        self,
        n: int,
        counter: list[int],
        before: Callable[[int], None],
        after: Callable[[int], None],
    ) -> None:
        acq, rel, clock = self._acquire, self._release, perf_counter_ns
        for _ in repeat(None, n):
            b = clock()
            acq()
            a = clock()
            counter[0] += 1
            rel()
            before(b)
            after(a)


class ThreadingShapedAcquire(ThreadingContendedAcquire):
    """The same ``threading.Lock`` loop in the shape of ctxlock's: the release is called
    through a local set on every operation, ``u = release; acquire(); …; u()``, as
    ``u = acq(); …; u()`` does. A control for the interpreter's part of the comparison
    (BENCHMARKS.md, "Three interpreters"). The bound methods are made by the looping
    thread itself, as ctxlock's ``Unlock`` is: on a free-threaded build, storing a
    reference to an object another thread made is an atomic count, which would charge the
    control for more than the shape."""

    def _loop(
        self,
        n: int,
        counter: list[int],
        before: Callable[[int], None],
        after: Callable[[int], None],
    ) -> None:
        acq, rel, clock = self._lock.acquire, self._lock.release, perf_counter_ns
        for _ in repeat(None, n):
            b = clock()
            u = rel
            acq()
            a = clock()
            counter[0] += 1
            u()
            before(b)
            after(a)


class ThreadingKeptAcquire(ThreadingContendedAcquire):
    """The same ``threading.Lock`` loop taking a reference to its lock on every hold,
    ``acquire(); kept = lock; …; release()``, as ctxlock's ``Unlock`` does: a control for
    what that reference costs (on a free-threaded build, from a thread that did not make
    the lock, it is an atomic count; see ``ThreadingAcquireKept``)."""

    def _loop(
        self,
        n: int,
        counter: list[int],
        before: Callable[[int], None],
        after: Callable[[int], None],
    ) -> None:
        lock, acq, rel, clock = self._lock, self._acquire, self._release, perf_counter_ns
        for _ in repeat(None, n):
            b = clock()
            acq()
            _kept = lock
            a = clock()
            counter[0] += 1
            rel()
            before(b)
            after(a)


def _nothing() -> None:
    return None


class NoLockContendedAcquire(_ContendedBase):
    """The same loop with an ``acquire`` that takes nothing: the no-lock control."""

    def __init__(self, threads: int = 4) -> None:
        super().__init__(threads, False)

    def _loop(
        self,
        n: int,
        counter: list[int],
        before: Callable[[int], None],
        after: Callable[[int], None],
    ) -> None:
        clock = perf_counter_ns
        for _ in repeat(None, n):
            b = clock()
            u = _nothing
            a = clock()
            counter[0] += 1
            u()
            before(b)
            after(a)


class Drain(Workload):
    """``n`` threads block on a held lock; one release lets all of them through once.

    One operation is one thread passing (acquire + release); the time runs from the
    release until the last thread has released. Each waiter also notes when its own
    acquire returned: the sample's ``waits`` are those times from the release.
    """

    def __init__(self, make_lock: Callable[[], SyncLock]) -> None:
        make_lock()  # fail here, not in run(), if the peer is missing
        self._make_lock = make_lock

    def run(self, n: int) -> Sample:
        lock = self._make_lock()
        ready: list[None] = []
        acquired: list[int] = []
        ends: list[int] = []

        def waiter() -> None:
            ready.append(None)
            with lock:
                acquired.append(perf_counter_ns())
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
        waits = tuple(t - start for t in acquired)
        return Sample(n, max(ends) - start, waits=waits)
