"""What one row of the report measured, and how a value in its unit reads."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Literal

__all__ = ["Op", "RowResult", "Status", "format_value"]

Op = Literal["<=", ">="]
Status = Literal["ok", "miss", "skip", "error"]


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
    #: The exception's traceback, for a row whose workload raised (``status`` "error").
    traceback: str | None = None

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
