"""``tasks_scaling``: how the time for tasks passing one lock grows with their number."""

from __future__ import annotations

from ctxlock._bench.config import Config
from ctxlock._bench.result import RowResult, format_value
from ctxlock._bench.row import Row
from ctxlock._bench.sampling import median, timed
from ctxlock._bench.scenarios import SCENARIOS
from ctxlock._bench.workload import Workload

__all__ = ["scaling_row"]


def _scaling_times(workload: Workload, small: int, large: int, i: int) -> tuple[int, int]:
    """One timing of ``large`` and of ``small`` tasks, the order alternating with ``i``."""
    if i % 2 == 0:
        large_ns = timed(workload, large).elapsed_ns
        return large_ns, timed(workload, small).elapsed_ns
    small_ns = timed(workload, small).elapsed_ns
    return timed(workload, large).elapsed_ns, small_ns


def scaling_row(row: Row, cfg: Config) -> RowResult:
    """ctxlock's large/small time ratio; asyncio.Lock's, run alongside, is the control."""
    small, large = cfg.scaling_small, cfg.scaling_large
    ours: list[tuple[int, int]] = []
    control: list[tuple[int, int]] = []
    peers = SCENARIOS["tasks_through"]
    with peers["ctxlock"]() as ctx_workload, peers["asyncio"]() as asyncio_workload:
        for workload in (ctx_workload, asyncio_workload):
            timed(workload, min(small, 1_000))  # warm-up
        for i in range(cfg.scaling_repeat):
            ours.append(_scaling_times(ctx_workload, small, large, i))
            control.append(_scaling_times(asyncio_workload, small, large, i + 1))
    large_ns, small_ns = (median([t[k] for t in ours]) for k in (0, 1))
    control_ratio = median([t[0] for t in control]) / median([t[1] for t in control])
    note = (
        f"ctxlock with {large:,} tasks against ctxlock with {small:,}: per task "
        f"{format_value(large_ns / large, 'ns')} and {format_value(small_ns / small, 'ns')}; "
        f"control: asyncio.Lock's ratio on the same workload is {control_ratio:.3g}"
    )
    extra = {"asyncio_lock_ratio": control_ratio}
    return row.result(large_ns, small_ns, large_ns / small_ns, note=note, extra=extra)
