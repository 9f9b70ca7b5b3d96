"""The results as a table for reading, or as JSON."""

from __future__ import annotations

import os
import platform
from collections.abc import Sequence

import ctxlock
from ctxlock._bench.config import Config
from ctxlock._bench.result import RowResult, format_value

__all__ = ["ratio_text", "report_json", "report_table"]


def _environment(cfg: Config) -> dict[str, object]:
    return {
        "ctxlock": ctxlock.__version__,
        "mode": "quick" if cfg.quick else "full",
        "repeat": cfg.repeat,
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": f"{platform.system()} {platform.machine()}",
        "cpus": os.cpu_count(),
    }


def report_json(results: Sequence[RowResult], cfg: Config) -> dict[str, object]:
    return {**_environment(cfg), "rows": [r.to_json() for r in results]}


def ratio_text(result: RowResult) -> str:
    return "-" if result.ratio is None else f"{result.ratio:.3g}{result.ratio_unit}"


def _target_text(result: RowResult) -> str:
    return f"{result.op} {result.target:g}{result.ratio_unit}"


def report_table(results: Sequence[RowResult], cfg: Config) -> str:
    env = _environment(cfg)
    lines = [
        f"ctxlock {env['ctxlock']} bench, {env['mode']} mode, {cfg.repeat} repeats; "
        f"{env['implementation']} {env['python']}, {env['platform']}, {env['cpus']} CPUs",
        "ratio = ctxlock cost / anchor cost (lower is better), median of the repeats",
    ]
    if cfg.quick:
        lines.append("quick mode: tiny counts, the numbers only show that every row runs")
    header = ("row", "ctxlock", "anchor", "ratio", "target", "result", "anchor is")
    rows = [header] + [
        (
            r.key,
            format_value(r.ours_ns, r.unit),
            format_value(r.anchor_ns, r.unit),
            ratio_text(r),
            _target_text(r),
            r.status,
            r.anchor_label,
        )
        for r in results
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines.append("")
    for row in rows:
        lines.append(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        )
    notes = [f"  {r.key}: {r.note}" for r in results if r.note]
    if notes:
        lines += ["", "notes:", *notes]
    return "\n".join(lines)
