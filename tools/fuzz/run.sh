#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# tools/fuzz/run.sh [SECONDS] [TARGET...]: the fuzzing lane (docs/testing.md,
# "The fuzzing lane"). Configures and builds the fuzz build directory
# (clang, -Dfuzz=enabled, ASan + UBSan; $FUZZ_BUILD_DIR, default
# build-fuzz), then runs every fuzz target (or the TARGETs named) for
# SECONDS each (default 30), as many at once as there are CPUs, starting
# from its seed corpus and its kept regressions. Fails if any target
# crashes, leaks, trips a sanitizer, breaks a FUZZ_CHECK or times out on an
# input; the input is left in $FUZZ_BUILD_DIR/fuzz-out/ with the command
# that reproduces it.
#
# What the fuzzers find that is new stays in $FUZZ_BUILD_DIR/fuzz-out/
# <target>/corpus; nothing in the source tree is written.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
seconds=${1:-30}
shift || true
build=${FUZZ_BUILD_DIR:-$root/build-fuzz}
case $build in /*) ;; *) build=$root/$build ;; esac
# Every target tests/fuzz/fuzz_targets.h lists (one list: a target added
# there is fuzzed here without anyone remembering to).
mapfile -t all_targets < <(sed -n 's/^ *X(\([a-z_]*\)).*/\1/p' "$root/tests/fuzz/fuzz_targets.h")
[ ${#all_targets[@]} -gt 0 ] || { echo "fuzz: no targets in tests/fuzz/fuzz_targets.h" >&2; exit 1; }
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=("${all_targets[@]}")
jobs=${FUZZ_JOBS:-$(nproc)}
start=$(date +%s)

"$root/tools/setup-deps.sh" --lab
source "$root/tools/unity-args.sh"
if [ ! -f "$build/build.ninja" ]; then
  # -O1 and line tables only: the build is most of the lane's time on 2
  # cores, and stack traces need no more to name file and line.
  CC=clang CXX=clang++ meson setup "$build" "$root" \
    -Dfuzz=enabled -Dtests=disabled -Dcuda=disabled -Ddpdk=disabled \
    -Dbuildtype=plain -Doptimization=1 -Dc_args=-gline-tables-only \
    -Dcpp_args=-gline-tables-only -Db_sanitize=address,undefined -Db_lundef=false "${unity[@]}"
fi
ninja -C "$build" "${targets[@]/#/tests/fuzz/fuzz_}"
built=$(date +%s)
echo "fuzz: built in $((built - start)) s; running ${#targets[@]} targets for ${seconds} s each," \
  "$jobs at a time"

out=$build/fuzz-out
rm -rf "$out"
mkdir -p "$out"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:symbolize=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}

run_one() {
  local t=$1 dir=$out/$1
  mkdir -p "$dir/corpus"
  local extra=()
  [ -d "$root/tests/fuzz/regressions/$t" ] && extra+=("$root/tests/fuzz/regressions/$t")
  # -timeout: an input slower than 10 s is a hang; -rss_limit_mb: one that
  # needs 2 GiB is a leak or a runaway allocation; -max_len: above every
  # seed (the example config is 5 KiB).
  if "$build/tests/fuzz/fuzz_$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
      -max_len=16384 -print_final_stats=1 -artifact_prefix="$dir/" \
      "$dir/corpus" "$root/tests/fuzz/corpus/$t" "${extra[@]}" >"$dir/log" 2>&1; then
    echo "fuzz: $t ok ($(grep -m1 -o 'stat::number_of_executed_units: *[0-9]*' "$dir/log" |
      grep -o '[0-9]*$') runs)"
  else
    echo "fuzz: $t FAILED; its log: $dir/log"
    tail -n 40 "$dir/log"
    for a in "$dir"/crash-* "$dir"/leak-* "$dir"/timeout-* "$dir"/oom-*; do
      [ -e "$a" ] || continue
      echo "fuzz: input kept: $a"
      echo "fuzz:   reproduce: $build/tests/fuzz/fuzz_$t $a"
      echo "fuzz:   then fix the bug and keep the input: cp $a tests/fuzz/regressions/$t/NAME"
    done
    return 1
  fi
}

failed=0
running=0
pids=()
for t in "${targets[@]}"; do
  run_one "$t" &
  pids+=($!)
  running=$((running + 1))
  if [ "$running" -ge "$jobs" ]; then
    wait -n || failed=1
    running=$((running - 1))
  fi
done
while [ "$running" -gt 0 ]; do
  wait -n || failed=1
  running=$((running - 1))
done

end=$(date +%s)
echo "fuzz: lane took $((end - start)) s (build $((built - start)) s, fuzzing $((end - built)) s)"
if [ "$failed" -ne 0 ]; then
  echo "fuzz: FAILED"
  exit 1
fi
echo "fuzz: every target ran ${seconds} s without a crash, a leak or a hang"
