"""The iteration counts of one run of the rows."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Config"]


@dataclass(frozen=True)
class Config:
    """Iteration counts of one run: ``Config.full()`` or ``Config.quick_mode()``."""

    quick: bool = False
    repeat: int = 5
    #: Target length of one micro-benchmark sample; the op count is calibrated to it.
    sample_ns: int = 25_000_000
    #: Fixed op count of the micro rows; None calibrates to ``sample_ns``.
    micro_ops: int | None = None
    contended_ops: int = 100_000
    drain_threads: int = 100
    tasks_rounds: int = 50
    mixed_ops: int = 5_000
    memory_locks: int = 100_000
    memory_repeat: int = 3
    scaling_small: int = 10_000
    scaling_large: int = 100_000
    scaling_repeat: int = 3
    churn_cycles: int = 200_000
    #: Distinct names of ``named_1m``, each taken once (the first tenth is the warm-up).
    named_names: int = 1_000_000
    #: Length of one window of the ``file_contended_*`` rows, and windows per lock.
    file_seconds: float = 2.0
    file_repeat: int = 3
    #: Hand-offs between two processes in ``file_handoff``, per lock.
    handoff_rounds: int = 2_000
    #: Holders killed in ``file_crash``, per lock.
    crash_rounds: int = 5
    #: ``pg_acquire_unlock``: pairs per sample (each a few round trips to the server), and
    #: pairs of the separate session whose server statements are counted.
    pg_pairs: int = 2_000
    pg_count_pairs: int = 1_000
    #: Length of one window of ``pg_contended`` and ``pg_async``, and windows per lock.
    pg_seconds: float = 2.0
    pg_repeat: int = 3
    #: Rounds of ``pg_cancel`` (each a waiter cancelled), for ctxlock and the control.
    pg_cancel_rounds: int = 20

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
            named_names=20_000,
            file_seconds=0.2,
            file_repeat=1,
            handoff_rounds=40,
            crash_rounds=1,
            pg_pairs=50,
            pg_count_pairs=20,
            pg_seconds=0.2,
            pg_repeat=1,
            pg_cancel_rounds=2,
        )
