#!/bin/sh
# layer-view.sh VIEW SOURCE_ROOT BUILD_ROOT FOLDER...
#
# Makes the include root one layer of daemon/ compiles against: VIEW/daemon
# holds a link to each daemon FOLDER that layer may see, VIEW/protocol the
# shared wire contract, VIEW/gsync_build_config.h the build's config header.
# A header of a folder the layer may not see is then not found: a wrong
# include is a compile error (daemon/meson.build, docs/architecture.md).
set -eu
view=$1 src=$2 build=$3
shift 3
rm -rf "$view"
mkdir -p "$view/daemon"
ln -s "$src/protocol" "$view/protocol"
ln -s "$build/gsync_build_config.h" "$view/gsync_build_config.h"
for folder in "$@"; do
  ln -s "$src/daemon/$folder" "$view/daemon/$folder"
done
