#!/usr/bin/env python3
"""check-layout.py [ROOT]: the size rules of the C++ folders and the
layering rules of daemon/.

  - no .cc or .h file in daemon/, libclient/ or tools/ over 600 lines;
  - no function in them over 80 lines (a definition whose body opens at
    the end of a line at namespace depth and closes with a '}' at column 0,
    as clang-format lays them out; the lines between the braces count; a
    namespace or an extern "C" block is not a function);
  - the include rules docs/architecture.md states: collective/ includes
    nothing of jobs/ or shm/, admin/ nothing of the daemon's wiring, core/
    nothing of another daemon folder but config/, jobs/ nothing of
    collective/ (the build's layer views enforce more; this names the rule
    that broke);
  - JSON is written by json_text() (daemon/core/json_text.h) only: a
    .dump() elsewhere in daemon/ throws on the first invalid UTF-8 byte a
    peer or a client put in a string (docs/errors.md, "Text from outside").
Prints one line per violation and exits 1 if there is any.
"""
import os
import re
import sys

MAX_FILE = 600
MAX_FUNCTION = 80
# The C++ folders the size rules cover.
SIZED = ["daemon", "libclient", "tools"]
FORBIDDEN = [
    ("daemon/collective/", re.compile(r'#include "daemon/(jobs|shm|ps)/')),
    ("daemon/ps/", re.compile(r'#include "daemon/(jobs|shm|collective|pipeline)/')),
    ("daemon/admin/", re.compile(r'#include "daemon/(gsyncd\.h|core/daemon\.h)')),
    ("daemon/core/", re.compile(r'#include "daemon/(?!core/|config/)')),
    ("daemon/jobs/", re.compile(r'#include "daemon/collective/')),
]
DUMP = re.compile(r'\.dump\s*\(')
DUMP_ALLOWED = "daemon/core/json_text.h"
STRINGS = re.compile(r'"(\\.|[^"\\])*"|\'(\\.|[^\'\\])*\'')
EXTERN_C = re.compile(r'^\s*extern\s+"C"\s*\{')


def code_of(line):
    """The line without its string and char literals and its // comment."""
    line = STRINGS.sub('""', line)
    return line.split("//", 1)[0]


def functions(lines):
    """(opening line, first body line, last body line) of every top-level
    definition: a '}' at column 0 that is not the end of a namespace, of an
    extern "C" block or of a type, matched with its '{' by counting braces
    backwards."""
    out = []
    for i, line in enumerate(lines):
        if not line.startswith("}") or line.startswith("};") or "namespace" in line:
            continue
        depth = 0
        for j in range(i, -1, -1):
            code = code_of(lines[j])
            depth += code.count("}") - code.count("{")
            if depth == 0:
                if not EXTERN_C.match(lines[j]):
                    out.append((j, j + 1, i - 1))
                break
    return out


def read_lines(path):
    with open(path, encoding="utf-8") as fh:
        lines = fh.read().split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def sources(root, folder):
    """(path relative to root, lines) of every .cc and .h under folder."""
    for dirpath, dirnames, files in os.walk(os.path.join(root, folder)):
        dirnames.sort()
        for f in sorted(files):
            if f.endswith((".cc", ".h")):
                path = os.path.join(dirpath, f)
                yield os.path.relpath(path, root), read_lines(path)


def size_violations(rel, lines):
    bad = []
    if len(lines) > MAX_FILE:
        bad.append(f"{rel}: {len(lines)} lines (at most {MAX_FILE})")
    for name, first, last in functions(lines):
        n = last - first + 1
        if n > MAX_FUNCTION:
            bad.append(f"{rel}:{name + 1}: function of {n} lines (at most {MAX_FUNCTION}): "
                       f"{lines[name].strip()[:70]}")
    return bad


def daemon_violations(rel, lines):
    """The rules of daemon/ beyond size: JSON through json_text(), layers."""
    bad = []
    if rel != DUMP_ALLOWED:
        for n, line in enumerate(lines, 1):
            if DUMP.search(code_of(line)):
                bad.append(f"{rel}:{n}: {line.strip()}: write JSON with json_text() "
                           f"({DUMP_ALLOWED}): dump() throws on invalid UTF-8")
    for prefix, pattern in FORBIDDEN:
        if not rel.startswith(prefix):
            continue
        for n, line in enumerate(lines, 1):
            if pattern.search(line):
                bad.append(f"{rel}:{n}: {line.strip()} breaks the layering "
                           f"(docs/architecture.md, \"Layers\")")
    return bad


def check(root):
    bad = []
    for folder in SIZED:
        for rel, lines in sources(root, folder):
            bad += size_violations(rel, lines)
            if folder == "daemon":
                bad += daemon_violations(rel, lines)
    return bad


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
    bad = check(os.path.abspath(root))
    for b in bad:
        print(b)
    print(f"check-layout: {len(bad)} violation(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
