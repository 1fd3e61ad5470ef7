#!/usr/bin/env bash
# The test command: installs dependencies, builds, runs the whole suite
# (unit, integration, systemd, rxe, torch), and ends with meson's summary
# plus one "N passed, N failed, N skipped" line. A green run means what it
# says: it fails on a skip that tests/skip-allowlist.txt does not allow, and
# (run without arguments) on a suite that did not run at all
# (docs/testing.md). GSYNC_ALLOW_SKIPS=1 lists them without failing, for a
# partial local run on a machine that lacks something.
set -uo pipefail
cd "$(dirname "$0")/.."
bash tools/setup-deps.sh || exit 1
bash tools/build.sh || exit 1
build=${BUILD_DIR:-build}
meson test -C "$build" --print-errorlogs --num-processes 1 "$@"
rc=$?
strict=(--strict)
[ "${GSYNC_ALLOW_SKIPS:-0}" = 1 ] && strict=()
expect=()
[ $# -eq 0 ] && expect=(--expect-suites unit,integration,systemd,rxe,torch)
python3 tools/test-summary.py "$build/meson-logs/testlog.json" "${strict[@]}" \
  --allow tests/skip-allowlist.txt "${expect[@]}" || rc=1
exit $rc
