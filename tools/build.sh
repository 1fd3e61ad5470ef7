#!/usr/bin/env bash
# Configures (once) and builds gsync in ./build (BUILD_DIR overrides).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
source tools/unity-args.sh
if [ ! -f "$build/build.ninja" ]; then
  # verbs enabled, not auto: without libibverbs the rxe suite would vanish
  # instead of failing (tools/setup-deps.sh installs it).
  meson setup "$build" --buildtype=release -Dverbs=enabled "${unity[@]}"
fi
# GSYNC_CONFIGURE_ONLY=1: configure and stop (a lane builds its own targets).
[ "${GSYNC_CONFIGURE_ONLY:-0}" = 1 ] && exit 0
ninja -C "$build" -j "$(nproc)"
