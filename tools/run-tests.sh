#!/usr/bin/env bash
# The test command: installs dependencies, builds, runs the whole suite
# (unit, integration, systemd), and ends with meson's summary plus one
# "N passed, N failed" line.
set -uo pipefail
cd "$(dirname "$0")/.."
bash tools/setup-deps.sh || exit 1
bash tools/build.sh || exit 1
build=${BUILD_DIR:-build}
meson test -C "$build" --print-errorlogs --num-processes 1 "$@"
rc=$?
python3 tools/test-summary.py "$build/meson-logs/testlog.json"
exit $rc
