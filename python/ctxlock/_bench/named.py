"""Named locks: ``named_acquire_unlock``, ``named_vs_weakdict`` and ``named_1m``.

The workloads take a lock by name from a set of ``NAMES`` names, cycled, and release it at
once: ctxlock's ``LockManager`` (the lookup included), a dict of ``threading.Lock`` by the
same names (the anchor: a lookup that never creates nor frees), and what users build by
hand to get locks by name that do not pile up, a ``weakref.WeakValueDictionary`` of
``threading.Lock`` guarded by a ``threading.Lock``.

``named_acquire_unlock`` also times ``NamedFloor``, the row's loop with the scope's table
left out, and says in its note what that costs against the anchor: the part of the row
that no table, however cheap, can take away.

``named_1m`` takes a million distinct names once each, in a fresh interpreter, and reports
how much the RSS grew after the first tenth (the warm-up): names nobody holds or waits on
must take no memory.
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import threading
import weakref
from collections.abc import Callable
from itertools import cycle, islice
from pathlib import Path
from time import perf_counter_ns

import ctxlock
from ctxlock._bench.config import Config
from ctxlock._bench.memory import rss_bytes
from ctxlock._bench.result import RowResult, format_value
from ctxlock._bench.row import Row
from ctxlock._bench.sampling import calibrate, median, rotate
from ctxlock._bench.workload import RUN_TIMEOUT_S, BenchError, Sample, Workload, expect

__all__ = [
    "NAMES",
    "PREFIX",
    "DictAcquireRelease",
    "NamedAcquireUnlock",
    "NamedFloor",
    "WeakDictAcquireRelease",
    "named_memory_row",
    "named_row",
]

#: How many distinct names the ``named_acquire_unlock`` workloads cycle through.
NAMES = 1_000

MB = 1_000_000


#: The prefix of those names (``query`` checks by it that none was left held).
PREFIX = "bench:invoice:"


def _names() -> list[str]:
    return [f"{PREFIX}{i}" for i in range(NAMES)]


class NamedAcquireUnlock(Workload):
    """``u = lock(name).acquire(); u()`` with ``lock = LockManager().lock`` pre-bound."""

    def __init__(self) -> None:
        self._manager = ctxlock.LockManager()
        self._names = _names()

    def run(self, n: int) -> Sample:
        lock = self._manager.lock
        start = perf_counter_ns()
        for name in islice(cycle(self._names), n):
            u = lock(name).acquire()
            u()
        elapsed = perf_counter_ns() - start
        expect(not self._manager.query(PREFIX), "a named lock was left held")
        return Sample(n, elapsed)

    def close(self) -> None:
        self._manager.close()


class NamedFloor(Workload):
    """``named_acquire_unlock`` without the scope's table: ``lock(name)`` makes the handle
    (its checks, its hash, the object) and drops it, then ``u = one.acquire(); u()`` on
    one plain ``Lock`` makes and ends an ``Unlock``.

    The same calls and the same two objects per operation as the row, and no lookup, pin
    or hold record: what the row would cost if the table cost nothing.
    """

    def __init__(self) -> None:
        self._manager = ctxlock.LockManager()
        self._one = ctxlock.Lock()
        self._names = _names()

    def run(self, n: int) -> Sample:
        lock, one = self._manager.lock, self._one
        start = perf_counter_ns()
        for name in islice(cycle(self._names), n):
            lock(name)
            u = one.acquire()
            u()
        elapsed = perf_counter_ns() - start
        expect(not one.locked(), "the floor's lock was left held")
        return Sample(n, elapsed)

    def close(self) -> None:
        self._manager.close()


class DictAcquireRelease(Workload):
    """``lk = locks[name]; lk.acquire(); lk.release()`` over a dict of ``threading.Lock``."""

    def __init__(self) -> None:
        self._locks = {name: threading.Lock() for name in _names()}
        self._names = _names()

    def run(self, n: int) -> Sample:
        locks = self._locks
        start = perf_counter_ns()
        for name in islice(cycle(self._names), n):
            lk = locks[name]
            lk.acquire()
            lk.release()
        return Sample(n, perf_counter_ns() - start)


class WeakDictAcquireRelease(Workload):
    """Get-or-create in a ``WeakValueDictionary`` under a guard, then acquire and release.

    What a user writes for locks by name that do not pile up: the registry holds each lock
    weakly, so a lock nobody holds is freed and the next use of its name creates it again.
    """

    def __init__(self) -> None:
        self._registry: weakref.WeakValueDictionary[str, threading.Lock] = (
            weakref.WeakValueDictionary()
        )
        self._guard = threading.Lock()
        self._names = _names()

    def run(self, n: int) -> Sample:
        registry, guard = self._registry, self._guard
        get, new_lock = registry.get, threading.Lock
        start = perf_counter_ns()
        for name in islice(cycle(self._names), n):
            with guard:
                lk = get(name)
                if lk is None:
                    lk = registry[name] = new_lock()
            lk.acquire()
            lk.release()
        return Sample(n, perf_counter_ns() - start)


def named_row(row: Row, cfg: Config) -> RowResult:
    """``named_acquire_unlock``: ctxlock against the dict of ``threading.Lock``, as every
    micro row (the median of interleaved repeats), with ``NamedFloor`` timed in the same
    rounds; its cost over the anchor's is the note's floor."""
    with (
        NamedAcquireUnlock() as ours,
        DictAcquireRelease() as theirs,
        NamedFloor() as floor,
    ):
        workloads = (ours, theirs, floor)
        n = cfg.micro_ops or calibrate(workloads, cfg.sample_ns)
        samples = rotate(workloads, n, cfg.repeat)
    ours_ns, their_ns, floor_ns = (median([s.per_op_ns for s in got]) for got in samples)
    note = (
        f"floor: the same handle and Unlock without the name's table (NamedFloor) "
        f"{format_value(floor_ns, 'ns/op')}, {floor_ns / their_ns:.3g} x the anchor; "
        f"the table {format_value(max(ours_ns - floor_ns, 0.0), 'ns/op')}"
    )
    extra = {"floor_ns": floor_ns, "floor_ratio": floor_ns / their_ns}
    return row.result(ours_ns, their_ns, ours_ns / their_ns, note=note, extra=extra)


# --- named_1m ------------------------------------------------------------------------------

_CHILD = "import sys; from ctxlock._bench.named import _child; _child(int(sys.argv[1]))"


def _take_once(lock: Callable[[str], ctxlock.NamedLock], start: int, stop: int) -> None:
    """``lock(name).acquire()()`` for the names ``name-{start}`` to ``name-{stop - 1}``."""
    for i in range(start, stop):
        lock(f"name-{i}").acquire()()


def _child(n: int) -> None:
    """In a fresh interpreter: RSS growth over ``n`` distinct names each taken once, after
    the first tenth of them as warm-up; prints JSON."""
    mgr = ctxlock.LockManager()
    warm = n // 10
    _take_once(mgr.lock, 0, warm)
    gc.collect()
    before = rss_bytes()
    start = perf_counter_ns()
    _take_once(mgr.lock, warm, n)
    elapsed = perf_counter_ns() - start
    gc.collect()
    after = rss_bytes()
    left = len(mgr.query())
    mgr.close()
    rss = None if before is None or after is None else after - before
    print(json.dumps({"rss": rss, "elapsed_ns": elapsed, "names": n - warm, "left": left}))


def named_memory_row(row: Row, cfg: Config) -> RowResult:
    if rss_bytes() is None:
        return row.skipped("skipped: no way to read the RSS on this platform")
    package_root = str(Path(ctxlock.__file__).absolute().parent.parent)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, str(cfg.named_names)],
        capture_output=True,
        text=True,
        env=env,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )
    if proc.returncode != 0:
        raise BenchError(f"named_1m probe failed: {proc.stderr.strip()[-400:]}")
    data = json.loads(proc.stdout)
    expect(data["left"] == 0, f"{data['left']} names were left held or waited on")
    growth = float(data["rss"])
    names = int(data["names"])
    note = (
        f"{cfg.named_names:,} distinct names taken once each in a fresh interpreter; growth "
        f"over the last {names:,} (the first tenth is the warm-up), taken in "
        f"{format_value(float(data['elapsed_ns']), 'ns')} "
        f"({format_value(float(data['elapsed_ns']) / names, 'ns/name')})"
    )
    extra = {"names": float(cfg.named_names), "elapsed_ns": float(data["elapsed_ns"])}
    return row.result(growth, None, max(growth, 0.0) / MB, note=note, extra=extra)
