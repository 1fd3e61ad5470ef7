#!/usr/bin/env bash
# tools/gpu/device-check.sh: the one script for a machine with a GPU
# (docs/gpu.md). Builds the GPU suite and benchmark with CUDA, runs both and
# keeps their output in $OUT (default ./device-check-out).
#
# With meson and the project's dependencies present it builds in
# $BUILD_DIR (default build-gpu) with -Dcuda=enabled; on a bare machine
# (meson's configure fails) it builds the benchmark alone with nvcc and
# g++, which need nothing but the CUDA toolkit.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-device-check-out}
mkdir -p "$out"
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH="$PATH:/usr/local/cuda/bin"
fi
{ date -u; nproc; nvidia-smi -L; nvcc --version | tail -2; } 2>&1 | tee "$out/machine.txt"

build=${BUILD_DIR:-build-gpu}
if [ -f "$build/build.ninja" ] ||
   meson setup "$build" --buildtype=release -Dcuda=enabled -Dverbs=auto -Ddpdk=disabled \
     >"$out/configure.txt" 2>&1; then
  ninja -C "$build" tests/gpu/test_gpu_reduce tools/bench/bench_gpu_reduce 2>&1 |
    tail -5 | tee "$out/build.txt"
  "$build/tests/gpu/test_gpu_reduce" 2>&1 | tee "$out/test_gpu_reduce.txt"
  test_rc=${PIPESTATUS[0]}
  bench="$build/tools/bench/bench_gpu_reduce"
else
  echo "device-check: meson's configure failed (see $out/configure.txt):" \
    "building the benchmark alone with nvcc" | tee "$out/build.txt"
  bench=$build-nvcc/bench_gpu_reduce
  mkdir -p "$build-nvcc"
  cfg="$build-nvcc/gsync_build_config.h"
  printf '#pragma once\n#define GSYNC_HAVE_CUDA 1\n' >"$cfg"
  nvcc -std=c++20 -O3 -fmad=false -I. -Iinclude -I"$build-nvcc" \
    -gencode=arch=compute_90,code=sm_90 \
    daemon/gpu/device_cuda.cu daemon/gpu/reduce_kernels.cu daemon/gpu/launch.cc \
    tools/bench/bench_gpu_reduce.cc -o "$bench" 2>&1 | tee -a "$out/build.txt"
  test_rc=not-run
fi
"$bench" --inputs 4 16 64 256 1024 2>&1 | tee "$out/bench_gpu_reduce.txt"
"$bench" --inputs 2 --dtype bf16 64 256 2>&1 | tee -a "$out/bench_gpu_reduce.txt"
echo "device-check: test_gpu_reduce rc=$test_rc" | tee -a "$out/summary.txt"
