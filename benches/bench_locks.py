"""pytest-benchmark suite: one group per scenario, every applicable peer in the group.

The workloads are ``ctxlock._bench``'s, the same ones ``python -m ctxlock bench`` times, so
the two cannot disagree. Peers: ``threading.Lock``, ``asyncio.Lock``, readerwriterlock,
aiologic and ctxlock, and the controls (no lock at all; ``threading.Lock`` in ctxlock's
loop shape, and taking a reference to its lock on each hold); a peer that is not
installed skips its case, and a workload that raises anything else fails it.

pyproject passes ``--benchmark-disable``, so a plain ``pytest`` runs each case once as a
smoke test. To time them: ``pytest benches --benchmark-enable``, and compare within a group
(``--benchmark-group-by=group``, the default). Each case's ``extra_info["ns_per_op"]`` is
the workload's own timing, the number ``python -m ctxlock bench`` reports; the fixture's
wall time also counts set-up inside the call (starting threads, creating tasks).
"""

from __future__ import annotations

import statistics

import pytest
from ctxlock import _bench
from pytest_benchmark.fixture import BenchmarkFixture

#: Operations per benchmarked call (see each workload class for what one operation is).
OPS: dict[str, int] = {
    "acquire_unlock": 10_000,
    "acquire_unlock_elsewhere": 10_000,
    "with": 10_000,
    "acquire_deadline": 10_000,
    "shared_with": 10_000,
    "contended_2": 2_000,
    "contended_4": 2_000,
    "contended_1": 2_000,
    "contended_1_acquire": 2_000,
    "contended_2_acquire": 2_000,
    "contended_4_acquire": 2_000,
    "drain_100": 100,
    "async_with": 10_000,
    "tasks_100": 20,
    "tasks_through": 1_000,
    "mixed_2t2t": 1_000,
    "named_acquire_unlock": 10_000,
    "file_acquire_unlock": 2_000,
}

CASES = [
    pytest.param(
        scenario, peer, id=f"{scenario}-{peer}", marks=pytest.mark.benchmark(group=scenario)
    )
    for scenario, peers in _bench.SCENARIOS.items()
    for peer in peers
]


def test_every_scenario_has_an_op_count() -> None:
    assert set(OPS) == set(_bench.SCENARIOS)


@pytest.mark.parametrize(("scenario", "peer"), CASES)
def test_lock(benchmark: BenchmarkFixture, scenario: str, peer: str) -> None:
    try:
        workload = _bench.SCENARIOS[scenario][peer]()
    except _bench.PeerMissing as exc:
        pytest.skip(str(exc))
    samples: list[_bench.Sample] = []

    def call() -> _bench.Sample:
        sample = workload.run(OPS[scenario])
        samples.append(sample)
        return sample

    with workload:
        benchmark(call)
    assert samples and all(s.ops > 0 and s.elapsed_ns > 0 for s in samples)
    # The workload's own timing: what `python -m ctxlock bench` reports. The fixture's wall
    # time also counts per-call set-up, such as starting threads in the threaded scenarios.
    benchmark.extra_info["ns_per_op"] = statistics.median(s.per_op_ns for s in samples)
