"""The workloads and rows of ``python -m ctxlock bench`` (and of ``benches/bench_locks.py``).

Both the command line and the pytest-benchmark suite import the workloads from here, so the
two can never measure different things.

A *workload* (``Workload.run(n)``) performs ``n`` operations of one scenario with one lock
implementation and returns a ``Sample`` (operations, elapsed ns, longest single wait).
``SCENARIOS`` maps each scenario to its implementations ("peers"): ``ctxlock``,
``threading``, ``asyncio``, ``aiologic``, ``readerwriterlock``.

A *row* compares ctxlock with an anchor and checks the ratio against a target. Every ratio
row runs ctxlock and its anchor in this process, interleaved (ours first in even repeats,
the anchor first in odd ones), with the garbage collector collected and then disabled during
each sample; it reports the median over the repeats and ``ratio = ctxlock / anchor`` (cost
over cost, so lower is better). The rows:

``acquire_unlock``
    ``u = acq(); u()`` with ``acq = lock.acquire`` pre-bound, against ``threading.Lock``'s
    pre-bound ``acquire()`` / ``release()``. Target <= 1.0.
``with``
    ``with lock: pass`` on one reused lock, against the same with one ``threading.Lock``.
    Target <= 0.8.
``acquire_deadline``
    ``acq(deadline=30.0)()`` against ``tl.acquire(timeout=30.0); tl.release()``.
    Target <= 0.5.
``shared_with``
    ``with rw.shared: pass`` (the view bound once) against ``with threading.Lock()``.
    Target <= 1.5.
``shared_vs_rwlock``
    The same shared hold against a reader of ``readerwriterlock.rwlock.RWLockFair``
    (skipped if readerwriterlock is not installed). Target <= 0.15.
``contended_4``
    Four threads each increment a counter ``n`` times under ``with lock:``; ns per
    increment overall. Each acquire is also timed: the row also fails if ctxlock's longest
    single wait (median over the repeats of each run's worst) is longer than
    ``threading.Lock``'s. Target <= 1.0. The note adds two things that explain the waits:
    the process's thread switches per 1,000 increments for both locks, and a control run of
    the same loop with no lock at all (``NoLock``), whose longest "wait" is the GIL's.
``drain_100``
    100 threads block on a held lock; the time from the one release until every one of
    them has acquired and released once, per thread. Target <= 1.0.
``async_with``
    ``async with lock: pass`` in one task, uncontended, against ``asyncio.Lock``.
    Target <= 0.6.
``tasks_100``
    100 tasks each do ``async with lock: await asyncio.sleep(0)`` for a number of rounds;
    ns per hold, against ``asyncio.Lock``. Target <= 1.0.
``mixed_2t2t``
    Two threads (``with lock:``) and two tasks on one loop (``async with lock:``) share one
    lock and increment a counter; ns per increment against ``aiologic.Lock`` used the same
    way (skipped if aiologic is not installed). The ratio is ctxlock's cost over aiologic's;
    the target <= 0.2 means at least five times aiologic's throughput.
``memory_100k``
    RSS growth per lock for 100,000 ``Lock()`` against 100,000 ``threading.Lock()``, each
    side in a fresh interpreter; the tracemalloc peak is reported too (it does not see what
    the Rust core allocates itself, so the ratio uses RSS). Target <= 2.0.
``tasks_scaling``
    100,000 tasks queue on one held lock, then all pass through it once (``async with``);
    the time for that over the time for 10,000 tasks. Linear is 10; target <= 12.
``churn_rss``
    RSS growth over many acquire / timeout / cancel cycles (200,000 by default,
    ``--full-churn`` for 1,000,000). The ratio column is the growth in MB; target <= 2.

In quick mode every row runs with tiny counts: the numbers mean nothing, but every code path
runs and every workload checks its own invariants (counts, mutual exclusion).

A row whose peer is not installed, or that needs a ctxlock feature this build lacks
(``AttributeError`` / ``NotImplementedError``), is skipped with a note; any other exception
marks the row as an error and the run goes on.
"""

from __future__ import annotations

import abc
import asyncio
import functools
import gc
import json
import os
import statistics
import subprocess
import sys
import threading
import time
import traceback
import tracemalloc
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from itertools import repeat
from pathlib import Path
from time import perf_counter_ns
from types import TracebackType
from typing import Literal, Protocol

import ctxlock

__all__ = [
    "PEER_LABELS",
    "ROWS",
    "ROW_KEYS",
    "SCENARIOS",
    "Config",
    "PeerMissing",
    "Row",
    "RowResult",
    "Sample",
    "Workload",
    "format_value",
    "run_row",
]

Op = Literal["<=", ">="]
Status = Literal["ok", "miss", "skip", "error"]

