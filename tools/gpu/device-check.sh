#!/usr/bin/env bash
# tools/gpu/device-check.sh: the one script for a machine with a GPU
# (docs/gpu.md). Builds the GPU suite and benchmark with CUDA, runs both and
# keeps their output in $OUT (default ./device-check-out): the kernels
# against the host's, device memory end to end through a real daemon
# (1 to 4 rank processes on the GPU, a rank killed mid-op), the client's
# CUDA types against cuda.h, and the kernel's bandwidth against cudaMemcpy.
#
# With meson and the project's dependencies present it builds in
# $BUILD_DIR (default build-gpu) with -Dcuda=enabled. On a bare machine
# (meson's configure fails) it builds with nvcc and g++ alone: the
# benchmark always (it needs nothing but the CUDA toolkit), the test too
# where GoogleTest's headers and libraries are installed (the host reduce
# kernels it compares against need nothing else); device memory end to end
# needs the daemon and so meson.
#
# With a bundle (tools/gpu/bundle.sh: the programs of a CUDA build with the
# libraries they load) it builds nothing and runs the bundle's programs
# through its run.sh: $GSYNC_BUNDLE, else ./gpu-bundle where there is one
# (GSYNC_BUNDLE=none: build as above). That is the way on a machine with
# CUDA and PyTorch but without the project's -dev libraries, where the
# build has only the benchmark and the kernels' test; the PyTorch test runs
# under the machine's own python and torch (run.sh --client).
#
# It passes only when every part ran and passed: a part not built, a gtest
# case that skipped (a build without CUDA, a driver older than the CUDA
# runtime, too few GPUs) or a script that said SKIPPED fails the check.
# One line per part and a last verdict go to $OUT/summary.txt; the exit
# status is 0 for PASS only.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
out=${OUT:-device-check-out}
mkdir -p "$out"
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH="$PATH:/usr/local/cuda/bin"
fi
{ date -u; nproc; nvidia-smi -L; nvcc --version | tail -2; } 2>&1 | tee "$out/machine.txt"
driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1)
echo "device-check: NVIDIA driver ${driver:-none (nvidia-smi found no driver)}" |
  tee "$out/summary.txt"
failed=0
# verdict PART RC [LOG]: one line per part; anything but a clean run of
# cases that all passed is a failure.
verdict() {
  local part=$1 rc=$2 log=${3:-} v=PASS
  if [ "$rc" = not-built ]; then
    v="FAIL (not built: see $out/build.txt)"
    [ -n "$bundle" ] && v="FAIL (not in the bundle $bundle)"
  elif [ "$rc" = no-sanitizer ]; then
    v="FAIL (no compute-sanitizer on PATH or in /usr/local/cuda/bin)"
  elif [ "$rc" = no-report ]; then
    v="FAIL (the daemons under compute-sanitizer wrote no report)"
  elif [ "$rc" = sanitizer-errors ]; then
    v="FAIL (compute-sanitizer found errors: $(grep -l 'ERROR SUMMARY: [1-9]' "$out"/sanitizer-*.txt | tr '\n' ' '))"
  elif [ -n "$log" ] && grep -q '^\[  SKIPPED \]' "$log"; then
    v="FAIL ($(grep -c '^\[  SKIPPED \]' "$log") cases skipped: $(grep -m1 -E '^(no GPU|needs )' "$log"))"
  elif [ "$rc" = 77 ] || { [ -n "$log" ] && grep -q '^SKIPPED' "$log"; }; then
    v="FAIL (skipped: $(grep -m1 '^SKIPPED' "$log"))"
  elif [ "$rc" != 0 ]; then
    v="FAIL (exit status $rc)"
  elif [ -n "$log" ] && grep -q '^\[==========\]' "$log" && ! grep -q '^\[       OK \]' "$log"; then
    v="FAIL (no case ran)"
  fi
  echo "device-check: $part: $v" | tee -a "$out/summary.txt"
  [ "$v" = PASS ] || failed=$((failed + 1))
}

