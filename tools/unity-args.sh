# shellcheck shell=bash
# Sourced by the scripts that configure a build directory (tools/build.sh,
# tools/sanitize/run.sh, tools/fuzz/run.sh): sets unity, the meson options
# that go with it.
# A clean checkout (CI, GSYNC_UNITY=1) builds in unity mode, six sources a
# unit: the build is most of a lane's time on two cores, and unity builds
# cut it by a fifth to a third (docs/testing.md). A developer's rebuilds
# stay per file.
unity=()
if [ -n "${CI:-}" ] || [ "${GSYNC_UNITY:-0}" = 1 ]; then unity=(-Dunity=on -Dunity_size=6); fi