#: Longest a single workload run may take before it counts as hung, in seconds.
RUN_TIMEOUT_S = 120.0
#: How long ``drain_100`` lets its blocked threads settle before the release, in seconds.
DRAIN_SETTLE_S = 0.02
#: One churn cycle in this many also really queues and times out (slow: a timer fires).
CHURN_WAIT_EVERY = 100
#: One async (task cancel) churn cycle per this many sync cycles.
CHURN_ASYNC_EVERY = 8
_MAX_MICRO_OPS = 5_000_000
_MB = 1_000_000


# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class RowResult:
    """One row of the report.

    ``ours_ns`` and ``anchor_ns`` are in ``unit`` (ns per operation for most rows; see
    ``format_value``); ``ratio`` is what is compared with ``target`` through ``op``.
    ``ok`` is None when the row was skipped or failed.
    """

    key: str
    description: str
    ours_ns: float | None
    anchor_ns: float | None
    ratio: float | None
    target: float
    op: Op
    ok: bool | None
    note: str = ""
    unit: str = "ns/op"
    ratio_unit: str = ""
    anchor_label: str = ""
    extra: Mapping[str, float] = field(default_factory=dict)
    error: bool = False

    @property
    def status(self) -> Status:
        """``ok`` or ``miss`` (target met or not), ``skip`` or ``error``."""
        if self.error:
            return "error"
        if self.ok is None:
            return "skip"
        return "ok" if self.ok else "miss"

    def to_json(self) -> dict[str, object]:
        """The fields as a JSON-ready dict, with ``status`` added."""
        data = asdict(self)
        data["extra"] = dict(self.extra)
        data["status"] = self.status
        return data


@dataclass(frozen=True)
class Config:
    """Iteration counts of one run: ``Config.full()`` or ``Config.quick()``."""

    quick: bool = False
    repeat: int = 5
    #: Target length of one micro-benchmark sample; the op count is calibrated to it.
    sample_ns: int = 25_000_000
    #: Fixed op count of the micro rows; None calibrates to ``sample_ns``.
    micro_ops: int | None = None
    contended_ops: int = 20_000
    drain_threads: int = 100
    tasks_rounds: int = 50
    mixed_ops: int = 5_000
    memory_locks: int = 100_000
    memory_repeat: int = 3
    scaling_small: int = 10_000
    scaling_large: int = 100_000
    scaling_repeat: int = 3
    churn_cycles: int = 200_000

    @classmethod
    def full(cls, repeat: int | None = None, *, full_churn: bool = False) -> Config:
        """Counts for a run of about a minute or less on two cores."""
        return cls(
            repeat=repeat or 5,
            churn_cycles=1_000_000 if full_churn else 200_000,
        )

    @classmethod
    def quick_mode(cls, repeat: int | None = None, *, full_churn: bool = False) -> Config:
        """Tiny counts: every code path runs once or twice; the numbers mean nothing."""
        return cls(
            quick=True,
            repeat=repeat or 2,
            micro_ops=300,
            contended_ops=300,
            tasks_rounds=3,
            mixed_ops=200,
            memory_locks=20_000,
            memory_repeat=1,
            scaling_small=100,
            scaling_large=1_000,
            scaling_repeat=1,
            churn_cycles=1_000_000 if full_churn else 2_000,
        )


def format_value(value: float | None, unit: str) -> str:
    """``value`` in ``unit`` ("ns", "ns/op", "B/lock", "MB"...) scaled for reading."""
    if value is None:
        return "-"
    base, _, per = unit.partition("/")
    suffix = f"/{per}" if per else ""
    scales: tuple[tuple[float, str], ...]
    if base == "ns":
        scales = ((1e9, "s"), (1e6, "ms"), (1e3, "us"), (1.0, "ns"))
    elif base == "B":
        scales = ((2.0**30, "GiB"), (2.0**20, "MiB"), (2.0**10, "KiB"), (1.0, "B"))
    else:
        return f"{value:.3g} {base}{suffix}"
    for factor, name in scales:
        if abs(value) >= factor or factor == 1.0:
            return f"{value / factor:.3g} {name}{suffix}"
    raise AssertionError("unreachable")


# --------------------------------------------------------------------------- locks


class SyncLock(Protocol):
    """Anything usable as ``with lock:``."""

    def __enter__(self) -> object: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
        /,
    ) -> object: ...


class AsyncLock(Protocol):
    """Anything usable as ``async with lock:``."""

    def __aenter__(self) -> Awaitable[object]: ...
    def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
        /,
    ) -> Awaitable[object]: ...


class DualLock(SyncLock, AsyncLock, Protocol):
    """Usable both as ``with lock:`` (threads) and ``async with lock:`` (tasks)."""


