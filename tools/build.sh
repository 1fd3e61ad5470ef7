#!/usr/bin/env bash
# Configures (once) and builds gsync in ./build (BUILD_DIR overrides).
#   tools/build.sh              everything (the test suite included)
#   tools/build.sh TARGET...    those ninja targets only (the main job's)
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
# The optional parts meson decides on at configure time ('auto': the test
# suite with GoogleTest, DPDK). The main job installs the core only
# (tools/setup-deps.sh) and the test command adds the lab: a build
# configured before the lab came is configured again, or its tests and the
# DPDK provider would stay missing.
optional=$(dpkg-query -W -f='${Package} ${Status}\n' libgtest-dev libgmock-dev libdpdk-dev \
  2>/dev/null | grep "install ok installed" | cut -d' ' -f1 | sort | tr '\n' ' ' || true)
stamp="$build/gsync-optional-deps"
if [ ! -f "$build/build.ninja" ]; then
  # verbs enabled, not auto: without libibverbs the rxe suite would vanish
  # instead of failing (tools/setup-deps.sh installs it).
  # prefix /usr: Debian's layout (sysconfdir /etc, libdir
  # lib/<multiarch>), so tools/package/build-deb.sh --prebuilt can package
  # this very build (the package test in tests/systemd does).
  meson setup "$build" --buildtype=release --prefix=/usr -Dverbs=enabled "${unity[@]}"
elif [ "$(cat "$stamp" 2>/dev/null)" != "$optional" ]; then
  meson setup --reconfigure "$build"
fi
echo "$optional" > "$stamp"
# GSYNC_CONFIGURE_ONLY=1: configure and stop (a lane builds its own targets).
[ "${GSYNC_CONFIGURE_ONLY:-0}" = 1 ] && exit 0
ninja -C "$build" -j "$(nproc)" "$@"
