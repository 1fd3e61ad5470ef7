#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Prints the ninja targets that the tests of some meson suites need.

tools/suite-targets.py BUILD_DIR SUITE...

A lane builds only what its suites run (the test programs and what the
tests depend on), not the whole tree: on two cores every file compiled
twice is CI time. meson's own `meson test` would build everything first;
the lanes build these targets and run `meson test --no-rebuild`.
"""
import json
import os
import subprocess
import sys


def main() -> int:
    if len(sys.argv) < 3:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    build, suites = sys.argv[1], {"gsync:" + s for s in sys.argv[2:]}
    intro = lambda what: json.loads(subprocess.check_output(
        ["meson", "introspect", what, build]))
    targets = {t["id"]: t for t in intro("--targets")}
    want = set()
    for test in intro("--tests"):
        if not suites & set(test["suite"]):
            continue
        for dep in test["depends"]:
            if dep in targets:
                want.update(targets[dep]["filename"])
    found = {s.split(":", 1)[1] for t in intro("--tests") for s in t["suite"]} & \
        {s.split(":", 1)[1] for s in suites}
    missing = {s.split(":", 1)[1] for s in suites} - found
    if missing:
        print("suite-targets: no tests in suite(s) " + ", ".join(sorted(missing)),
              file=sys.stderr)
        return 1
    root = os.path.abspath(build)
    for f in sorted(want):
        print(os.path.relpath(f, root) if os.path.isabs(f) else f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
