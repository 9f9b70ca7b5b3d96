"""``--pythons``: the interpreter rows run in other interpreters, side by side with ours.

Each other interpreter runs ``P -m ctxlock bench --rows ... --json`` (same mode and
repeats) as a child process; its progress lines are passed on to stderr with the
interpreter's label in front, and its JSON report becomes an ``Interpreter``. This
process's own figures come from its own rows of the run. An interpreter that cannot run
them (no such file, no ctxlock installed, a crash) is an ``Interpreter`` with an
``error`` and no rows: the run goes on.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import sysconfig
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO

from ctxlock._bench.config import Config
from ctxlock._bench.result import RowResult

__all__ = [
    "PYTHONS_ENV",
    "Interpreter",
    "interpreter_label",
    "parse_pythons",
    "run_elsewhere",
    "this_interpreter",
]

#: The environment variable giving ``--pythons``'s default (same format).
PYTHONS_ENV = "CTXLOCK_BENCH_PYTHONS"

# The label of the running interpreter, printed by a child: its version, "t" if free-threaded.
_LABEL_CODE = (
    "import platform, sysconfig; "
    "print(platform.python_version() + ('t' if sysconfig.get_config_var('Py_GIL_DISABLED') "
    "else ''))"
)


@dataclass(frozen=True)
class Interpreter:
    """One interpreter's results of the interpreter rows, or why there are none."""

    #: As given to ``--pythons`` (this process's: ``sys.executable``).
    python: str
    #: Its version, plus "t" for a free-threaded build ("3.14.7t"); the path if unknown.
    label: str
    rows: Sequence[RowResult] = field(default_factory=tuple)
    error: str | None = None
    #: True for the interpreter running the report.
    this: bool = False

    def result(self, key: str) -> RowResult | None:
        return next((r for r in self.rows if r.key == key), None)

    def to_json(self) -> dict[str, object]:
        return {
            "python": self.python,
            "label": self.label,
            "this": self.this,
            "error": self.error,
            "rows": [r.to_json() for r in self.rows],
        }


def interpreter_label() -> str:
    """This interpreter's label: "3.11.7", "3.14.7", "3.14.7t" (free-threaded)."""
    free = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))
    return platform.python_version() + ("t" if free else "")


def this_interpreter(results: Sequence[RowResult], keys: Sequence[str]) -> Interpreter:
    """This process's entry, from its own results of the rows ``keys``."""
    rows = tuple(r for r in results if r.key in keys)
    return Interpreter(sys.executable, interpreter_label(), rows, this=True)


def parse_pythons(text: str | None) -> list[str]:
    """``P1,P2``: interpreter paths, comma-separated; empty parts are ignored."""
    return [part.strip() for part in (text or "").split(",") if part.strip()]


def _row_from_json(data: Mapping[str, object]) -> RowResult:
    names = RowResult.__dataclass_fields__
    return RowResult(**{k: v for k, v in data.items() if k in names})  # type: ignore[arg-type]


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop(PYTHONS_ENV, None)  # the child runs its own rows only
    return env


def _label_of(python: str) -> tuple[str | None, str | None]:
    """The interpreter's label, or None and why it cannot be run."""
    try:
        proc = subprocess.run(
            [python, "-c", _LABEL_CODE],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            env=_child_env(),
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"cannot run it: {exc}"
    if proc.returncode != 0:
        return None, f"cannot run it: {_last_line(proc.stderr) or f'exit status {proc.returncode}'}"
    return proc.stdout.strip(), None


def _last_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""


def _forward(stream: IO[bytes], prefix: str, out: IO[str], keep: list[str]) -> None:
    """Copy ``stream`` to ``out`` as it comes, ``prefix`` at the start of each line."""
    at_line_start = True
    kept: list[bytes] = []
    while chunk := os.read(stream.fileno(), 4096):
        kept.append(chunk)
        text = chunk.decode(errors="replace")
        pieces = text.split("\n")
        for i, piece in enumerate(pieces):
            if i > 0:
                out.write("\n")
                at_line_start = True
            if piece:
                if at_line_start:
                    out.write(prefix)
                out.write(piece)
                at_line_start = False
        out.flush()
    keep.append(b"".join(kept).decode(errors="replace"))


def run_elsewhere(
    python: str, keys: Sequence[str], cfg: Config, progress: IO[str] = sys.stderr
) -> Interpreter:
    """Run the rows ``keys`` in ``python``; never raises for a broken interpreter."""
    label, error = _label_of(python)
    if label is None:
        print(f"== {python}: error: {error}", file=progress, flush=True)
        return Interpreter(python, python, error=error)
    print(f"== {label} ({python}): {len(keys)} rows", file=progress, flush=True)
    command = [python, "-m", "ctxlock", "bench", "--rows", ",".join(keys), "--json"]
    command += ["--repeat", str(cfg.repeat)]
    if cfg.quick:
        command.append("--quick")
    try:
        child = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            env=_child_env(),
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return Interpreter(python, label, error=f"cannot run it: {exc}")
    stdout_pipe, stderr_pipe = child.stdout, child.stderr
    assert stdout_pipe is not None and stderr_pipe is not None
    out: list[bytes] = []
    reader = threading.Thread(target=lambda: out.append(stdout_pipe.read()), daemon=True)
    reader.start()
    err: list[str] = []
    _forward(stderr_pipe, f"[{label}] ", progress, err)
    status = child.wait()
    reader.join()
    stdout = b"".join(out).decode(errors="replace")
    try:
        report = json.loads(stdout)
        rows = tuple(_row_from_json(row) for row in report["rows"])
    except (ValueError, KeyError, TypeError) as exc:
        reason = _last_line("".join(err)) or f"no report ({type(exc).__name__}: {exc})"
        return Interpreter(python, label, error=f"exit status {status}: {reason}")
    return Interpreter(python, label, rows)
