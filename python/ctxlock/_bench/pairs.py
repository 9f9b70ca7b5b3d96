"""The ratio rows: one scenario with ctxlock against its anchor, interleaved in this process."""

from __future__ import annotations

from collections.abc import Callable

from ctxlock._bench.config import Config
from ctxlock._bench.peers import PEER_LABELS
from ctxlock._bench.result import RowResult, format_value
from ctxlock._bench.row import Measure, Row
from ctxlock._bench.sampling import calibrate, interleave, median, timed
from ctxlock._bench.scenarios import SCENARIOS

__all__ = ["pair"]


def pair(
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
                n = calibrate((ours, theirs), cfg.sample_ns)
            ours_samples, their_samples = interleave(ours, theirs, n, cfg.repeat)
        ours_ns = median([s.per_op_ns for s in ours_samples])
        their_ns = median([s.per_op_ns for s in their_samples])
        if not compare_wait:
            return row.result(ours_ns, their_ns, ours_ns / their_ns)
        our_wait = median([s.max_wait_ns for s in ours_samples])
        their_wait = median([s.max_wait_ns for s in their_samples])
        # Thread switches per 1,000 operations: what a convoy costs (see BENCHMARKS.md).
        our_switches = median([1000 * s.switches / s.ops for s in ours_samples])
        their_switches = median([1000 * s.switches / s.ops for s in their_samples])
        # The control: the same loop with no lock at all (the GIL's own longest waits).
        with peers["nolock"]() as control:
            control_wait = median([timed(control, n).max_wait_ns for _ in range(cfg.repeat)])
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
