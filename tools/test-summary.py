#!/usr/bin/env python3
"""test-summary.py TESTLOG... [--strict] [--allow FILE] [--expect-suites a,b,...]

Prints one 'N passed, N failed, N skipped' line from meson's testlog.json
files (the release build's and the sanitizer lane's), counting each gtest
case (not each binary), so CI reads a real total.

A green run must mean what it says, so with --strict it also fails (exit 1)
when:
  - a test was skipped, unless a line of the allow-list (--allow,
    tests/skip-allowlist.txt; docs/testing.md) allows that test for that
    reason: 'GLOB | REASON-GLOB; REASON-GLOB... | why it may be skipped',
    the first glob on 'suite/test:Case.name', the others on the reason the
    skip gave (a gtest case's GTEST_SKIP text, a script's 'SKIPPED...'
    line). The same test skipped for another reason (a GPU test of a build
    without CUDA, on a machine with a GPU) is not allowed. A skip is a gtest
    case that said SKIPPED, a test meson marked SKIP (exit 77), or a passing
    test that printed 'SKIPPED' for a part of itself;
  - a suite of --expect-suites did not run at all (a dependency missing at
    configure time makes a suite vanish instead of fail).
Without --strict these are listed and the exit status is 0.
"""
import argparse
import fnmatch
import json
import re
import sys

CASE_OK = re.compile(r"^\[       OK \] (\S+) \(", re.M)
CASE_FAILED = re.compile(r"^\[  FAILED  \] (\S+) \(", re.M)
CASE_SKIPPED = re.compile(r"^\[  SKIPPED \] (\S+) \(", re.M)
# A script that printed "SKIPPED: reason" (and exited 77, or 0), and a gtest
# case that printed it skipped a part of itself ("SKIPPED (mpi part): ...";
# a GTEST_SKIP's own message is not that: it follows a "Skipped" line).
SCRIPT_SKIPPED = re.compile(r"^SKIPPED\b[^\n]*", re.M)
PART_SKIPPED = re.compile(r"^SKIPPED \([^\n]*", re.M)


def suite_and_test(name):
    """'gsync:unit / kernels' -> ('unit', 'kernels'); a test of several
    suites ('gsync:integration+soak / soak') counts under the first."""
    left, _, test = name.partition(" / ")
    return left.split(":", 1)[-1].split("+")[0], test


def load_allow(path):
    """[(test glob, [reason globs], why)]; a line that names no reason is an
    error: a rule allows a test's skip for given reasons only."""
    rules = []
    if not path:
        return rules
    for n, line in enumerate(open(path), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = [p.strip() for p in line.split(" | ")]
        if len(parts) != 3 or not all(parts):
            raise SystemExit(f"test-summary: {path}:{n}: not 'GLOB | REASON-GLOB; ... | why': "
                             f"{line}")
        reasons = [r.strip() for r in parts[1].split("; ") if r.strip()]
        rules.append((parts[0], reasons, parts[2]))
    return rules


def allowed(rules, ident, reason):
    for pattern, reasons, why in rules:
        if fnmatch.fnmatchcase(ident, pattern) and any(
                fnmatch.fnmatchcase(reason, r) for r in reasons):
            return why
    return None


def gtest_skip_reason(out, case):
    """What a gtest case said when it skipped: the text after its 'Skipped'
    line, up to its '[  SKIPPED ]' line."""
    m = re.search(r"^\[ RUN      \] " + re.escape(case) + r"\n(.*?)^\[  SKIPPED \] " +
                  re.escape(case) + r" \(", out, re.M | re.S)
    if not m:
        return "GTEST_SKIP (no reason found)"
    _, found, after = m.group(1).partition("Skipped\n")
    text = " ".join(ln.strip() for ln in after.splitlines() if ln.strip()) if found else ""
    return text or "GTEST_SKIP (no reason given)"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("testlogs", nargs="+")
    ap.add_argument("--strict", action="store_true")
    ap.add_argument("--allow", help="the skip allow-list")
    ap.add_argument("--expect-suites", default="", help="comma-separated suites that must have run")
    o = ap.parse_args()
    rules = load_allow(o.allow)
    passed = failed = 0
    skips = []  # (ident, why)
    suites = set()
    for line in (ln for path in o.testlogs for ln in open(path)):
        t = json.loads(line)
        suite, test = suite_and_test(t["name"])
        suites.add(suite)
        out = t.get("stdout", "") or ""
        ok = CASE_OK.findall(out)
        bad = CASE_FAILED.findall(out)
        skipped = CASE_SKIPPED.findall(out)
        if not ok and not bad and not skipped:  # not a gtest binary: the test itself
            if t["result"] == "OK":
                passed += 1
                for m in SCRIPT_SKIPPED.findall(out):
                    skips.append((f"{suite}/{test}", m.strip()))
            elif t["result"] == "SKIP":
                why = SCRIPT_SKIPPED.search(out)
                skips.append((f"{suite}/{test}", why.group(0) if why else "exit 77"))
            else:
                failed += 1
            continue
        if t["result"] not in ("OK", "SKIP") and not bad:
            bad = ["(crashed or timed out between cases)"]
        passed += len(ok)
        failed += len(bad)
        for case in skipped:
            skips.append((f"{suite}/{test}:{case}", gtest_skip_reason(out, case)))
        # A passing case that printed SKIPPED for part of itself checked
        # less than it says.
        for m in PART_SKIPPED.findall(out):
            skips.append((f"{suite}/{test}", m.strip()))
    unexpected = [(i, w) for i, w in skips if allowed(rules, i, w) is None]
    print(f"{passed} passed, {failed} failed, {len(skips)} skipped")
    for ident, why in skips:
        reason = allowed(rules, ident, why)
        tag = f"allowed: {reason}" if reason else "NOT ALLOWED (not for this reason)"
        print(f"  skipped {ident}: {why} [{tag}]")
    missing = [s for s in o.expect_suites.split(",") if s and s not in suites]
    for s in missing:
        print(f"  suite '{s}' did not run (a dependency missing at configure time?)")
    if o.strict and (unexpected or missing):
        print(f"test-summary: {len(unexpected)} skip(s) not on the allow-list ({o.allow}), "
              f"{len(missing)} suite(s) missing: a green run must mean what it says")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
