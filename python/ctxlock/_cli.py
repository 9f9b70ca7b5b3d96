"""``python -m ctxlock``: the ``bench`` report, the ``demo`` and ``--version``.

``bench`` runs the rows of ``ctxlock._bench`` (``ctxlock._bench.rows`` says what each
measures), shows progress on stderr and prints a table, or JSON with ``--json``, on stdout;
``--plot`` also draws the ratios against their targets into a PNG (needs matplotlib). Missed
targets are part of the report: the exit status is non-zero only for errors, that is rows
whose workload raised; their tracebacks go to stderr (in the JSON: each row's
``traceback``). ``--pythons P1,P2`` (default: the ``CTXLOCK_BENCH_PYTHONS`` environment
variable, same format) also runs the interpreter rows in those interpreters and adds the
table "Across interpreters" (``ctxlock._bench.interpreters``); their rows count for the exit
status as this process's own do (misses do not, errors do), and so does an interpreter that
could not run them at all.

``demo`` runs ``ctxlock._demo``.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Protocol, cast

import ctxlock
from ctxlock import _demo

if TYPE_CHECKING:
    from ctxlock._bench import Config, RowResult
    from ctxlock._bench.interpreters import Interpreter

__all__ = ["main"]

_BENCH_EXTRA = "pip install 'ctxlock[bench]'"


# Option types: a bad value is an argparse error (usage, the option's name, exit status 2).


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, not {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
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
    interpreter_rows = (
        "the interpreter rows" if bench is None else ", ".join(bench.INTERPRETER_ROWS)
    )
    parser.add_argument(
        "--pythons",
        metavar="P1,P2",
        default=os.environ.get("CTXLOCK_BENCH_PYTHONS"),
        help=(
            "also run the interpreter rows selected (" + interpreter_rows + ") in these other "
            "Python interpreters (paths, comma-separated; each needs ctxlock installed), "
            "each in a child process, and add a table of all of them side by side; "
            "default: $CTXLOCK_BENCH_PYTHONS"
        ),
    )
    parser.set_defaults(handler=_cmd_bench)


def _add_demo_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser("demo", help="show a lock under attack (ctxlock vs naive)")
    _demo.add_arguments(parser)
    parser.set_defaults(handler=_cmd_demo)


def build_parser(bench: ModuleType | None = None) -> argparse.ArgumentParser:
    """The parser; ``bench`` (``ctxlock._bench``) supplies the rows that ``bench --help``
    lists and ``--rows`` takes.
    """
    parser = argparse.ArgumentParser(
        prog="python -m ctxlock", description="ctxlock: locks with deadlines and cancellation."
    )
    parser.add_argument("--version", action="version", version=f"ctxlock {ctxlock.__version__}")
    commands = parser.add_subparsers(title="commands", metavar="COMMAND")
    _add_bench_parser(commands, bench)
    _add_demo_parser(commands)
    return parser


class _Handler(Protocol):
    """A command: takes the parsed arguments, returns the exit status."""

    def __call__(self, args: argparse.Namespace, /) -> int: ...


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    # Imported only for its command: it takes longer to import than the rest of the CLI.
    bench = importlib.import_module("ctxlock._bench") if args_list[:1] == ["bench"] else None
    parser = build_parser(bench)
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
    _demo.run_demo(
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
    from ctxlock._bench import report

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
    across_keys = [key for key in _bench.INTERPRETER_ROWS if key in keys]
    interpreters = _run_elsewhere(results, across_keys, cfg, str(args.pythons or ""))
    if args.json:
        print(json.dumps(report.report_json(results, cfg, interpreters), indent=2))
    else:
        print(report.report_table(results, cfg))
        if interpreters:
            print()
            print(report.across_table(across_keys, interpreters))
        for result in results:
            if result.traceback is not None:
                print(f"\nrow {result.key}:\n{result.traceback}", end="", file=sys.stderr)
        for other in interpreters[1:]:
            for result in other.rows:
                if result.traceback is not None:
                    print(
                        f"\nrow {result.key} on {other.label}:\n{result.traceback}",
                        end="",
                        file=sys.stderr,
                    )
    if args.plot:
        from ctxlock._bench.plot import plot

        plot(results, str(args.plot))
        print(f"wrote {args.plot}", file=sys.stderr)
    failed = any(r.error for r in results) or any(
        other.error is not None or any(r.error for r in other.rows) for other in interpreters
    )
    return 1 if failed else 0


def _run_elsewhere(
    results: Sequence[RowResult], keys: Sequence[str], cfg: Config, pythons: str
) -> list[Interpreter]:
    """``--pythons``: this interpreter's entry (its own results) and each other one's;
    empty without ``--pythons`` or when no interpreter row is selected."""
    from ctxlock._bench import interpreters

    paths = interpreters.parse_pythons(pythons)
    if not paths:
        return []
    if not keys:
        print("--pythons: none of the rows selected is an interpreter row", file=sys.stderr)
        return []
    found = [interpreters.this_interpreter(results, keys)]
    for path in paths:
        found.append(interpreters.run_elsewhere(path, keys, cfg))
    return found


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
