"""Taking samples: one timed run, the calibrated op count, interleaved repeats, the median."""

from __future__ import annotations

import gc
import math
import statistics
from collections.abc import Sequence

from ctxlock._bench.workload import Sample, Workload

__all__ = ["calibrate", "interleave", "median", "rotate", "timed"]

#: The most operations a calibrated micro-benchmark sample may have.
_MAX_MICRO_OPS = 5_000_000


def timed(workload: Workload, n: int) -> Sample:
    """``workload.run(n)`` after a collection, with the garbage collector off."""
    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    try:
        return workload.run(n)
    finally:
        if enabled:
            gc.enable()


def calibrate(workloads: Sequence[Workload], sample_ns: int) -> int:
    """An op count making the slowest workload's run last about ``sample_ns``.

    The probe runs double as warm-up.
    """
    probe = 2_000
    per_op = max(timed(w, probe).per_op_ns for w in workloads)
    return max(probe, min(_MAX_MICRO_OPS, int(sample_ns / max(per_op, 1.0))))


def rotate(workloads: Sequence[Workload], n: int, repeat_count: int) -> list[list[Sample]]:
    """``repeat_count`` samples of each workload, in rounds; each goes first in turn."""
    got: list[list[Sample]] = [[] for _ in workloads]
    for i in range(repeat_count):
        for k in range(len(workloads)):
            j = (i + k) % len(workloads)
            got[j].append(timed(workloads[j], n))
    return got


def interleave(
    ours: Workload, theirs: Workload, n: int, repeat_count: int
) -> tuple[list[Sample], list[Sample]]:
    """``repeat_count`` samples of each, alternating which one goes first."""
    got_ours, got_theirs = rotate((ours, theirs), n, repeat_count)
    return got_ours, got_theirs


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def percentile(values: Sequence[float], fraction: float) -> float:
    """The nearest-rank percentile: the smallest value with ``fraction`` of them at or below."""
    ordered = sorted(values)
    return float(ordered[max(0, math.ceil(fraction * len(ordered)) - 1)])