bundle=${GSYNC_BUNDLE:-}
if [ -z "$bundle" ] && [ -x gpu-bundle/run.sh ]; then
  bundle="gpu-bundle"
fi
[ "$bundle" = none ] && bundle=
# run: the prefix of every program run (a bundle's run.sh, or nothing).
run=()
build=${BUILD_DIR:-build-gpu}
test_rc=not-built
if [ -n "$bundle" ]; then
  if ! bundle=$(cd "$bundle" 2>/dev/null && pwd) || [ ! -x "$bundle/run.sh" ]; then
    echo "device-check: GSYNC_BUNDLE=${GSYNC_BUNDLE:-} is not a bundle (no run.sh)" |
      tee -a "$out/summary.txt"
    exit 1
  fi
  { echo "device-check: the bundle $bundle, built nothing ($(sed -n 1p "$bundle/MANIFEST" |
      sed 's/^# //'))"
    sed -n 's/^needs /device-check: the bundle needs /p' "$bundle/MANIFEST"
    echo "device-check: this machine: $(getconf GNU_LIBC_VERSION 2>/dev/null)"
  } | tee -a "$out/summary.txt"
  cp "$bundle/MANIFEST" "$out/bundle-manifest.txt"
  run=("$bundle/run.sh")
  test_exe=$bundle/bin/test_gpu_reduce
  bench=$bundle/bin/bench_gpu_reduce
  buffers_exe=$bundle/bin/test_gpu_buffers
  abi_exe=$bundle/bin/test_cuda_abi
elif [ -f "$build/build.ninja" ] ||
   meson setup "$build" --buildtype=release -Dcuda=enabled -Dverbs=auto -Ddpdk=disabled \
     >"$out/configure.txt" 2>&1; then
  # -k 0: the benchmark is built even if the test cannot be.
  ninja -C "$build" -k 0 tests/gpu/test_gpu_reduce tools/bench/bench_gpu_reduce \
    tools/bench/bench_device_allreduce tests/gpu/test_gpu_buffers tests/gpu/test_cuda_abi \
    daemon/gsyncd >"$out/build.txt" 2>&1
  echo "device-check: ninja rc=$?" | tee -a "$out/summary.txt"
  test_exe="$build/tests/gpu/test_gpu_reduce"
  bench="$build/tools/bench/bench_gpu_reduce"
  buffers_exe="$build/tests/gpu/test_gpu_buffers"
  abi_exe="$build/tests/gpu/test_cuda_abi"
