#!/usr/bin/env bash
# The GPU bundle (docs/gpu.md, "The bundle for a machine without -dev
# libraries"), made from this build: it must prove itself self-contained
# here (tools/gpu/bundle.sh --check: ldd under env -i, its programs and a
# two-host test bed run with nothing of this machine but glibc, a chroot of
# glibc and the bundle), and the device check run on it on a machine
# without a GPU must fail saying there is none - never pass.
#   test_bundle.sh SOURCE_ROOT BUILD_DIR
set -uo pipefail
root=$1
build=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
# shellcheck source=tests/util/bundle_test.sh
. "$root/tests/util/bundle_test.sh"
made_and_checked "$root" tools/gpu/bundle.sh "$build" "$dir/bundle"
if nvidia-smi -L >/dev/null 2>&1; then
  echo "SKIPPED: a GPU is here: the device check's dry run is for a machine without one" \
    "(run tools/gpu/device-check.sh itself)"
  exit 77
fi
(cd "$root" && GSYNC_BUNDLE="$dir/bundle" OUT="$dir/dc" bash tools/gpu/device-check.sh) \
  >"$dir/dc.txt" 2>&1
rc=$?
cat "$dir/dc/summary.txt"
last=$(tail -1 "$dir/dc/summary.txt")
if [ "$rc" -eq 0 ] || [[ "$last" != "device-check: FAIL ("*"no GPU here"* ]]; then
  echo "FAIL: without a GPU the device check must fail saying so (exit status $rc)"
  exit 1
fi
echo "PASS: the bundle runs with glibc alone, and the device check on it fails without a GPU"
