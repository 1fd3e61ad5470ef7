#!/usr/bin/env bash
# Configures (once) and builds gsync in ./build (BUILD_DIR overrides).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
if [ ! -f "$build/build.ninja" ]; then
  meson setup "$build" --buildtype=release
fi
ninja -C "$build" -j "$(nproc)"
