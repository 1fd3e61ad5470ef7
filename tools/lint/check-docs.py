#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The documents stay findable and their paths true (docs/README.md):

- every docs/*.md is a row of the index docs/README.md, and every row names
  a document that exists;
- every repository path a document or the README names in backticks
  (daemon/..., tools/..., tests/..., and the other top-level folders)
  exists, so a moved file cannot leave a dead pointer behind.

Usage: check-docs.py ROOT. Exit 1 naming each problem.
"""
import pathlib
import re
import sys

TOP = ("daemon/", "libclient/", "include/", "protocol/", "tools/", "tests/", "python/",
       "deploy/", "docs/", "examples/")
# A backticked path: letters, digits and ./_- only, one of TOP first.
PATH = re.compile(r"`((?:%s)[A-Za-z0-9_./-]*)`" % "|".join(re.escape(t) for t in TOP))


def exists(root, p):
    p = p.rstrip(".")
    if (root / p).exists():
        return True
    # A built program named by its build path (tools/bench/bench_trace):
    # its source is there.
    return any((root / (p + ext)).exists() for ext in (".cc", ".py", ".sh", ".cu"))


def main():
    root = pathlib.Path(sys.argv[1])
    problems = []
    index = (root / "docs/README.md").read_text()
    listed = set(re.findall(r"\]\(([a-z0-9_-]+\.md)\)", index))
    for doc in sorted((root / "docs").glob("*.md")):
        if doc.name != "README.md" and doc.name not in listed:
            problems.append(f"docs/{doc.name} is not in the index docs/README.md")
    for name in sorted(listed):
        if not (root / "docs" / name).exists():
            problems.append(f"docs/README.md lists {name}, which does not exist")
    for doc in sorted((root / "docs").glob("*.md")) + [root / "README.md"]:
        for n, line in enumerate(doc.read_text().splitlines(), 1):
            for p in PATH.findall(line):
                if not exists(root, p):
                    problems.append(f"{doc.relative_to(root)}:{n}: `{p}` does not exist")
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
