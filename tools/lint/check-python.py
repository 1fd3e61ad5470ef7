#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The shape of python/ (docs/architecture.md): the product package `gsync`
and the test tooling `gsync_testbed` apart, and no import cycle.

- no module of `gsync` imports `gsync_testbed` (a training script needs
  only the product; the tooling may use the product);
- no import cycle among the modules of a package, counting imports inside
  functions too (they hide a cycle, they do not remove it; the package's
  own __init__ aside, which every submodule's import runs first anyway);
- no file over 600 lines (the C++ folders' rule, tools/lint/check-layout.py).

Usage: check-python.py ROOT. Exit 1 naming each problem.
"""
import ast
import pathlib
import sys

MAX_LINES = 600


def imports(path):
    """The gsync* modules a file imports, anywhere in it."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
            # `from gsync import _lib` imports the submodule gsync._lib.
            out |= {f"{node.module}.{a.name}" for a in node.names}
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
    return {m for m in out if m.split(".")[0] in ("gsync", "gsync_testbed")}


def cycle_from(graph, start):
    """A cycle through start as a list of modules, or None."""
    stack, seen = [(start, [start])], set()
    while stack:
        node, path = stack.pop()
        for nxt in sorted(graph.get(node, ())):
            if nxt == start:
                return path + [start]
            if nxt not in seen:
                seen.add(nxt)
                stack.append((nxt, path + [nxt]))
    return None


def main():
    root = pathlib.Path(sys.argv[1]) / "python"
    problems = []
    graph = {}
    for pkg in ("gsync", "gsync_testbed"):
        for f in sorted((root / pkg).glob("*.py")):
            mod = pkg if f.stem == "__init__" else f"{pkg}.{f.stem}"
            deps = imports(f)
            lines = len(f.read_text().splitlines())
            if lines > MAX_LINES:
                problems.append(f"python/{pkg}/{f.name}: {lines} lines, over {MAX_LINES}")
            if pkg == "gsync" and any(d.split(".")[0] == "gsync_testbed" for d in deps):
                problems.append(f"python/{pkg}/{f.name}: the product imports the test tooling "
                                "(gsync_testbed)")
            graph[mod] = {d for d in deps if d != pkg and d != mod}
    for mod in sorted(graph):
        c = cycle_from({m: {d for d in ds if d in graph} for m, ds in graph.items()}, mod)
        if c:
            problems.append("an import cycle: " + " -> ".join(c))
            break
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
