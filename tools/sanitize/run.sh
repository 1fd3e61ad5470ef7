#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# tools/sanitize/run.sh [MESON TEST ARGS...]: the sanitizer lane
# (docs/testing.md, "The sanitizer lane"). Configures and builds the
# daemon, libgsync, the tools and the tests with AddressSanitizer and
# UndefinedBehaviorSanitizer (gcc, -Db_sanitize=address,undefined) in their
# own build directory ($SANITIZE_BUILD_DIR, default build-sanitize), runs
# the unit and integration suites there, and fails on any test failure and
# on any sanitizer report from any process the tests started: the daemons,
# the client ranks, the tools. Reports are written to files
# ($build/sanitizer-reports/, by log_path) rather than to each process's
# stderr, which for a daemon is a log file nobody reads, and listed at the
# end. UBSan halts at its first report; LeakSanitizer runs at every exit.
set -uo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
build=${SANITIZE_BUILD_DIR:-$root/build-sanitize}
case $build in /*) ;; *) build=$root/$build ;; esac
start=$(date +%s)

bash "$root/tools/setup-deps.sh" --lab || exit 1
source "$root/tools/unity-args.sh"
if [ ! -f "$build/build.ninja" ]; then
  # -O0 and line tables only (-g1): the build is most of the lane's time
  # on 2 cores. Measured per file, UBSan's checks at -O1 take twice the
  # compile time they take at -O0 (test_multihost.cc: 41.7 s at -O1, 18.4 s
  # at -O0), and a report's stack needs no more than file and line. The
  # reduce kernels and codecs keep their own -O3 (daemon/reduce/meson.build).
  meson setup "$build" "$root" -Dbuildtype=plain -Doptimization=0 -Dc_args=-g1 \
    -Dcpp_args=-g1 -Db_sanitize=address,undefined -Db_lundef=false -Dcuda=disabled \
    "${unity[@]}" || exit 1
fi
# Regenerated first where a meson.build changed since the last run: the
# targets are read from the build's introspection, which would otherwise
# still name tests added, renamed or removed since.
ninja -C "$build" build.ninja >/dev/null || exit 1
# What the two suites run, not the whole tree (benchmarks, the rxe lane's
# program): tools/suite-targets.py.
targets=$(python3 "$root/tools/suite-targets.py" "$build" unit integration) || exit 1
# shellcheck disable=SC2086 # one target per word
ninja -C "$build" $targets || exit 1
built=$(date +%s)

reports=$build/sanitizer-reports
rm -rf "$reports"
mkdir -p "$reports"
# halt_on_error: a report is a failure at once, not a line in a log.
# detect_leaks: LeakSanitizer at the exit of every instrumented process.
# The suppressions name third-party libraries only (their own leaks at
# exit); nothing of gsync is suppressed.
export ASAN_OPTIONS="detect_leaks=1:halt_on_error=1:abort_on_error=1:detect_stack_use_after_return=1:check_initialization_order=1:strict_init_order=1:log_path=$reports/asan"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:log_path=$reports/ubsan"
export LSAN_OPTIONS="suppressions=$root/tools/sanitize/lsan.supp:print_suppressions=0"

# Sanitized code runs 2-3 times slower: the suites' timeouts stretch.
# The soak runs 60 s in the release lane, where its resident-set check
# means something; here it runs 20 s for LeakSanitizer and the fd count.
GSYNC_SOAK_SECONDS=${GSYNC_SOAK_SECONDS:-20} \
meson test -C "$build" --no-rebuild --suite unit --suite integration --print-errorlogs \
  --num-processes 1 --timeout-multiplier 3 "$@"
rc=$?
end=$(date +%s)

found=$(find "$reports" -type f | sort)
if [ -n "$found" ]; then
  echo "sanitize: sanitizer reports:"
  for f in $found; do
    echo "==== $f"
    cat "$f"
  done
  rc=1
fi
echo "sanitize: took $((end - start)) s (build $((built - start)) s, tests $((end - built)) s)"
if [ "$rc" -ne 0 ]; then
  echo "sanitize: FAILED"
  exit 1
fi
echo "sanitize: the unit and integration suites passed with no sanitizer report"
