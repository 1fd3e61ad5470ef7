#!/usr/bin/env python3
"""Prints one 'N passed, N failed, N skipped' line from meson's testlog.json,
counting each gtest case (not each binary), so CI reads a real total."""
import json
import re
import sys

passed = failed = skipped = 0
binaries_failed = 0
for line in open(sys.argv[1]):
    t = json.loads(line)
    out = t.get("stdout", "") or ""
    cases_ok = len(re.findall(r"^\[       OK \]", out, re.M))
    cases_bad = len(re.findall(r"^\[  FAILED  \] \S+ \(", out, re.M))
    cases_skip = len(re.findall(r"^\[  SKIPPED \] \S+ \(", out, re.M))
    if cases_ok + cases_bad + cases_skip == 0:  # not a gtest binary: count the test itself
        if t["result"] == "OK":
            cases_ok = 1
        elif t["result"] == "SKIP":
            cases_skip = 1
        else:
            cases_bad = 1
    elif t["result"] not in ("OK", "SKIP") and cases_bad == 0:
        cases_bad = 1  # crashed or timed out between cases
    passed += cases_ok
    failed += cases_bad
    skipped += cases_skip
print(f"{passed} passed, {failed} failed, {skipped} skipped")
