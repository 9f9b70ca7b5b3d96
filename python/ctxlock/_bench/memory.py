"""``memory_100k``: the memory of many locks, each side probed in a fresh interpreter."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import threading
import tracemalloc
from collections.abc import Callable, Mapping
from pathlib import Path

import ctxlock
from ctxlock._bench.config import Config
from ctxlock._bench.result import RowResult, format_value
from ctxlock._bench.row import Row
from ctxlock._bench.sampling import median
from ctxlock._bench.workload import RUN_TIMEOUT_S, BenchError

__all__ = ["memory_row", "rss_bytes"]


def rss_bytes() -> int | None:
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
    "import sys; from ctxlock._bench.memory import _child; _child(sys.argv[1], int(sys.argv[2]))"
)


def _child(kind: str, n: int) -> None:
    """In a fresh interpreter: print RSS growth and tracemalloc peak for ``n`` locks."""
    make = _MEMORY_KINDS[kind]
    warm = [make() for _ in range(1_000)]
    del warm
    gc.collect()
    before = rss_bytes()
    locks = [make() for _ in range(n)]
    after = rss_bytes()
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


def memory_row(row: Row, cfg: Config) -> RowResult:
    if rss_bytes() is None:
        return row.skipped("skipped: no way to read the RSS on this platform")
    probes: dict[str, list[tuple[float, float]]] = {"ctxlock": [], "threading": []}
    for i in range(cfg.memory_repeat):
        for kind in ("ctxlock", "threading")[:: 1 if i % 2 == 0 else -1]:
            probes[kind].append(_memory_probe(kind, cfg.memory_locks))
    ours_rss = median([rss for rss, _ in probes["ctxlock"]])
    their_rss = median([rss for rss, _ in probes["threading"]])
    ours_traced = median([traced for _, traced in probes["ctxlock"]])
    their_traced = median([traced for _, traced in probes["threading"]])
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
