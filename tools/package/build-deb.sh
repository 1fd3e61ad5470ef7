#!/usr/bin/env bash
# Builds gsync's Debian packages (docs/packaging.md): gsyncd, libgsync0,
# libgsync-dev, python3-gsync, gsync-tools.
#
#   tools/package/build-deb.sh [--prebuilt BUILD_DIR] [--out DIR] [--lintian]
#
# Without --prebuilt: dpkg-buildpackage -b -us -uc, a full build of the
# product in a copy of the source tree. --prebuilt installs from a build
# directory already built with prefix /usr (tools/build.sh makes one) instead
# of compiling again. The .debs land in --out (default: packages/).
# --lintian runs lintian on them and fails on an error.
set -euo pipefail
cd "$(dirname "$0")/../.."

prebuilt="" out=packages lint=0
while [ $# -gt 0 ]; do
  case $1 in
    --prebuilt) prebuilt=$(realpath "$2"); shift 2 ;;
    --out) out=$2; shift 2 ;;
    --lintian) lint=1; shift ;;
    *) echo "build-deb: unknown argument $1" >&2; exit 2 ;;
  esac
done
for tool in dpkg-buildpackage dh; do
  command -v "$tool" >/dev/null || {
    echo "build-deb: $tool is missing (apt-get install dpkg-dev debhelper dh-python)" >&2
    exit 1
  }
done
mkdir -p "$out"
out=$(realpath "$out")
work=$(mktemp -d /tmp/gsync-deb.XXXXXX)
trap 'rm -rf "$work"' EXIT
# dpkg-buildpackage writes its results next to the tree it builds: a copy
# of the sources (what git tracks or would track) keeps them out of ours.
mkdir "$work/gsync"
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  git ls-files -z -co --exclude-standard | tar --null -T - -cf - | tar -xf - -C "$work/gsync"
else
  tar --exclude='./build*' --exclude=./packages -cf - . | tar -xf - -C "$work/gsync"
fi
(
  cd "$work/gsync"
  # From a prebuilt release build there are no debug symbols to split off.
  opts=${DEB_BUILD_OPTIONS:-}
  [ -n "$prebuilt" ] && opts="$opts noautodbgsym"
  GSYNC_PREBUILT=$prebuilt DEB_BUILD_OPTIONS=$opts dpkg-buildpackage -b -us -uc --no-sign
) > "$work/build.log" 2>&1 || {
  tail -n 60 "$work/build.log" >&2
  echo "build-deb: dpkg-buildpackage failed (the last lines above)" >&2
  exit 1
}
debs=("$work"/*.deb)
cp "${debs[@]}" "$out"/
for d in "${debs[@]}"; do echo "$out/$(basename "$d")"; done
if [ "$lint" = 1 ]; then
  # Errors fail the build; warnings are printed.
  lintian --fail-on error \
    "${debs[@]}" >&2
fi
