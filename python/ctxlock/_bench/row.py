"""A row of the report: its key, description, anchor, target and how it is measured."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ctxlock._bench.config import Config
from ctxlock._bench.result import Op, RowResult

__all__ = ["Measure", "Row"]

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

    def failed(self, note: str, traceback: str) -> RowResult:
        return self._make(None, None, None, None, note, {}, True, traceback)

    def _make(
        self,
        ours: float | None,
        anchor: float | None,
        ratio: float | None,
        ok: bool | None,
        note: str,
        extra: Mapping[str, float],
        error: bool,
        traceback: str | None = None,
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
            traceback=traceback,
        )
