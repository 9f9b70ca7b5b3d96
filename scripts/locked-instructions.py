#!/usr/bin/env python3
"""Executed instructions and locked (atomic read-modify-write) instructions per loop
iteration of a Python statement, counted by valgrind's callgrind, so noise cannot touch
them.

    scripts/locked-instructions.py [--python PY] [--setup CODE] STMT

runs ``for _ in range(n): STMT`` after ``SETUP`` in ``PY`` for two values of ``n`` and
prints, per iteration (the difference of the two runs over the difference of ``n``):
every locked instruction executed (``lock``-prefixed, and ``xchg`` with memory, which is
locked by itself on x86) with its function, their total, and the instruction total.
Example, ctxlock's ``with`` against ``threading.Lock``'s::

    scripts/locked-instructions.py --python .venv-3.14t/bin/python \\
        --setup 'import ctxlock; lk = ctxlock.Lock()' 'with lk: pass'
    scripts/locked-instructions.py --python .venv-3.14t/bin/python \\
        --setup 'import threading; lk = threading.Lock()' 'with lk: pass'

Needs valgrind and objdump (x86-64 mnemonics).
"""

from __future__ import annotations

import argparse
import collections
import re
import subprocess
import sys
import tempfile
from pathlib import Path

LOOP = """\
import sys
{setup}
def _loop(_n):
    for _ in range(_n):
        {stmt}
_loop(1000)
_loop(int(sys.argv[1]))
"""

_COST = re.compile(r"^(0x[0-9a-f]+) \S+ (\d+)")
_LOCKED = re.compile(r"\block\b|\bxchg\b")
_INSN = re.compile(r"\s*([0-9a-f]+):\s+(.*)")


def counts(out: Path) -> collections.Counter[tuple[str, int]]:
    """Instructions executed, by (object, address), from a callgrind file written with
    ``--dump-instr=yes --compress-pos=no --compress-strings=no``."""
    got: collections.Counter[tuple[str, int]] = collections.Counter()
    obj, after_call = "", False
    for line in out.read_text().splitlines():
        if line.startswith("ob="):
            obj = line[3:].strip()
        elif line.startswith("calls="):
            after_call = True  # the next cost line is the call's inclusive cost
        elif m := _COST.match(line):
            if not after_call:
                got[(obj, int(m.group(1), 16))] += int(m.group(2))
            after_call = False
    return got


def locked_instructions(obj: str) -> dict[int, tuple[str, str]]:
    """The locked instructions of an object file: address -> (function, instruction)."""
    dis = subprocess.run(
        ["objdump", "-d", "--no-show-raw-insn", "-C", obj],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    found, function = {}, "?"
    for line in dis.splitlines():
        if line.endswith(">:"):
            function = line.split("<", 1)[1][:-2]
        elif (m := _INSN.match(line)) and _LOCKED.search(m.group(2)):
            found[int(m.group(1), 16)] = (function, m.group(2).strip())
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("stmt", help="the statement to count, one line")
    parser.add_argument("--setup", default="pass", help="code run once before (one line)")
    parser.add_argument("--python", default=sys.executable, help="the interpreter")
    parser.add_argument("-n", type=int, nargs=2, default=(10_000, 60_000), metavar="N")
    args = parser.parse_args()
    n1, n2 = sorted(args.n)
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp, "loop.py")
        script.write_text(LOOP.format(setup=args.setup, stmt=args.stmt))
        runs = []
        for n in (n1, n2):
            out = Path(tmp, f"callgrind.{n}")
            subprocess.run(
                ["valgrind", "--tool=callgrind", "--dump-instr=yes", "--compress-pos=no",
                 "--compress-strings=no", f"--callgrind-out-file={out}",
                 args.python, str(script), str(n)],
                check=True,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )  # fmt: skip
            runs.append(counts(out))
    first, second = runs
    per = n2 - n1
    total = (sum(second.values()) - sum(first.values())) / per
    locked_total = 0.0
    for obj in sorted({o for o, _ in second if o.startswith("/")}):
        for addr, (function, insn) in sorted(locked_instructions(obj).items()):
            each = (second[(obj, addr)] - first[(obj, addr)]) / per
            if each >= 0.05:
                locked_total += each
                print(f"{each:6.2f}  {insn:40.40s} {function[:90]}")
    print(f"{locked_total:6.2f}  locked instructions per iteration")
    print(f"{total:6.0f}  instructions per iteration")
    return 0


if __name__ == "__main__":
    sys.exit(main())
