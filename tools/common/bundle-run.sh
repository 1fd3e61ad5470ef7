#!/bin/sh
# run.sh of a bundle (tools/common/bundle-lib.sh's bundle_finish copies this
# file there: the GPU check's, tools/gpu/bundle.sh, docs/gpu.md "The bundle
# for a machine without -dev libraries"; the core-per-process measurement's,
# tools/bench/cores-bundle.sh, docs/performance.md "With a core per
# process").
#
#   run.sh COMMAND [ARGS]           COMMAND with the bundle's libraries
#   run.sh --client COMMAND [ARGS]  COMMAND of the machine's own (python
#                                   with its torch) that loads libgsync only
#
# Both set GSYNCD, GSYNC_LIB and GSYNC_TESTBED (what the tests, the test bed
# and python/gsync look for) to the bundle's and put its bin/ first in PATH.
# The default puts the bundle's lib/ in LD_LIBRARY_PATH. --client leaves it
# out, so that the machine's python and torch keep the machine's libssl,
# libz, libffi...; GSYNCD and GSYNC_TESTBED then name wrap/ scripts that
# come back here for the bundle's libraries. A bundle's env.sh, where it
# has one, is sourced last with $b the bundle (the cores bundle's tells
# Open MPI where its components and help files are).
#
# libstdc++ and libgcc_s (lib/cxx) go in only where the machine's libstdc++
# lacks the GLIBCXX_ / CXXABI_ versions MANIFEST names: a newer one serves
# the bundle, and a library built with a newer GCC (torch in some images)
# fails on an older one. GSYNC_BUNDLE_CXX=bundle or =system overrides.
#
# glibc is the machine's: a glibc older than MANIFEST's "needs glibc" stops
# here with that said, rather than with the loader's "version not found".
b=$(cd "$(dirname "$0")" && pwd) || exit 1
client=0
if [ "${1:-}" = --client ]; then
  client=1
  shift
fi
if [ $# -eq 0 ]; then
  echo "usage: $0 [--client] COMMAND [ARGS]" >&2
  exit 2
fi

need() { sed -n "s|^needs $1: ||p" "$b/MANIFEST" | cut -d' ' -f1; }

# "glibc 2.36" -> 2.36. older WANT: true where this machine's glibc is older.
have=$(getconf GNU_LIBC_VERSION 2>/dev/null | cut -d' ' -f2)
older() {
  [ -n "$have" ] && [ -n "$1" ] &&
    [ "$(printf '%s\n%s\n' "$have" "$1" | sort -V | head -1)" != "$1" ]
}
want=$(need glibc)
if older "$want"; then
  echo "run.sh: this bundle needs glibc $want or newer; this machine has glibc $have" \
    "(make the bundle on a system with an older glibc)" >&2
  exit 1
fi

# The machine's libstdc++.so.6, if it has every version the bundle needs.
system_cxx_ok() {
  lib=$(/sbin/ldconfig -p 2>/dev/null | awk '/libstdc\+\+\.so\.6 .*x86-64/ {print $NF; exit}')
  for d in /lib/x86_64-linux-gnu /usr/lib/x86_64-linux-gnu /usr/lib64 /lib64; do
    [ -n "$lib" ] && break
    [ -e "$d/libstdc++.so.6" ] && lib=$d/libstdc++.so.6
  done
  [ -n "$lib" ] || return 1
  for v in $(sed -n 's/^needs libstdc++: //p' "$b/MANIFEST" | cut -d'(' -f1); do
    grep -qa "$v" "$lib" || return 1
  done
}
case "${GSYNC_BUNDLE_CXX:-auto}" in
  bundle) cxx=$b/lib/cxx ;;
  system) cxx= ;;
  *) if system_cxx_ok; then cxx=; else cxx=$b/lib/cxx; fi ;;
esac
if [ -n "$cxx" ] && older "$(need 'glibc for lib/cxx')"; then
  echo "run.sh: this machine's libstdc++ lacks what the bundle needs ($(need libstdc++)...)," \
    "and the bundle's own needs glibc $(need 'glibc for lib/cxx'); this machine has $have" >&2
  exit 1
fi

if [ "$client" = 1 ]; then
  path=$cxx
  export GSYNCD="$b/wrap/gsyncd" GSYNC_TESTBED="$b/wrap/gsync-testbed"
else
  path=$b/lib${cxx:+:$cxx}
  export GSYNCD="$b/bin/gsyncd" GSYNC_TESTBED="$b/bin/gsync-testbed"
fi
if [ -n "$path" ]; then
  export LD_LIBRARY_PATH="$path${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
export GSYNC_LIB="$b/lib/libgsync.so" PATH="$b/bin:$PATH"
# shellcheck source=/dev/null  # the bundle's own, where it has one
[ -f "$b/env.sh" ] && . "$b/env.sh"
exec "$@"