class PeerMissing(Exception):
    """An optional peer library is not installed; its rows and benchmarks are skipped."""

    def __init__(self, package: str) -> None:
        super().__init__(
            f"skipped: {package} is not installed (pip install 'ctxlock[bench]' adds it)"
        )


PEER_LABELS: Mapping[str, str] = {
    "ctxlock": "ctxlock",
    "threading": "threading.Lock",
    "asyncio": "asyncio.Lock",
    "aiologic": "aiologic.Lock",
    "readerwriterlock": "RWLockFair reader",
}


def threading_lock() -> SyncLock:
    return threading.Lock()


class NoLock:
    """A context manager that does nothing: the control for the longest-wait comparison.

    Four threads running the ``contended_4`` loop with it still see single "waits" of
    several milliseconds: a thread that the interpreter switches away from inside the timed
    window waits for the GIL, not for any lock. That is the floor a lock can reach without
    forcing thread switches of its own.
    """

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def no_lock() -> SyncLock:
    return NoLock()


def asyncio_lock() -> AsyncLock:
    return asyncio.Lock()


def ctxlock_lock() -> DualLock:
    return ctxlock.Lock()


def ctxlock_shared() -> DualLock:
    """The shared view of a new ``SharableLock`` (the view keeps its lock alive)."""
    return ctxlock.SharableLock().shared


def aiologic_lock() -> DualLock:
    try:
        import aiologic
    except ImportError as exc:
        raise PeerMissing("aiologic") from exc
    return aiologic.Lock()


def rwlock_reader() -> SyncLock:
    try:
        from readerwriterlock import rwlock
    except ImportError as exc:
        raise PeerMissing("readerwriterlock") from exc
    return rwlock.RWLockFair().gen_rlock()


def _require_async(lock: object) -> None:
    """Raise NotImplementedError if ``lock`` has no ``async with`` support in this build."""
    for name in ("__aenter__", "__aexit__"):
        if not hasattr(type(lock), name):
            raise NotImplementedError(f"{type(lock).__name__} has no {name} in this build")


# --------------------------------------------------------------------------- workloads


@dataclass(frozen=True)
class Sample:
    """What one workload run measured."""

    ops: int
    elapsed_ns: int
    #: Longest single acquire, for the workloads that time each one (else 0).
    max_wait_ns: int = 0
    #: Thread switches (voluntary and forced) in the process during the run, for the
    #: workloads that count them (else 0; 0 also where ``resource`` is missing).
    switches: int = 0

    @property
    def per_op_ns(self) -> float:
        return self.elapsed_ns / self.ops


class BenchError(RuntimeError):
    """A workload saw a broken invariant (a lost count, two holders) or hung."""


def _expect(condition: bool, what: str) -> None:
    if not condition:
        raise BenchError(what)


class Workload(abc.ABC):
    """One scenario with one lock implementation; ``run(n)`` does ``n`` operations.

    What an "operation" is depends on the scenario (see each class). A workload is a
    context manager: ``close()`` releases what it owns (an event loop).
    """

    @abc.abstractmethod
    def run(self, n: int) -> Sample:
        """Perform ``n`` operations and return how long they took."""

    def close(self) -> None:
        """Release owned resources; the default owns none."""
        return None

    def __enter__(self) -> Workload:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


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
        self._acquire = lock.acquire
        self._release = lock.release

    def run(self, n: int) -> Sample:
        a, r = self._acquire, self._release
        start = perf_counter_ns()
        for _ in repeat(None, n):
            a()
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


def _switches() -> int:
    """Context switches of this process so far (0 where the platform does not say)."""
    try:
        import resource
    except ImportError:
        return 0
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_nvcsw + usage.ru_nivcsw


