"""The results as a table for reading, or as JSON."""

from __future__ import annotations

import os
import platform
import sysconfig
from collections.abc import Sequence

import ctxlock
from ctxlock._bench.config import Config
from ctxlock._bench.interpreters import Interpreter, interpreter_label
from ctxlock._bench.result import RowResult, format_value

__all__ = ["across_table", "ratio_text", "report_json", "report_table"]


def _environment(cfg: Config) -> dict[str, object]:
    return {
        "ctxlock": ctxlock.__version__,
        "mode": "quick" if cfg.quick else "full",
        "repeat": cfg.repeat,
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "free_threaded": bool(sysconfig.get_config_var("Py_GIL_DISABLED")),
        "label": interpreter_label(),
        "platform": f"{platform.system()} {platform.machine()}",
        "cpus": os.cpu_count(),
    }


def report_json(
    results: Sequence[RowResult], cfg: Config, interpreters: Sequence[Interpreter] = ()
) -> dict[str, object]:
    """The report as JSON; with ``--pythons``, ``interpreters`` has one entry for this
    interpreter (its own rows of the run) and one for each other one, in order."""
    data: dict[str, object] = {**_environment(cfg), "rows": [r.to_json() for r in results]}
    if interpreters:
        data["interpreters"] = [i.to_json() for i in interpreters]
    return data


def ratio_text(result: RowResult) -> str:
    return "-" if result.ratio is None else f"{result.ratio:.3g}{result.ratio_unit}"


def _target_text(result: RowResult) -> str:
    return f"{result.op} {result.target:g}{result.ratio_unit}"


def _columns(rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]


def across_table(keys: Sequence[str], interpreters: Sequence[Interpreter]) -> str:
    """ "Across interpreters": a line per row, for each interpreter that ran the rows its
    ctxlock figure, anchor figure, ratio and result; an error line for each that did not."""
    ran = [i for i in interpreters if i.error is None]
    lines = ["Across interpreters (ctxlock, anchor, ratio, result for each):"]
    for i in interpreters:
        if i.error is not None:
            name = i.python if i.label == i.python else f"{i.label} ({i.python})"
            lines.append(f"  {name}: error: {i.error}")
        else:
            lines.append(f"  {i.label}: {'this one, ' if i.this else ''}{i.python}")
    if not ran:
        return "\n".join(lines)
    header = ["row"] + [cell for i in ran for cell in (i.label, "", "", "")]
    sub = [""] + ["ctxlock", "anchor", "ratio", "result"] * len(ran)
    body = [header, sub]
    for key in keys:
        line = [key]
        for i in ran:
            r = i.result(key)
            if r is None:
                line += ["-", "-", "-", "not run"]
            else:
                line += [
                    format_value(r.ours_ns, r.unit),
                    format_value(r.anchor_ns, r.unit),
                    ratio_text(r),
                    r.status,
                ]
        body.append(line)
    lines += ["", *_columns(body)]
    for i in ran:
        notes = [f"  {r.key}: {r.note}" for r in i.rows if r.note and not i.this]
        if notes:
            lines += ["", f"notes on {i.label} ({i.python}):", *notes]
    return "\n".join(lines)


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
