#!/usr/bin/env bash
# The core-per-process measurement's bundle (tools/bench/cores-bundle.sh;
# docs/performance.md, "With a core per process"), made from this build:
# it must prove itself self-contained here (ldd under env -i; gsync-perf
# --compare gloo,mpi from it under strace opening nothing outside it but
# glibc's and the kernel's; a chroot), and tools/bench/device-cores.sh
# --dry-run on it must give every part's figures: 4 KiB across 4 pinned
# hosts with 1 and 2 ranks a host against Open MPI and Gloo, bench_ddp.py
# across 2 hosts under this machine's torch, a 4 KiB op's breakdown.
#   test_cores_bundle.sh SOURCE_ROOT BUILD_DIR
set -uo pipefail
root=$1
build=$2
python=/usr/bin/python3
if ! "$python" -c 'import torch' 2>/dev/null; then
  echo "SKIPPED: $python has no torch (Debian's python3-torch): bench_ddp.py cannot run"
  exit 77
fi
for d in gloo-allreduce mpi-allreduce; do
  if [ ! -x "$build/tools/peers/$d" ]; then
    echo "FAIL: $build/tools/peers/$d is not built (libgloo-dev, libopenmpi-dev)"
    exit 1
  fi
done
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
# shellcheck source=tests/util/bundle_test.sh
. "$root/tests/util/bundle_test.sh"
made_and_checked "$root" tools/bench/cores-bundle.sh "$build" "$dir/bundle"
GSYNC_BUNDLE="$dir/bundle" CORES_OUT="$dir/out" PYTHON=$python SIZES=4K DDP_HOSTS=2 \
  bash "$root/tools/bench/device-cores.sh" --dry-run >"$dir/dry.txt" 2>&1
rc=$?
cat "$dir/out/steps.txt" "$dir/out/summary.txt" 2>/dev/null || cat "$dir/dry.txt"
fails=()
[ "$rc" -eq 0 ] || fails+=("device-cores.sh exit status $rc")
sum=$dir/out/summary.txt
# One rank a host: gsync and both peers. Two ranks a host put four
# busy-polling peer ranks on each of this machine's two cores (--pin gives a
# host a quarter of the CPUs): Open MPI's start can miss its 30 s there, as
# it did once in CI. So that row needs gsync's and Gloo's times, and Open
# MPI's or the harness's report of why it has none - the row the device
# run fills, where every rank has a core.
grep -qE "^\| 4K \| 1 \| 1 \| [0-9.]+ us \| [0-9.]+ (us|ms) \| [0-9.]+ (us|ms) \|" "$sum" ||
  fails+=("no 4 KiB row with 1 rank a host and both peers' times")
if ! grep -qE "^\| 4K \| 2 \| 1 \| [0-9.]+ us \| [0-9.]+ (us|ms) \| [0-9.]+ (us|ms) \|" "$sum"; then
  grep -qE "^\| 4K \| 2 \| 1 \| [0-9.]+ us \| - \| [0-9.]+ (us|ms) \|" "$sum" &&
    grep -q "mpi_error: " "$sum" ||
    fails+=("no 4 KiB row with 2 ranks a host, gsync's and Gloo's times and Open MPI's or why not")
fi
for phase in gloo gsync gsync_dp no_sync; do
  grep -qE "^\| 2 \| $phase \| [0-9.]+ ms" "$sum" || fails+=("no DDP $phase phase on 2 hosts")
done
grep -q 'median us from the first rank' "$sum" || fails+=("no 4 KiB op breakdown")
grep -q 'no verdict (a dry run)' "$sum" || fails+=("a dry run gave a verdict")
if [ ${#fails[@]} -gt 0 ]; then
  printf 'FAIL: %s\n' "${fails[@]}"
  exit 1
fi
echo "PASS: the cores bundle runs with glibc alone, and the device script's dry run on it" \
  "gives every part's figures"
