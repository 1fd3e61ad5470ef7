#!/usr/bin/env bash
# debian/rules with GSYNC_PREBUILT: refuses, naming why, a build directory
# that cannot be installed as Debian's packages are laid out (a missing
# build, another prefix).
set -euo pipefail
dir=${1:?usage: check-prebuilt.sh BUILD_DIR}
if [ ! -f "$dir/build.ninja" ]; then
  echo "check-prebuilt: $dir is not a configured meson build directory" >&2
  exit 1
fi
prefix=$(meson introspect "$dir" --buildoptions |
  python3 -c 'import json,sys; print(next(o["value"] for o in json.load(sys.stdin) if o["name"] == "prefix"))')
if [ "$prefix" != /usr ]; then
  echo "check-prebuilt: $dir has prefix $prefix; packages install under /usr" \
    "(meson configure $dir -Dprefix=/usr, or build without --prebuilt)" >&2
  exit 1
fi
