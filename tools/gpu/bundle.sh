#!/usr/bin/env bash
# tools/gpu/bundle.sh: the GPU programs of a CUDA build with the shared
# libraries they load, for a machine that has a GPU, CUDA and PyTorch but not
# the project's -dev libraries (docs/gpu.md, "The bundle for a machine
# without -dev libraries"). tools/gpu/device-check.sh runs a bundle instead
# of building when it finds one.
#
#   tools/gpu/bundle.sh [--no-strip] [BUILD_DIR [OUT_DIR]]   make it
#   tools/gpu/bundle.sh --check [OUT_DIR]                    prove it here
#
# BUILD_DIR (default build) must be configured with CUDA and built; OUT_DIR
# (default gpu-bundle, git-ignored) is made anew:
#   bin/        gsyncd, gsyncctl, gsync-testbed, test_gpu_reduce,
#               test_gpu_buffers, test_cuda_abi, bench_gpu_reduce,
#               bench_device_allreduce
#   lib/        libgsync.so and every library those load (ldd), less
#   lib/cxx/    libstdc++ and libgcc_s, which run.sh adds only where the
#               machine's own libstdc++ is older than the bundle needs
#   wrap/       gsyncd, gsync-testbed, gsyncctl: scripts that run bin/'s
#               with the bundle's libraries (for run.sh --client)
#   python/gsync, python/gsync_testbed, tests/torch/{test_cuda,torch_common}.py
#   run.sh      (tools/common/bundle-run.sh) runs a command with all of it
#   MANIFEST    every file, and the glibc, libstdc++ and CUDA driver the
#               machine must have
# Not bundled: glibc (libc, libm, libdl, libpthread, librt, libresolv,
# ld-linux: the loader and libc go together, and the machine's serves) and
# the NVIDIA driver's libcuda / libnvidia-* (they must match the kernel
# module). The CUDA runtime is linked in statically by nvcc.
#
# --check runs the bundle with nothing of this machine but glibc: (a) ldd
# under env -i with only the bundle's library path must resolve every
# library inside it (glibc and libcuda aside); (b) under env -i
# PATH=/usr/bin:/bin, through run.sh with the bundle's libstdc++: gsyncd
# --version, the three GPU programs (their GPU cases say SKIPPED without a
# GPU; the point is that they load and start), a two-host test bed answering
# gsyncctl, and every library its daemon has mapped must be the bundle's or
# glibc's; (c) as root with chroot(1), gsyncd and test_gpu_reduce in a root
# holding only glibc and the bundle. Last line: "bundle check: PASS" or
# "bundle check: FAIL (...)"; exit status 0 for PASS only.
set -euo pipefail
# Paths given are the caller's; the defaults, the repository's.
caller=$PWD
self=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
cd "$(dirname "$0")/../.."

# shellcheck source=tools/common/bundle-lib.sh
. tools/common/bundle-lib.sh

# Programs: bundle name, path under the build dir, required.
programs=(
  "gsyncd daemon/gsyncd 1"
  "gsyncctl tools/gsyncctl/gsyncctl 0"
  "gsync-testbed tools/testbed/gsync-testbed 1"
  "test_gpu_reduce tests/gpu/test_gpu_reduce 1"
  "test_gpu_buffers tests/gpu/test_gpu_buffers 1"
  "test_cuda_abi tests/gpu/test_cuda_abi 1"
  "bench_gpu_reduce tools/bench/bench_gpu_reduce 1"
  "bench_device_allreduce tools/bench/bench_device_allreduce 1"
)
# The wrap/ scripts: what a python process starts (GSYNCD, GSYNC_TESTBED).
wrapped=(gsyncd gsync-testbed gsyncctl)
# The torch test and what it imports from the repository.
python_files=(tests/torch/test_cuda.py tests/torch/torch_common.py)

make_bundle() {
  local strip=$1 build=$2 out=$3
  [ -d "$build" ] || { echo "bundle: no build dir $build" >&2; exit 1; }
  if ! grep -q '^#define GSYNC_HAVE_CUDA 1' "$build/gsync_build_config.h" 2>/dev/null; then
    echo "bundle: $build is not a CUDA build (GSYNC_HAVE_CUDA in gsync_build_config.h):" \
      "its GPU tests would only skip" >&2
    exit 1
  fi
  rm -rf "$out"
  mkdir -p "$out/tests/torch"
  bundle_programs "$build" "$out" "${programs[@]}"
  bundle_libgsync "$build" "$out"
  bundle_libs "$out" "$out"/bin/* "$out"/lib/libgsync.so.*.*
  if [ "$strip" = 1 ]; then
    # Symbol tables only: the CUDA fat binaries are allocated sections and
    # stay. The system's libraries come stripped already.
    strip --strip-unneeded "$out"/bin/* "$out"/lib/libgsync.so.*.*
  fi
  bundle_wraps "$out" "${wrapped[@]}"
  bundle_python "$out"
  cp "${python_files[@]}" "$out/tests/torch/"
  local cuda
  cuda=$(nvcc --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\).*/\1/p')
  bundle_finish "$build" "$out" "gsync GPU bundle: tools/gpu/bundle.sh" \
    "Run: run.sh COMMAND (docs/gpu.md); check: tools/gpu/bundle.sh --check DIR." \
    "CUDA driver: ${cuda:-unknown} (the CUDA runtime of nvcc $cuda is linked in; the machine's libcuda.so.1 must support it: nvidia-smi's 'CUDA Version' >= ${cuda%.*})"
}

# --- --check

check_bundle() {
  check_begin "$1"
  # (a) ldd with the bundle's library path alone.
  # shellcheck disable=SC2119  # no folders beyond bin/ and lib/
  check_ldd
  # (b) the programs, under env -i, through run.sh with the bundle's libstdc++.
  part gsyncd-version gsyncd --version
  part test_gpu_reduce test_gpu_reduce
  part test_cuda_abi test_cuda_abi
  part test_gpu_buffers test_gpu_buffers
  part bench_gpu_reduce bench_gpu_reduce --inputs 2 64
  # A real thing without a GPU.
  check_testbed
  # (c) a root of glibc and the bundle alone.
  check_chroot "bin/gsyncd --version" "bin/test_gpu_reduce"
  check_end
}

bundle_main gpu-bundle "$@"