class _Workers:
    """Daemon threads running one function; ``join`` re-raises the first exception."""

    def __init__(self, target: Callable[[], None], count: int) -> None:
        self._errors: list[BaseException] = []
        self._threads = [
            threading.Thread(target=self._guard, args=(target,), daemon=True) for _ in range(count)
        ]
        for thread in self._threads:
            thread.start()

    def _guard(self, target: Callable[[], None]) -> None:
        try:
            target()
        except BaseException as exc:
            self._errors.append(exc)

    def join(self, timeout: float = RUN_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        if self._errors:
            raise self._errors[0]
        _expect(
            not any(thread.is_alive() for thread in self._threads),
            f"worker threads still running after {timeout:g} s (a hang?)",
        )


def _wait_until(predicate: Callable[[], bool], timeout: float = RUN_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        _expect(time.monotonic() < deadline, f"gave up waiting after {timeout:g} s")
        time.sleep(0.0005)


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

        workers = _Workers(worker, self._threads)
        switches = _switches()
        start = perf_counter_ns()
        gate.set()
        workers.join()
        switches = _switches() - switches
        total = n * self._threads
        if self._excludes:
            _expect(counter[0] == total, f"counted {counter[0]} increments, expected {total}")
        return Sample(total, max(ends) - start, max(worst), switches)


class Drain(Workload):
    """``n`` threads block on a held lock; one release lets all of them through once.

    One operation is one thread passing (acquire + release); the time runs from the
    release until the last thread has released.
    """

    def __init__(self, make_lock: Callable[[], SyncLock]) -> None:
        make_lock()  # fail here, not in run(), if the lock is not to be had
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
            workers = _Workers(waiter, n)
            _wait_until(lambda: len(ready) == n)
            time.sleep(DRAIN_SETTLE_S)  # let the last ones get from append() into acquire
            start = perf_counter_ns()
            held = False
            lock.__exit__(None, None, None)
            workers.join()
        finally:
            if held:
                lock.__exit__(None, None, None)
        _expect(len(ends) == n, f"{len(ends)} of {n} threads got through")
        return Sample(n, max(ends) - start)


class _AsyncWorkload(Workload):
    """A workload timed inside a coroutine on an event loop it owns."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()

    def run(self, n: int) -> Sample:
        return self._loop.run_until_complete(asyncio.wait_for(self._main(n), RUN_TIMEOUT_S))

    @abc.abstractmethod
    async def _main(self, n: int) -> Sample:
        """The timed part, on this workload's loop."""

    def close(self) -> None:
        self._loop.close()


class AsyncWith(_AsyncWorkload):
    """``async with lock: pass`` in one task, on one lock made once."""

    def __init__(self, make_lock: Callable[[], AsyncLock]) -> None:
        lock = make_lock()
        _require_async(lock)
        super().__init__()
        self._lock = lock

    async def _main(self, n: int) -> Sample:
        lock = self._lock
        start = perf_counter_ns()
        for _ in repeat(None, n):
            async with lock:
                pass
        return Sample(n, perf_counter_ns() - start)


class Tasks(_AsyncWorkload):
    """``tasks`` tasks each do ``async with lock: await asyncio.sleep(0)`` ``n`` times.

    One operation is one hold; a second holder at any moment is an error.
    """

    def __init__(self, make_lock: Callable[[], AsyncLock], tasks: int = 100) -> None:
        _require_async(make_lock())
        super().__init__()
        self._make_lock = make_lock
        self._tasks = tasks

    async def _main(self, n: int) -> Sample:
        lock, holding = self._make_lock(), [False]

        async def worker() -> None:
            for _ in repeat(None, n):
                async with lock:
                    _expect(not holding[0], "two tasks held the lock at once")
                    holding[0] = True
                    await asyncio.sleep(0)
                    holding[0] = False

        start = perf_counter_ns()
        await asyncio.gather(*(worker() for _ in range(self._tasks)))
        return Sample(n * self._tasks, perf_counter_ns() - start)


class TasksThrough(_AsyncWorkload):
    """``n`` tasks queue on one held lock, then each passes through once (``async with``).

    The time runs from creating the first task to the last one's release.
    """

    def __init__(self, make_lock: Callable[[], AsyncLock]) -> None:
        _require_async(make_lock())
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
        _expect(passed[0] == n, f"{passed[0]} of {n} tasks got through")
        return Sample(n, elapsed)


class Mixed(_AsyncWorkload):
    """Two threads (``with``) and two tasks (``async with``) increment one counter ``n`` times.

    One operation is one increment; the time runs until the last worker finishes.
    """

    def __init__(self, make_lock: Callable[[], DualLock]) -> None:
        _require_async(make_lock())
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

        workers = _Workers(thread_worker, 2)
        start = perf_counter_ns()
        gate.set()
        await asyncio.gather(task_worker(), task_worker())
        workers.join()  # the tasks are done; nothing else needs this loop
        _expect(counter[0] == 4 * n, f"counted {counter[0]} increments, expected {4 * n}")
        return Sample(4 * n, max(ends) - start)


WorkloadFactory = Callable[[], Workload]

#: scenario -> peer -> workload factory. ``ctxlock`` is in every scenario.
SCENARIOS: Mapping[str, Mapping[str, WorkloadFactory]] = {
    "acquire_unlock": {
        "ctxlock": CtxlockAcquireUnlock,
        "threading": ThreadingAcquireRelease,
    },
    "with": {
        "ctxlock": functools.partial(WithLoop, ctxlock_lock),
        "threading": functools.partial(WithLoop, threading_lock),
        "aiologic": functools.partial(WithLoop, aiologic_lock),
    },
    "acquire_deadline": {
        "ctxlock": CtxlockAcquireDeadline,
        "threading": ThreadingAcquireTimeout,
    },
    "shared_with": {
        "ctxlock": functools.partial(WithLoop, ctxlock_shared),
        "threading": functools.partial(WithLoop, threading_lock),
        "readerwriterlock": functools.partial(WithLoop, rwlock_reader),
    },
    "contended_4": {
        "ctxlock": functools.partial(Contended, ctxlock_lock),
        "threading": functools.partial(Contended, threading_lock),
        "aiologic": functools.partial(Contended, aiologic_lock),
        "nolock": functools.partial(Contended, no_lock, excludes=False),
    },
    "drain_100": {
        "ctxlock": functools.partial(Drain, ctxlock_lock),
        "threading": functools.partial(Drain, threading_lock),
        "aiologic": functools.partial(Drain, aiologic_lock),
    },
    "async_with": {
        "ctxlock": functools.partial(AsyncWith, ctxlock_lock),
        "asyncio": functools.partial(AsyncWith, asyncio_lock),
        "aiologic": functools.partial(AsyncWith, aiologic_lock),
    },
    "tasks_100": {
        "ctxlock": functools.partial(Tasks, ctxlock_lock),
        "asyncio": functools.partial(Tasks, asyncio_lock),
        "aiologic": functools.partial(Tasks, aiologic_lock),
    },
    "tasks_through": {
        "ctxlock": functools.partial(TasksThrough, ctxlock_lock),
        "asyncio": functools.partial(TasksThrough, asyncio_lock),
        "aiologic": functools.partial(TasksThrough, aiologic_lock),
    },
    "mixed_2t2t": {
        "ctxlock": functools.partial(Mixed, ctxlock_lock),
        "aiologic": functools.partial(Mixed, aiologic_lock),
    },
}


# --------------------------------------------------------------------------- rows

Measure = Callable[["Row", Config], RowResult]


@dataclass(frozen=True)
class Row:
    """A row of the report: what it measures, its target, and how to measure it."""

    key: str
    description: str
    anchor_label: str
    target: float
    measure: Measure
    op: Op = "<="
    unit: str = "ns/op"
    ratio_unit: str = ""

    def result(
        self,
        ours: float | None,
        anchor: float | None,
        ratio: float,
        *,
        note: str = "",
        extra: Mapping[str, float] | None = None,
        also_ok: bool = True,
    ) -> RowResult:
        """A measured result; ``ok`` is the target check and ``also_ok``."""
        met = ratio <= self.target if self.op == "<=" else ratio >= self.target
        return self._make(ours, anchor, ratio, met and also_ok, note, extra or {}, False)

    def skipped(self, note: str) -> RowResult:
        return self._make(None, None, None, None, note, {}, False)

    def failed(self, note: str) -> RowResult:
        return self._make(None, None, None, None, note, {}, True)

    def _make(
        self,
        ours: float | None,
        anchor: float | None,
        ratio: float | None,
        ok: bool | None,
        note: str,
        extra: Mapping[str, float],
        error: bool,
    ) -> RowResult:
        return RowResult(
            key=self.key,
            description=self.description,
            ours_ns=ours,
            anchor_ns=anchor,
            ratio=ratio,
            target=self.target,
            op=self.op,
            ok=ok,
            note=note,
            unit=self.unit,
            ratio_unit=self.ratio_unit,
            anchor_label=self.anchor_label,
            extra=extra,
            error=error,
        )


def _timed(workload: Workload, n: int) -> Sample:
    """``workload.run(n)`` after a collection, with the garbage collector off."""
    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    try:
        return workload.run(n)
    finally:
        if enabled:
            gc.enable()


def _calibrate(workloads: Sequence[Workload], sample_ns: int) -> int:
    """An op count making the slowest workload's run last about ``sample_ns``.

    The probe runs double as warm-up.
    """
    probe = 2_000
    per_op = max(_timed(w, probe).per_op_ns for w in workloads)
    return max(probe, min(_MAX_MICRO_OPS, int(sample_ns / max(per_op, 1.0))))


def _interleave(
    ours: Workload, theirs: Workload, n: int, repeat_count: int
) -> tuple[list[Sample], list[Sample]]:
    """``repeat_count`` samples of each, alternating which one goes first."""
    got_ours: list[Sample] = []
    got_theirs: list[Sample] = []
    for i in range(repeat_count):
        if i % 2 == 0:
            got_ours.append(_timed(ours, n))
            got_theirs.append(_timed(theirs, n))
        else:
            got_theirs.append(_timed(theirs, n))
            got_ours.append(_timed(ours, n))
    return got_ours, got_theirs


def _median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def _pair(
    scenario: str,
    anchor: str,
    ops: Callable[[Config], int | None],
    *,
    compare_wait: bool = False,
) -> Measure:
    """A row measuring ``scenario`` with ctxlock against ``anchor``, ``ops(cfg)`` ops a run.

    ``ops`` returning None calibrates the count. With ``compare_wait`` the longest single
    wait (the median over the repeats of each run's worst) must not exceed the anchor's.
    """

    def measure(row: Row, cfg: Config) -> RowResult:
        peers = SCENARIOS[scenario]
        with peers[anchor]() as theirs, peers["ctxlock"]() as ours:
            n = ops(cfg)
            if n is None:
                n = _calibrate((ours, theirs), cfg.sample_ns)
            ours_samples, their_samples = _interleave(ours, theirs, n, cfg.repeat)
        ours_ns = _median([s.per_op_ns for s in ours_samples])
        their_ns = _median([s.per_op_ns for s in their_samples])
        if not compare_wait:
            return row.result(ours_ns, their_ns, ours_ns / their_ns)
        our_wait = _median([s.max_wait_ns for s in ours_samples])
        their_wait = _median([s.max_wait_ns for s in their_samples])
        # Thread switches per 1,000 operations: what a convoy costs (see BENCHMARKS.md).
        our_switches = _median([1000 * s.switches / s.ops for s in ours_samples])
        their_switches = _median([1000 * s.switches / s.ops for s in their_samples])
        # The control: the same loop with no lock at all (the GIL's own longest waits).
        with peers["nolock"]() as control:
            control_wait = _median([_timed(control, n).max_wait_ns for _ in range(cfg.repeat)])
        note = (
            f"longest single wait: ctxlock {format_value(our_wait, 'ns')}, "
            f"{PEER_LABELS[anchor]} {format_value(their_wait, 'ns')} (must not be longer); "
            f"control with no lock at all {format_value(control_wait, 'ns')}; "
            f"thread switches per 1,000 ops: ctxlock {our_switches:.3g}, "
            f"{PEER_LABELS[anchor]} {their_switches:.3g}"
        )
        extra = {
            "ours_longest_wait_ns": our_wait,
            "anchor_longest_wait_ns": their_wait,
            "no_lock_longest_wait_ns": control_wait,
            "ours_switches_per_1000_ops": our_switches,
            "anchor_switches_per_1000_ops": their_switches,
        }
        ratio = ours_ns / their_ns
        return row.result(
            ours_ns, their_ns, ratio, note=note, extra=extra, also_ok=our_wait <= their_wait
        )

    return measure


# ---- memory_100k


def _rss_bytes() -> int | None:
    """This process's resident set size, or its peak where only that is known."""
    try:
        with open("/proc/self/statm") as statm:
            pages = int(statm.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        pass
    try:
        import resource
    except ImportError:
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


_MEMORY_KINDS: Mapping[str, Callable[[], object]] = {
    "ctxlock": ctxlock.Lock,
    "threading": threading.Lock,
}

_MEMORY_CHILD = (
    "import sys; from ctxlock._bench import _memory_child; "
    "_memory_child(sys.argv[1], int(sys.argv[2]))"
)


def _memory_child(kind: str, n: int) -> None:
    """In a fresh interpreter: print RSS growth and tracemalloc peak for ``n`` locks."""
    make = _MEMORY_KINDS[kind]
    warm = [make() for _ in range(1_000)]
    del warm
    gc.collect()
    before = _rss_bytes()
    locks = [make() for _ in range(n)]
    after = _rss_bytes()
    del locks
    gc.collect()
    tracemalloc.start()
    locks = [make() for _ in range(n)]
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del locks
    rss = None if before is None or after is None else after - before
    print(json.dumps({"rss": rss, "traced": peak}))


def _memory_probe(kind: str, n: int) -> tuple[float, float]:
    """RSS growth and tracemalloc peak per lock of ``n`` locks of ``kind``, in a child."""
    package_root = str(Path(ctxlock.__file__).absolute().parent.parent)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    proc = subprocess.run(
        [sys.executable, "-c", _MEMORY_CHILD, kind, str(n)],
        capture_output=True,
        text=True,
        env=env,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )
    if proc.returncode != 0:
        raise BenchError(f"memory probe of {kind} failed: {proc.stderr.strip()[-400:]}")
    data = json.loads(proc.stdout)
    return float(data["rss"]) / n, float(data["traced"]) / n


def _memory_row(row: Row, cfg: Config) -> RowResult:
    if _rss_bytes() is None:
        return row.skipped("skipped: no way to read the RSS on this platform")
    probes: dict[str, list[tuple[float, float]]] = {"ctxlock": [], "threading": []}
    for i in range(cfg.memory_repeat):
        for kind in ("ctxlock", "threading")[:: 1 if i % 2 == 0 else -1]:
            probes[kind].append(_memory_probe(kind, cfg.memory_locks))
    ours_rss = _median([rss for rss, _ in probes["ctxlock"]])
    their_rss = _median([rss for rss, _ in probes["threading"]])
    ours_traced = _median([traced for _, traced in probes["ctxlock"]])
    their_traced = _median([traced for _, traced in probes["threading"]])
    if their_rss <= 0:
        return row.skipped("skipped: threading.Lock's RSS did not grow (too few locks)")
    note = (
        f"{cfg.memory_locks:,} locks per side, each in a fresh interpreter; "
        f"tracemalloc peak per lock: ctxlock {format_value(ours_traced, 'B')}, "
        f"threading.Lock {format_value(their_traced, 'B')} "
        "(tracemalloc misses what the Rust core allocates, so the ratio uses RSS)"
    )
    extra = {"ours_traced_B_per_lock": ours_traced, "anchor_traced_B_per_lock": their_traced}
    return row.result(ours_rss, their_rss, ours_rss / their_rss, note=note, extra=extra)


# ---- tasks_scaling


def _scaling_times(workload: Workload, small: int, large: int, i: int) -> tuple[int, int]:
    """One timing of ``large`` and of ``small`` tasks, the order alternating with ``i``."""
    if i % 2 == 0:
        large_ns = _timed(workload, large).elapsed_ns
        return large_ns, _timed(workload, small).elapsed_ns
    small_ns = _timed(workload, small).elapsed_ns
    return _timed(workload, large).elapsed_ns, small_ns


def _scaling_row(row: Row, cfg: Config) -> RowResult:
    """ctxlock's large/small time ratio; asyncio.Lock's, run alongside, is the control."""
    small, large = cfg.scaling_small, cfg.scaling_large
    ours: list[tuple[int, int]] = []
    control: list[tuple[int, int]] = []
    peers = SCENARIOS["tasks_through"]
    with peers["ctxlock"]() as ctx_workload, peers["asyncio"]() as asyncio_workload:
        for workload in (ctx_workload, asyncio_workload):
            _timed(workload, min(small, 1_000))  # warm-up
        for i in range(cfg.scaling_repeat):
            ours.append(_scaling_times(ctx_workload, small, large, i))
            control.append(_scaling_times(asyncio_workload, small, large, i + 1))
    large_ns, small_ns = (_median([t[k] for t in ours]) for k in (0, 1))
    control_ratio = _median([t[0] for t in control]) / _median([t[1] for t in control])
    note = (
        f"ctxlock with {large:,} tasks against ctxlock with {small:,}: per task "
        f"{format_value(large_ns / large, 'ns')} and {format_value(small_ns / small, 'ns')}; "
        f"control: asyncio.Lock's ratio on the same workload is {control_ratio:.3g}"
    )
    extra = {"asyncio_lock_ratio": control_ratio}
    return row.result(large_ns, small_ns, large_ns / small_ns, note=note, extra=extra)


# ---- churn_rss


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
            _expect(waiter.cancelled(), "a cancelled acquire_async got the held lock")
            try:
                got = await lock.acquire_async(deadline=0)
            except ctxlock.LockTimeout:
                continue
            got()
            raise BenchError("acquire_async(deadline=0) succeeded on a held lock")
    finally:
        unlock()


def _churn(lock: ctxlock.Lock, loop: asyncio.AbstractEventLoop | None, cycles: int) -> None:
    _churn_sync(lock, cycles)
    if loop is not None:
        loop.run_until_complete(_churn_async(lock, cycles // CHURN_ASYNC_EVERY))


def _async_churn_loop(lock: ctxlock.Lock) -> tuple[asyncio.AbstractEventLoop | None, str]:
    """A loop for the async churn cycles, or None and why they are left out."""
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(_churn_async(lock, 2))
    except (AttributeError, NotImplementedError) as exc:
        loop.close()
        return None, f"; async cycles left out ({type(exc).__name__}: {exc})"
    except BaseException:
        loop.close()
        raise
    return loop, ""


def _churn_row(row: Row, cfg: Config) -> RowResult:
    if _rss_bytes() is None:
        return row.skipped("skipped: no way to read the RSS on this platform")
    lock = ctxlock.Lock()
    loop, missing = _async_churn_loop(lock)
    try:
        _churn(lock, loop, min(20_000, max(cfg.churn_cycles // 10, 1_000)))  # warm-up
        gc.collect()
        before = _rss_bytes() or 0
        start = perf_counter_ns()
        _churn(lock, loop, cfg.churn_cycles)
        elapsed = perf_counter_ns() - start
        gc.collect()
        growth = (_rss_bytes() or 0) - before
    finally:
        if loop is not None:
            loop.close()
    async_part = f" + {cfg.churn_cycles // CHURN_ASYNC_EVERY:,} task-cancel cycles" if loop else ""
    full_hint = "" if cfg.churn_cycles >= 1_000_000 else "; --full-churn runs 1,000,000"
    note = (
        f"{cfg.churn_cycles:,} acquire/timeout/cancel cycles{async_part} in "
        f"{format_value(elapsed, 'ns')}, one in {CHURN_WAIT_EVERY} really waiting"
        f"{full_hint}{missing}"
    )
    extra = {"cycles": float(cfg.churn_cycles), "elapsed_ns": float(elapsed)}
    return row.result(float(growth), None, max(growth, 0) / _MB, note=note, extra=extra)


# ---- the table


def _micro(cfg: Config) -> int | None:
    return cfg.micro_ops


ROWS: Sequence[Row] = (
    Row(
        "acquire_unlock",
        "u = acq(); u() vs threading.Lock acquire()/release(), all pre-bound",
        "threading.Lock",
        1.0,
        _pair("acquire_unlock", "threading", _micro),
    ),
    Row(
        "with",
        "with lock: vs with threading.Lock() (one lock reused)",
        "threading.Lock",
        0.8,
        _pair("with", "threading", _micro),
    ),
    Row(
        "acquire_deadline",
        "lock.acquire(deadline=30)() vs tl.acquire(timeout=30); tl.release()",
        "threading.Lock",
        0.5,
        _pair("acquire_deadline", "threading", _micro),
    ),
    Row(
        "shared_with",
        "with rw.shared: vs with threading.Lock()",
        "threading.Lock",
        1.5,
        _pair("shared_with", "threading", _micro),
    ),
    Row(
        "shared_vs_rwlock",
        "with rw.shared: vs with RWLockFair().gen_rlock() (readerwriterlock)",
        "RWLockFair reader",
        0.15,
        _pair("shared_with", "readerwriterlock", _micro),
    ),
    Row(
        "contended_4",
        "4 threads increment a counter under with lock:; ns per increment, longest wait",
        "threading.Lock",
        1.0,
        _pair("contended_4", "threading", lambda c: c.contended_ops, compare_wait=True),
        unit="ns/op",
    ),
    Row(
        "drain_100",
        "100 threads blocked on a held lock: release until all have passed once",
        "threading.Lock",
        1.0,
        _pair("drain_100", "threading", lambda c: c.drain_threads),
        unit="ns/thread",
    ),
    Row(
        "async_with",
        "async with lock: uncontended in one task vs asyncio.Lock",
        "asyncio.Lock",
        0.6,
        _pair("async_with", "asyncio", _micro),
    ),
    Row(
        "tasks_100",
        "100 tasks: async with lock: await asyncio.sleep(0), rounds; ns per hold",
        "asyncio.Lock",
        1.0,
        _pair("tasks_100", "asyncio", lambda c: c.tasks_rounds),
    ),
    Row(
        "mixed_2t2t",
        "2 threads (with) + 2 tasks (async with) on one lock; cost per op vs aiologic",
        "aiologic.Lock",
        0.2,
        _pair("mixed_2t2t", "aiologic", lambda c: c.mixed_ops),
    ),
    Row(
        "memory_100k",
        "RSS growth of 100,000 Locks vs 100,000 threading.Locks (fresh interpreters)",
        "threading.Lock",
        2.0,
        _memory_row,
        unit="B/lock",
    ),
    Row(
        "tasks_scaling",
        "100,000 tasks queued on a held lock pass through, vs 10,000 (linear is 10)",
        "10x fewer tasks",
        12.0,
        _scaling_row,
        unit="ns",
    ),
    Row(
        "churn_rss",
        "RSS growth over acquire/timeout/cancel cycles (ratio column: MB)",
        "budget",
        2.0,
        _churn_row,
        unit="B",
        ratio_unit=" MB",
    ),
)

ROW_KEYS: Sequence[str] = tuple(row.key for row in ROWS)
_ROWS_BY_KEY: Mapping[str, Row] = {row.key: row for row in ROWS}


def run_row(key: str, cfg: Config) -> RowResult:
    """Measure one row; never raises for a missing peer, feature or a failed workload.

    A failed workload's traceback goes to stderr and its row is marked as an error.
    """
    row = _ROWS_BY_KEY[key]
    try:
        return row.measure(row, cfg)
    except PeerMissing as exc:
        return row.skipped(str(exc))
    except (AttributeError, NotImplementedError) as exc:
        return row.skipped(
            f"skipped: this ctxlock build lacks what the row needs ({type(exc).__name__}: {exc})"
        )
    except Exception as exc:
        traceback.print_exc(file=sys.stderr)
        return row.failed(f"error: {type(exc).__name__}: {exc}")
