#!/usr/bin/env python3
"""Fail if the modules of `src/core` or of `src/python` depend on each other in a cycle.

Each `.rs` file of a directory is a module. A module depends on a sibling when it names
it in a path: `use super::x`, `use super::{x, y::Z}`, `super::x::f()`, `crate::core::x`
(for `src/core`), `crate::python::x` or `$crate::python::x` (for `src/python`, where
`lock_methods!` expands in other files). `mod.rs` only declares the modules and is left
out. Prints every cycle found (one per strongly connected component) and exits 1, or
prints the order of the layers (leaves first) and exits 0. Usage:
`scripts/check-layers.py [src]`.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

# `super::` or `crate::<dir>::` followed by a module name or a `{...}` group.
PATH = re.compile(
    r"(?:\$?crate::(?P<dir>core|python)|(?<![\w:])super)::(?P<rest>\{[^;]*?\}|\w+)", re.S
)
COMMENT = re.compile(r"//[^\n]*")


def names(rest: str) -> set[str]:
    """Module names a path segment starts with: `x` or each first name inside `{...}`."""
    if not rest.startswith("{"):
        return {rest}
    found = set()
    depth, item = 0, ""
    for ch in rest[1:-1] + ",":
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        if ch == "," and depth == 0:
            head = item.strip().split("::")[0].split(" ")[0]
            if head:
                found.add(head)
            item = ""
        else:
            item += ch
    return found


def graph(directory: Path) -> dict[str, set[str]]:
    modules = {p.stem for p in directory.glob("*.rs") if p.stem != "mod"}
    edges: dict[str, set[str]] = {m: set() for m in modules}
    for m in modules:
        text = COMMENT.sub("", (directory / f"{m}.rs").read_text())
        for match in PATH.finditer(text):
            if match.group("dir") not in (None, directory.name):
                continue
            for dep in names(match.group("rest")):
                if dep in modules and dep != m:
                    edges[m].add(dep)
    return edges


def components(edges: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components, leaves first."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            found.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def main() -> int:
    src = Path(sys.argv[1] if len(sys.argv) > 1 else "src")
    failed = False
    for directory in (src / "core", src / "python"):
        edges = graph(directory)
        comps = components(edges)
        cycles = [c for c in comps if len(c) > 1]
        for c in cycles:
            failed = True
            detail = "; ".join(f"{m} -> {', '.join(sorted(edges[m] & set(c)))}" for m in c)
            print(f"{directory}: cycle among {', '.join(c)} ({detail})")
        if not cycles:
            print(f"{directory}: no cycles; leaves first: {' '.join(c[0] for c in comps)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
