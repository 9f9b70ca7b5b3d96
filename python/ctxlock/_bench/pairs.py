"""The ratio rows: one scenario with ctxlock against its anchor, interleaved in this process."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence

from ctxlock._bench.config import Config
from ctxlock._bench.peers import PEER_LABELS
from ctxlock._bench.result import RowResult, format_value
from ctxlock._bench.row import Measure, Row
from ctxlock._bench.sampling import calibrate, interleave, median, percentile, timed
from ctxlock._bench.scenarios import SCENARIOS
from ctxlock._bench.workload import Sample

__all__ = ["pair"]


def pair(
    scenario: str,
    anchor: str,
    ops: Callable[[Config], int | None],
    *,
    compare_wait: bool = False,
    compare_waiters: bool = False,
    alone: str | None = None,
    elsewhere: str | None = None,
) -> Measure:
    """A row measuring ``scenario`` with ctxlock against ``anchor``, ``ops(cfg)`` ops a run.

    ``ops`` returning None calibrates the count. With ``compare_wait`` (the contended rows)
    the longest single wait (the median over the repeats of each run's worst) must not
    exceed the anchor's, and no run of ctxlock may leave a thread starved (``Progress``).
    With ``compare_waiters`` (``drain_100``) the p90 of the waiters' own waits (the median
    over the repeats of each run's p90) must not exceed the anchor's. ``alone`` names the
    scenario of the same loop in one thread: both locks are timed in it too, interleaved,
    and the note says what the ratio is with no contention. ``elsewhere`` names the
    scenario of the same loop run by a thread that did not make the lock: timed the same
    way, for the note (the row's figures are those of ``scenario``). Where the scenario of
    the note has controls (``CONTROLS``), each is timed against ctxlock there too.
    """

    def measure(row: Row, cfg: Config) -> RowResult:
        n, ours_samples, their_samples = _interleaved(scenario, anchor, ops(cfg), cfg)
        ours_ns, their_ns = _per_op(ours_samples), _per_op(their_samples)
        ratio = ours_ns / their_ns
        if compare_waiters:
            return _waiters_result(row, anchor, ours_samples, their_samples, ours_ns, their_ns)
        if not compare_wait:
            if elsewhere is None:
                return row.result(ours_ns, their_ns, ratio)
            text, extra = _side_by_side(elsewhere, anchor, n, cfg, "elsewhere")
            more, more_extra = _controls(elsewhere, anchor, n, cfg, "elsewhere", "there")
            note = f"in a thread that did not make the lock: {text}{more}"
            return row.result(ours_ns, their_ns, ratio, note=note, extra=extra | more_extra)
        # Thread switches per 1,000 operations: what a convoy costs (see BENCHMARKS.md).
        our_wait, our_switches = _waits_and_switches(ours_samples)
        their_wait, their_switches = _waits_and_switches(their_samples)
        # The control: the same loop with no lock at all (the GIL's own longest waits).
        with SCENARIOS[scenario]["nolock"]() as control:
            control_samples = [timed(control, n) for _ in range(cfg.repeat)]
        control_wait, _ = _waits_and_switches(control_samples)
        our_share = _smallest_share(ours_samples)
        their_share = _smallest_share(their_samples)
        control_share = _smallest_share(control_samples)
        our_starved = sum(s.starved for s in ours_samples)
        their_starved = sum(s.starved for s in their_samples)
        control_starved = sum(s.starved for s in control_samples)
        threads = ours_samples[0].ops // n
        label = PEER_LABELS[anchor]
        alone_note, alone_extra = _alone(alone, anchor, n, cfg)
        contended_note, contended_extra = _contended_controls(scenario, anchor, n, cfg)
        note = (
            f"longest single wait: ctxlock {format_value(our_wait, 'ns')}, "
            f"{label} {format_value(their_wait, 'ns')} (must not be longer); "
            f"control with no lock at all {format_value(control_wait, 'ns')}; "
            f"thread switches per 1,000 ops: ctxlock {our_switches:.3g}, "
            f"{label} {their_switches:.3g}; "
            f"smallest thread's share of the ops while all competed (fair "
            f"{1 / threads:.0%}): ctxlock {_share_text(our_share)}, "
            f"{label} {_share_text(their_share)}, no lock {_share_text(control_share)}; "
            f"threads starved (waiting, no op before all others finished) over "
            f"{cfg.repeat} runs: ctxlock {our_starved} (must be 0), {label} {their_starved}, "
            f"no lock {control_starved}{alone_note}{contended_note}"
        )
        extra = {
            "ours_longest_wait_ns": our_wait,
            "anchor_longest_wait_ns": their_wait,
            "no_lock_longest_wait_ns": control_wait,
            "ours_switches_per_1000_ops": our_switches,
            "anchor_switches_per_1000_ops": their_switches,
            **{
                key: value
                for key, value in (
                    ("ours_smallest_share", our_share),
                    ("anchor_smallest_share", their_share),
                    ("no_lock_smallest_share", control_share),
                )
                if value is not None
            },
            "ours_starved_threads": float(our_starved),
            "anchor_starved_threads": float(their_starved),
            "no_lock_starved_threads": float(control_starved),
            **alone_extra,
            **contended_extra,
        }
        also_ok = our_wait <= their_wait and our_starved == 0
        return row.result(ours_ns, their_ns, ratio, note=note, extra=extra, also_ok=also_ok)

    return measure


def _interleaved(
    scenario: str, anchor: str, n: int | None, cfg: Config
) -> tuple[int, list[Sample], list[Sample]]:
    """``cfg.repeat`` interleaved samples of ``scenario`` with ctxlock and with ``anchor``,
    ``n`` ops each (calibrated when None), and that ``n``."""
    peers = SCENARIOS[scenario]
    with peers[anchor]() as theirs, peers["ctxlock"]() as ours:
        if n is None:
            n = calibrate((ours, theirs), cfg.sample_ns)
        ours_samples, their_samples = interleave(ours, theirs, n, cfg.repeat)
    return n, ours_samples, their_samples


def _per_op(samples: Sequence[Sample]) -> float:
    """The median over the samples of the time per operation."""
    return median([s.per_op_ns for s in samples])


def _alone(scenario: str | None, anchor: str, n: int, cfg: Config) -> tuple[str, dict[str, float]]:
    """The note's part and the extra figures for ``scenario``, the contended loop run by
    one thread alone (each lock ``n`` increments, interleaved): none without one."""
    if scenario is None:
        return "", {}
    text, extra = _side_by_side(scenario, anchor, n, cfg, "alone")
    more, more_extra = _controls(scenario, anchor, n, cfg, "alone", "alone")
    return f"; the same loop in one thread alone (no contention): {text}{more}", extra | more_extra


#: The controls a scenario may have: the anchor's loop changed in one way, so that a
#: ratio against it shows how much of the row's ratio that one thing is. Each is a peer
#: ``{anchor}_{control}`` of the scenario, and the words that say what was changed.
CONTROLS = (
    # The release called through a local set on each operation, as ctxlock's `Unlock` is.
    ("shaped", "(u = release; acquire(); ...; u())"),
    # A reference to the lock taken on each hold, as an `Unlock` takes one.
    ("kept", "(acquire(); kept = lock; ...; release())"),
)


def _controls_of(scenario: str, anchor: str) -> list[tuple[str, str, str]]:
    """The ``CONTROLS`` that ``scenario`` has: each one's name, words and peer."""
    return [
        (control, words, f"{anchor}_{control}")
        for control, words in CONTROLS
        if f"{anchor}_{control}" in SCENARIOS[scenario]
    ]


def _waits_and_switches(samples: Sequence[Sample]) -> tuple[float, float]:
    """The longest single wait (the median over the runs of each run's worst) and the
    thread switches per 1,000 operations (the median over the runs)."""
    return (
        median([s.max_wait_ns for s in samples]),
        median([1000 * s.switches / s.ops for s in samples]),
    )


def _controls(
    scenario: str, anchor: str, n: int, cfg: Config, key: str, where: str
) -> tuple[str, dict[str, float]]:
    """Each of ``CONTROLS`` that ``scenario`` has, timed against ctxlock in rounds of its
    own: the note's words (``where`` says where the loops ran) and the extra figures
    ``ours_{key}_vs_{control}_ns``, ``anchor_{control}_{key}_ns`` and
    ``{control}_{key}_ratio``."""
    note = ""
    extra: dict[str, float] = {}
    for control, words, peer in _controls_of(scenario, anchor):
        ours_ns, their_ns, text = _one_thread(scenario, peer, anchor, n, cfg)
        note += f"; {PEER_LABELS[peer]} {words}, {where}: {text}"
        extra |= {
            f"ours_{key}_vs_{control}_ns": ours_ns,
            f"anchor_{control}_{key}_ns": their_ns,
            f"{control}_{key}_ratio": ours_ns / their_ns,
        }
    return note, extra


def _contended_controls(
    scenario: str, anchor: str, n: int, cfg: Config
) -> tuple[str, dict[str, float]]:
    """Each of ``CONTROLS`` that the contended ``scenario`` has, run contended against
    ctxlock in rounds of its own (``n`` ops, interleaved): its time per op, longest single
    wait and thread switches beside ctxlock's, so that the row's figures can be read
    against a loop that pays what the control adds. The extra figures are
    ``ours_contended_vs_{control}_ns``, ``anchor_{control}_contended_ns``,
    ``{control}_contended_ratio``, ``ours_vs_{control}_longest_wait_ns``,
    ``anchor_{control}_longest_wait_ns``, ``ours_vs_{control}_switches_per_1000_ops`` and
    ``anchor_{control}_switches_per_1000_ops``."""
    note = ""
    extra: dict[str, float] = {}
    for control, words, peer in _controls_of(scenario, anchor):
        _, ours, theirs = _interleaved(scenario, peer, n, cfg)
        ours_ns, their_ns = _per_op(ours), _per_op(theirs)
        our_wait, our_switches = _waits_and_switches(ours)
        their_wait, their_switches = _waits_and_switches(theirs)
        note += (
            f"; {PEER_LABELS[peer]} {words}, contended: ctxlock "
            f"{format_value(ours_ns, 'ns/op')}, the control {format_value(their_ns, 'ns/op')}, "
            f"ratio {ours_ns / their_ns:.3g}; longest single wait ctxlock "
            f"{format_value(our_wait, 'ns')}, the control {format_value(their_wait, 'ns')}; "
            f"thread switches per 1,000 ops ctxlock {our_switches:.3g}, the control "
            f"{their_switches:.3g}"
        )
        extra |= {
            f"ours_contended_vs_{control}_ns": ours_ns,
            f"anchor_{control}_contended_ns": their_ns,
            f"{control}_contended_ratio": ours_ns / their_ns,
            f"ours_vs_{control}_longest_wait_ns": our_wait,
            f"anchor_{control}_longest_wait_ns": their_wait,
            f"ours_vs_{control}_switches_per_1000_ops": our_switches,
            f"anchor_{control}_switches_per_1000_ops": their_switches,
        }
    return note, extra


def _side_by_side(
    scenario: str, anchor: str, n: int, cfg: Config, key: str
) -> tuple[str, dict[str, float]]:
    """ctxlock and ``anchor`` in ``scenario`` (``_one_thread``): the note's words, and the
    extra figures ``ours_{key}_ns``, ``anchor_{key}_ns`` and ``{key}_ratio``."""
    ours_ns, their_ns, text = _one_thread(scenario, anchor, anchor, n, cfg)
    extra = {
        f"ours_{key}_ns": ours_ns,
        f"anchor_{key}_ns": their_ns,
        f"{key}_ratio": ours_ns / their_ns,
    }
    return text, extra


def _one_thread(
    scenario: str, peer: str, label: str, n: int, cfg: Config
) -> tuple[float, float, str]:
    """ctxlock's and ``peer``'s time per op in ``scenario`` (interleaved, ``n`` ops), and
    the two with their ratio as the note says them, ``peer`` named as ``label``'s."""
    _, ours_samples, their_samples = _interleaved(scenario, peer, n, cfg)
    ours_ns, their_ns = _per_op(ours_samples), _per_op(their_samples)
    text = (
        f"ctxlock {format_value(ours_ns, 'ns/op')}, {PEER_LABELS[label]} "
        f"{format_value(their_ns, 'ns/op')}, ratio {ours_ns / their_ns:.3g}"
    )
    return ours_ns, their_ns, text


def _smallest_share(samples: Sequence[Sample]) -> float | None:
    """The median over the runs of the smallest thread's share while all competed, over
    the runs where they did compete at all (None if in none: the threads ran one after
    another)."""
    shares = [min(s.shares) for s in samples if s.shares]
    return median(shares) if shares else None


def _share_text(share: float | None) -> str:
    return "- (the threads never ran at the same time)" if share is None else f"{share:.1%}"


def _waiter_stats(samples: Sequence[Sample]) -> tuple[float, float, float]:
    """Mean, median and p90 of the waiters' own waits: each the median over the runs."""
    return (
        median([statistics.fmean(s.waits) for s in samples]),
        median([median(s.waits) for s in samples]),
        median([percentile(s.waits, 0.9) for s in samples]),
    )


def _waiters_result(
    row: Row,
    anchor: str,
    ours_samples: Sequence[Sample],
    their_samples: Sequence[Sample],
    ours_ns: float,
    their_ns: float,
) -> RowResult:
    ours = _waiter_stats(ours_samples)
    theirs = _waiter_stats(their_samples)

    def text(stats: tuple[float, float, float]) -> str:
        mean, mid, p90 = (format_value(v, "ns") for v in stats)
        return f"mean {mean}, median {mid}, p90 {p90}"

    note = (
        f"each waiter's time from the release to its own acquire: ctxlock {text(ours)}; "
        f"{PEER_LABELS[anchor]} {text(theirs)} (ctxlock's p90 must not be longer)"
    )
    extra = {
        "ours_waiter_mean_ns": ours[0],
        "ours_waiter_median_ns": ours[1],
        "ours_waiter_p90_ns": ours[2],
        "anchor_waiter_mean_ns": theirs[0],
        "anchor_waiter_median_ns": theirs[1],
        "anchor_waiter_p90_ns": theirs[2],
    }
    return row.result(
        ours_ns, their_ns, ours_ns / their_ns, note=note, extra=extra, also_ok=ours[2] <= theirs[2]
    )
