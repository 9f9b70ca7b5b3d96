"""``python -m ctxlock``: the ``bench`` report, the ``demo`` and ``--version``.

``bench`` runs the rows of ``ctxlock._bench`` (see that module for what each measures),
shows progress on stderr and prints a table, or JSON with ``--json``, on stdout; ``--plot``
also draws the ratios against their targets into a PNG (needs matplotlib). Missed targets
are part of the report: the exit status is non-zero only for errors.

``demo`` runs ``ctxlock._demo``, which is imported only for that command, so the rest of
the command line works in a build without it.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import math
import os
import platform
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Protocol, TextIO, cast

import ctxlock

if TYPE_CHECKING:
    from ctxlock._bench import Config, RowResult

__all__ = ["main"]

_BENCH_EXTRA = "pip install 'ctxlock[bench]'"


class _DemoModule(Protocol):
    """What the CLI uses of ``ctxlock._demo``."""

    def add_arguments(self, parser: argparse.ArgumentParser) -> None: ...
    def run_demo(self, attack: str, lock: str, seconds: float, out: TextIO) -> dict[str, int]: ...


def _load_demo() -> _DemoModule | None:
    """``ctxlock._demo``, or None if this build has no such module."""
    try:
        module = importlib.import_module("ctxlock._demo")
    except ModuleNotFoundError as exc:
        if exc.name == "ctxlock._demo":
            return None
        raise
    return cast(_DemoModule, module)


# Option types: a bad value is an argparse error (usage, the option's name, exit status 2).


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, not {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def positive_seconds(text: str) -> float:
    """A finite number of seconds greater than 0 (``demo --seconds``)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of seconds, not {text!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds > 0, not {text}")
    return value


def _row_list(known: Sequence[str]) -> Callable[[str], str]:
    """``--rows``: comma-separated keys of known rows, at least one."""

    def check(text: str) -> str:
        try:
            _selected_rows(text, known)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        return text

    return check


def _png_path(text: str) -> str:
    """``--plot``: a file in a directory that exists (checked before the rows run)."""
    if not text or not Path(text).resolve().parent.is_dir():
        raise argparse.ArgumentTypeError(f"no directory to write {text!r} into")
    return text


def _rows_epilog(bench: ModuleType) -> str:
    """Every row of the report: its key, what it measures and its target."""
    rows = bench.ROWS
    width = max(len(row.key) for row in rows)
    lines = ["rows (ratio = ctxlock cost / anchor cost, lower is better):"]
    for row in rows:
        target = f"{row.op} {row.target:g}{row.ratio_unit}"
        lines.append(f"  {row.key.ljust(width)}  {row.description} [target {target}]")
    return "\n".join(lines)


def _add_bench_parser(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], bench: ModuleType | None
) -> None:
    parser = commands.add_parser(
        "bench",
        help="compare ctxlock with threading/asyncio/peer locks against targets",
        description="Measure ctxlock against its anchors; see ctxlock._bench for the rows.",
        epilog=None if bench is None else _rows_epilog(bench),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    rows_type = str if bench is None else _row_list(bench.ROW_KEYS)
    parser.add_argument("--quick", action="store_true", help="tiny counts: a smoke test")
    parser.add_argument(
        "--rows", type=rows_type, metavar="K1,K2", help="only these rows (comma-separated)"
    )
    parser.add_argument("--repeat", type=_positive_int, metavar="N", help="repeats per row")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument(
        "--plot", type=_png_path, metavar="FILE.png", help="also draw the ratios into a PNG"
    )
    parser.add_argument("--full-churn", action="store_true", help="churn_rss with 1,000,000 cycles")
    parser.set_defaults(handler=_cmd_bench)


def _add_demo_parser(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], demo: _DemoModule | None
) -> None:
    parser = commands.add_parser("demo", help="show a lock under attack (ctxlock vs naive)")
    if demo is not None:
        demo.add_arguments(parser)
    else:  # the same options, so that --help reads the same without the module
        parser.add_argument("--attack", choices=("read", "write"), default="read")
        parser.add_argument("--lock", choices=("ctxlock", "naive", "both"), default="both")
        parser.add_argument("--seconds", type=positive_seconds, default=3.0)
    parser.set_defaults(handler=_cmd_demo, demo=demo)


def build_parser(
    demo: _DemoModule | None = None, bench: ModuleType | None = None
) -> argparse.ArgumentParser:
    """The parser; ``demo`` supplies the demo's options when it is the command run, and
    ``bench`` (``ctxlock._bench``) the rows that ``bench --help`` lists and ``--rows`` takes.
    """
    parser = argparse.ArgumentParser(
        prog="python -m ctxlock", description="ctxlock: locks with deadlines and cancellation."
    )
    parser.add_argument("--version", action="version", version=f"ctxlock {ctxlock.__version__}")
    commands = parser.add_subparsers(title="commands", metavar="COMMAND")
    _add_bench_parser(commands, bench)
    _add_demo_parser(commands, demo)
    return parser