else
  echo "device-check: meson's configure failed (see $out/configure.txt):" \
    "building with nvcc and g++ alone" | tee -a "$out/summary.txt"
  dir=$build-nvcc
  mkdir -p "$dir"
  # The flags of daemon/gpu/meson.build and daemon/reduce/meson.build.
  nvflags=(-std=c++20 -O3 -fmad=false -ftz=false -prec-div=true -I. -Iinclude
    '-gencode=arch=compute_90,code=[sm_90,compute_90]')
  gpu=(daemon/gpu/device_cuda.cu daemon/gpu/reduce_kernels.cu daemon/gpu/launch.cc)
  bench=$dir/bench_gpu_reduce
  nvcc "${nvflags[@]}" "${gpu[@]}" tools/bench/bench_gpu_reduce.cc -o "$bench" \
    >>"$out/build.txt" 2>&1
  echo "device-check: bench build rc=$?" | tee -a "$out/summary.txt"
  if [ -f /usr/include/gtest/gtest.h ]; then
    host=(-std=c++20 -O3 -ffp-contract=off -I. -Iinclude -c)
    g++ "${host[@]}" daemon/reduce/kernels_scalar.cc -o "$dir/k_scalar.o" &&
      g++ "${host[@]}" -mavx2 -mfma -mf16c daemon/reduce/kernels_avx2.cc -o "$dir/k_avx2.o" &&
      g++ "${host[@]}" -mavx2 -mfma -mf16c -mavx512f -mavx512bw -mavx512vl -mavx512dq \
        daemon/reduce/kernels_avx512.cc -o "$dir/k_avx512.o" &&
      g++ "${host[@]}" daemon/reduce/dispatch.cc -o "$dir/dispatch.o" &&
      nvcc "${nvflags[@]}" "${gpu[@]}" tests/gpu/test_gpu_reduce.cc "$dir"/*.o \
        -lgtest -lgtest_main -o "$dir/test_gpu_reduce" >>"$out/build.txt" 2>&1
    echo "device-check: test build rc=$?" | tee -a "$out/summary.txt"
  fi
  test_exe=$dir/test_gpu_reduce
fi
if [ -x "$test_exe" ]; then
  "${run[@]}" "$test_exe" 2>&1 | tee "$out/test_gpu_reduce.txt"
  test_rc=${PIPESTATUS[0]}
fi
verdict test_gpu_reduce "$test_rc" "$out/test_gpu_reduce.txt"
abi_rc=not-built buffers_rc=not-built torch_rc=not-built
if [ -n "${buffers_exe:-}" ] && [ -x "$buffers_exe" ]; then
  if [ -x "${abi_exe:-}" ]; then
    "${run[@]}" "$abi_exe" 2>&1 | tee "$out/test_cuda_abi.txt"
    abi_rc=${PIPESTATUS[0]}
  fi
  # What each daemon's own CUDA context costs on the GPU (docs/gpu.md,
  # "The daemon's contexts"): nvidia-smi's per-process memory, sampled
  # while the daemons of the test run.
  ( while :; do
      nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader \
        2>/dev/null
      sleep 1
    done ) >"$out/compute-apps.txt" &
  sampler=$!
  if [ -n "$bundle" ]; then
    "$bundle/run.sh" "$buffers_exe" 2>&1 | tee "$out/test_gpu_buffers.txt"
  else
    GSYNCD="$build/daemon/gsyncd" "$buffers_exe" 2>&1 | tee "$out/test_gpu_buffers.txt"
  fi
  buffers_rc=${PIPESTATUS[0]}
  kill "$sampler" 2>/dev/null
  wait "$sampler" 2>/dev/null
  most=$(awk -F', *' '$2 ~ /gsyncd/ { sub(/ MiB/, "", $3); if ($3 + 0 > m) m = $3 + 0 }
                      END { print m + 0 }' "$out/compute-apps.txt")
  echo "device-check: a daemon's GPU memory (its context and kernels), most seen: $most MiB" |
    tee -a "$out/summary.txt"
  # PyTorch's CUDA buckets through the hook: SKIPPED unless the machine's
  # python has a CUDA build of torch (and the test bed is built). The
  # first python on PATH may not be the one with torch (a pyenv's).
  py=python3
  for cand in python3 /usr/bin/python3; do
    if command -v "$cand" >/dev/null && "$cand" -c 'import torch' 2>/dev/null; then
      py=$cand
      break
    fi
  done
  if [ -n "$bundle" ]; then
    # The machine's python and torch with libgsync, the bundle's daemons
    # and test bed (GSYNC_LIB, GSYNCD, GSYNC_TESTBED from run.sh), and the
    # bundle's python/gsync and test.
    timeout 300 "$bundle/run.sh" --client "$py" "$bundle/tests/torch/test_cuda.py" 2>&1 |
      tee "$out/test_torch_cuda.txt"
  else
    ninja -C "$build" libclient/libgsync.so tools/testbed/gsync-testbed >>"$out/build.txt" 2>&1
    GSYNC_LIB="$build/libclient/libgsync.so" GSYNCD="$build/daemon/gsyncd" \
      GSYNC_TESTBED="$build/tools/testbed/gsync-testbed" \
      timeout 300 "$py" tests/torch/test_cuda.py 2>&1 | tee "$out/test_torch_cuda.txt"
  fi
  torch_rc=${PIPESTATUS[0]}
fi
verdict test_cuda_abi "$abi_rc" "$out/test_cuda_abi.txt"
verdict test_gpu_buffers "$buffers_rc" "$out/test_gpu_buffers.txt"
verdict test_torch_cuda "$torch_rc" "$out/test_torch_cuda.txt"
bench_rc=not-built
if [ -x "$bench" ]; then
  { "${run[@]}" "$bench" --inputs 4 16 64 256 1024 &&
    "${run[@]}" "$bench" --inputs 2 --dtype bf16 64 256; } 2>&1 |
    tee "$out/bench_gpu_reduce.txt"
  bench_rc=${PIPESTATUS[0]}
fi
verdict bench_gpu_reduce "$bench_rc" "$out/bench_gpu_reduce.txt"
# 256 MiB of device memory across 2 test-bed hosts next to the same bytes in
# host memory, through the same daemons.
e2e_rc=not-built
e2e=${bundle:+$bundle/bin/bench_device_allreduce}
[ -z "$bundle" ] && e2e="$build/tools/bench/bench_device_allreduce"
if [ -x "$e2e" ]; then
  # Namespaces need root; loopback hosts otherwise.
  e2e_args=(--mib 256 --iters 10)
  [ "$(id -u)" = 0 ] || e2e_args+=(--loopback)
  "${run[@]}" "$e2e" "${e2e_args[@]}" 2>&1 | tee "$out/bench_device_allreduce.txt"
  e2e_rc=${PIPESTATUS[0]}
fi
verdict bench_device_allreduce "$e2e_rc" "$out/bench_device_allreduce.txt"
# compute-sanitizer over the daemon for one pass of every dtype and op
# (memcheck, then racecheck): test_gpu_buffers' daemon started through a
# wrapper, each daemon's report in $out/sanitizer-TOOL-PID.txt.
san_rc=not-built
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
daemon_exe=${bundle:+$bundle/bin/gsyncd}
[ -z "$bundle" ] && daemon_exe="$build/daemon/gsyncd"
if [ ! -x "$sanitizer" ]; then
  san_rc=no-sanitizer
elif [ -n "${buffers_exe:-}" ] && [ -x "$buffers_exe" ] && [ -x "$daemon_exe" ]; then
  san_rc=0
  for tool in memcheck racecheck; do
    wrapper="$out/gsyncd-$tool.sh"
    printf '#!/bin/sh\nexec "%s" --tool %s --log-file "%s/sanitizer-%s-%%p.txt" "%s" "$@"\n' \
      "$sanitizer" "$tool" "$(cd "$out" && pwd)" "$tool" "$daemon_exe" >"$wrapper"
    chmod +x "$wrapper"
    "${run[@]}" env GSYNCD="$wrapper" "$buffers_exe" \
      --gtest_filter='GpuBuffers.EveryDtypeAndOpFrom1To4RanksMatchesTheReference' 2>&1 |
      tee "$out/test_gpu_buffers_$tool.txt"
    rc=${PIPESTATUS[0]}
    [ "$rc" = 0 ] || san_rc=$rc
  done
  if ls "$out"/sanitizer-*.txt >/dev/null 2>&1 &&
     grep -q 'ERROR SUMMARY: [1-9]' "$out"/sanitizer-*.txt; then
    san_rc=sanitizer-errors
  elif [ "$san_rc" = 0 ] && ! grep -qs '^\[  SKIPPED \]' "$out/test_gpu_buffers_racecheck.txt" &&
       ! ls "$out"/sanitizer-*.txt >/dev/null 2>&1; then
    san_rc=no-report
  fi
fi
verdict compute_sanitizer "$san_rc" "$out/test_gpu_buffers_racecheck.txt"
if [ "$failed" -eq 0 ]; then
  echo "device-check: PASS (every part ran and passed; driver $driver)" | tee -a "$out/summary.txt"
  exit 0
fi
nogpu=
[ -z "$driver" ] && nogpu="; no GPU here: nvidia-smi found no driver"
echo "device-check: FAIL ($failed parts did not run and pass$nogpu)" | tee -a "$out/summary.txt"
exit 1
