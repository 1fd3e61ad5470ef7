#!/usr/bin/env bash
# Configures (once) and builds gsync in ./build (BUILD_DIR overrides).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
source tools/unity-args.sh
# CUDA toolkits install nvcc under /usr/local/cuda/bin, which is not on
# every PATH: meson is given it by its full path (NVCC), which the build
# files keep, so a later ninja without that PATH still finds it (the GPU
# parts, docs/gpu.md).
if ! command -v nvcc >/dev/null && [ -z "${NVCC:-}" ] && [ -x /usr/local/cuda/bin/nvcc ]; then
  export NVCC=/usr/local/cuda/bin/nvcc
fi
if [ ! -f "$build/build.ninja" ]; then
  # verbs enabled, not auto: without libibverbs the rxe suite would vanish
  # instead of failing (tools/setup-deps.sh installs it).
  meson setup "$build" --buildtype=release -Dverbs=enabled "${unity[@]}"
fi
# GSYNC_CONFIGURE_ONLY=1: configure and stop (a lane builds its own targets).
[ "${GSYNC_CONFIGURE_ONLY:-0}" = 1 ] && exit 0
ninja -C "$build" -j "$(nproc)"