class _Handler(Protocol):
    """A command: takes the parsed arguments, returns the exit status."""

    def __call__(self, args: argparse.Namespace, /) -> int: ...


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    demo = _load_demo() if args_list[:1] == ["demo"] else None
    # Imported only for its command: it takes longer to import than the rest of the CLI.
    bench = importlib.import_module("ctxlock._bench") if args_list[:1] == ["bench"] else None
    parser = build_parser(demo, bench)
    args = parser.parse_args(args_list)
    if not hasattr(args, "handler"):
        parser.print_help(sys.stderr)
        return 2
    handler = cast(_Handler, args.handler)
    try:
        return handler(args)
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130


# --------------------------------------------------------------------------- demo


def _cmd_demo(args: argparse.Namespace) -> int:
    demo = cast("_DemoModule | None", args.demo)
    if demo is None:
        print("error: this ctxlock build has no demo (ctxlock._demo is missing)", file=sys.stderr)
        return 1
    demo.run_demo(
        attack=str(args.attack), lock=str(args.lock), seconds=float(args.seconds), out=sys.stdout
    )
    return 0


# --------------------------------------------------------------------------- bench


def _selected_rows(spec: str | None, known: Sequence[str]) -> list[str]:
    if spec is None:
        return list(known)
    keys = [key.strip() for key in spec.split(",") if key.strip()]
    unknown = [key for key in keys if key not in known]
    if unknown or not keys:
        raise ValueError(
            f"unknown row(s): {', '.join(unknown) or '(none given)'}; known: {', '.join(known)}"
        )
    return keys


def _cmd_bench(args: argparse.Namespace) -> int:
    from ctxlock import _bench

    try:
        keys = _selected_rows(args.rows, _bench.ROW_KEYS)
    except ValueError as exc:
        print(f"error: --rows: {exc}", file=sys.stderr)
        return 2
    if args.plot and importlib.util.find_spec("matplotlib") is None:
        print(f"error: --plot needs matplotlib ({_BENCH_EXTRA})", file=sys.stderr)
        return 1
    make = _bench.Config.quick_mode if args.quick else _bench.Config.full
    cfg = make(args.repeat, full_churn=bool(args.full_churn))
    results = _run_rows(keys, cfg)
    if args.json:
        print(json.dumps(_report_json(results, cfg), indent=2))
    else:
        print(_report_table(results, cfg))
    if args.plot:
        _plot(results, str(args.plot))
        print(f"wrote {args.plot}", file=sys.stderr)
    return 1 if any(r.error for r in results) else 0


def _run_rows(keys: Sequence[str], cfg: Config) -> list[RowResult]:
    from ctxlock import _bench

    results = []
    for index, key in enumerate(keys, 1):
        print(f"[{index}/{len(keys)}] {key} ...", end="", file=sys.stderr, flush=True)
        start = time.perf_counter()
        result = _bench.run_row(key, cfg)
        elapsed = time.perf_counter() - start
        print(f" {result.status} ({elapsed:.1f} s)", file=sys.stderr, flush=True)
        results.append(result)
    return results


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


def _report_json(results: Sequence[RowResult], cfg: Config) -> dict[str, object]:
    return {**_environment(cfg), "rows": [r.to_json() for r in results]}


def _ratio_text(result: RowResult) -> str:
    return "-" if result.ratio is None else f"{result.ratio:.3g}{result.ratio_unit}"


def _target_text(result: RowResult) -> str:
    return f"{result.op} {result.target:g}{result.ratio_unit}"


def _report_table(results: Sequence[RowResult], cfg: Config) -> str:
    from ctxlock._bench import format_value

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
            _ratio_text(r),
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


def _plot(results: Sequence[RowResult], path: str) -> None:
    """Bars of each measured ratio (log scale) with its target marked; green if met."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    measured = [r for r in results if r.ratio is not None]
    fig, ax = plt.subplots(figsize=(max(6.0, 0.9 * len(measured) + 2.0), 5.0))
    floor = 1e-3  # a zero (no RSS growth) still needs a bar on a log axis
    positions = range(len(measured))
    heights = [max(r.ratio or 0.0, floor) for r in measured]
    colors = ["tab:green" if r.ok else "tab:red" for r in measured]
    ax.bar(positions, heights, color=colors, width=0.6)
    ax.scatter(
        positions,
        [r.target for r in measured],
        marker="_",
        s=900,
        linewidths=2.5,
        color="black",
        zorder=3,
    )
    for x, r in zip(positions, measured, strict=True):
        # Above the bar or the target line, whichever is higher, so the two never overlap.
        ax.annotate(
            _ratio_text(r),
            (x, max(heights[x], r.target)),
            xytext=(0, 4),
            textcoords="offset points",
            ha="center",
            va="bottom",
            fontsize=8,
        )
    ax.set_yscale("log")
    ax.set_xticks(list(positions), [r.key for r in measured], rotation=35, ha="right")
    ax.set_ylabel("ratio (churn_rss: MB)")
    ax.set_title(f"ctxlock {ctxlock.__version__}: cost relative to the anchor (lower is better)")
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles = [
        Patch(color="tab:green", label="ctxlock / anchor: meets"),
        Patch(color="tab:red", label="ctxlock / anchor: misses"),
        Line2D([], [], color="black", linewidth=2.5, label="target"),
    ]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
