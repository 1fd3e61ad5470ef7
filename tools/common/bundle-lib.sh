# shellcheck shell=bash
# tools/common/bundle-lib.sh: what the bundles for a machine without the
# project's -dev libraries share - tools/gpu/bundle.sh (the GPU check's) and
# tools/bench/cores-bundle.sh (the core-per-process measurement's). Sourced
# by them from the repository root, under set -euo pipefail; defines
# functions only.
#
# A bundle is a folder: bin/ (programs), lib/ (libgsync and every library
# ldd lists for the programs, glibc's and the NVIDIA driver's aside),
# lib/cxx/ (libstdc++ and libgcc_s, used only where the machine's libstdc++
# is too old), wrap/ (scripts that run bin/'s programs with the bundle's
# libraries, for a python of the machine's), python/, run.sh
# (tools/common/bundle-run.sh, which also sources the bundle's env.sh when
# it has one) and MANIFEST (every file, and the glibc and libstdc++ the
# machine must have).
#
# Making: bundle_programs, bundle_libgsync, bundle_libs, bundle_wraps,
# bundle_python, bundle_finish. Checking: check_begin, check_ldd, part,
# check_testbed, check_chroot, check_end (they record problems with fail).
# bundle_main: the command line, calling the script's make_bundle and
# check_bundle.

bundle_limit=$((64 << 20))

# A path the caller gave (relative to $caller, where the script was started).
given() { case "$1" in /*) echo "$1" ;; *) echo "$caller/$1" ;; esac; }

# bundle_main DEFAULT_OUT ARGS...: "[--no-strip] [BUILD_DIR [OUT_DIR]]" makes
# the bundle (make_bundle STRIP BUILD OUT), "--check [OUT_DIR]" proves it
# (check_bundle DIR); anything else prints the script's header ($self).
bundle_main() {
  local default_out=$1 strip=1
  shift
  if [ "${1:-}" = --check ]; then
    check_bundle "$([ -n "${2:-}" ] && given "$2" || echo "$default_out")"
    return
  fi
  if [ "${1:-}" = --no-strip ]; then
    strip=0
    shift
  fi
  case "${1:-}" in -*) sed -n '2,/^set -euo/p' "$self" | sed '$d'; exit 2 ;; esac
  make_bundle "$strip" "$([ -n "${1:-}" ] && given "$1" || echo build)" \
    "$([ -n "${2:-}" ] && given "$2" || echo "$default_out")"
}

# glibc's own libraries (with the NSS modules /etc/nsswitch.conf names), and
# the driver's: the machine's, never bundled.
is_system_lib() {
  case "$1" in
    libc.so.* | libm.so.* | libdl.so.* | libpthread.so.* | librt.so.* | libresolv.so.* | \
      libutil.so.* | libanl.so.* | libnsl.so.* | libnss_*.so.* | ld-linux*.so.* | \
      linux-vdso.so.* | \
      libcuda.so* | libnvidia-*) return 0 ;;
  esac
  return 1
}

is_elf() { [ "$(head -c 4 "$1" 2>/dev/null | od -An -c | tr -d ' ')" = '177ELF' ]; }

# The highest version of PREFIX (GLIBC, GLIBCXX, CXXABI) that FILES need:
# objdump -T's undefined symbols name the version they bind to.
max_version() {
  local prefix=$1
  shift
  objdump -T "$@" 2>/dev/null | awk '/\*UND\*/' | grep -oE "\(${prefix}_[0-9.]+\)" |
    tr -d '()' | sort -uV | tail -1
}

# --- making

# bundle_programs BUILD OUT "NAME PATH REQUIRED"...: each PATH (under BUILD,
# or absolute) into OUT/bin/NAME; a missing one stops the bundle where
# REQUIRED is 1 and is left out (said) where it is 0.
bundle_programs() {
  local build=$1 out=$2 entry name rel required src
  shift 2
  mkdir -p "$out/bin"
  for entry in "$@"; do
    read -r name rel required <<<"$entry"
    case "$rel" in /*) src=$rel ;; *) src=$build/$rel ;; esac
    if [ ! -x "$src" ]; then
      [ "$required" = 1 ] && { echo "bundle: $src is not built" >&2; exit 1; }
      echo "bundle: $src is not built: left out"
      continue
    fi
    cp -L "$src" "$out/bin/$name"
  done
}

# bundle_libgsync BUILD OUT: libgsync.so.0.x.y with its two names into OUT/lib.
bundle_libgsync() {
  local build=$1 out=$2 so
  so=$(readlink -f "$build/libclient/libgsync.so")
  [ -f "$so" ] || { echo "bundle: $build/libclient/libgsync.so is not built" >&2; exit 1; }
  mkdir -p "$out/lib"
  cp "$so" "$out/lib/"
  ln -s "$(basename "$so")" "$out/lib/libgsync.so.0"
  ln -s libgsync.so.0 "$out/lib/libgsync.so"
}

# bundle_libs OUT FILE...: every library the FILEs load, as ldd resolves it
# here (their RUNPATH, then the system's; ldd lists the whole closure), into
# OUT/lib, libstdc++ and libgcc_s into OUT/lib/cxx; glibc's, the driver's
# and libgsync (bundle_libgsync) aside. FILEs that are scripts load none.
bundle_libs() {
  local out=$1 f lib arrow path dest
  shift
  mkdir -p "$out/lib/cxx"
  for f in "$@"; do
    is_elf "$f" || continue
    while read -r lib arrow path _; do
      [ "$arrow" = "=>" ] || continue
      is_system_lib "$lib" && continue
      [[ "$lib" == libgsync.so* ]] && continue
      if [ ! -f "$path" ]; then
        echo "bundle: ${f#"$out"/} needs $lib, which ldd cannot find here ($path)" >&2
        exit 1
      fi
      case "$lib" in
        libstdc++.so.* | libgcc_s.so.*) dest=$out/lib/cxx/$lib ;;
        *) dest=$out/lib/$lib ;;
      esac
      [ -e "$dest" ] || cp -L "$path" "$dest"
    done < <(ldd "$f")
  done
}

# bundle_wraps OUT NAME...: OUT/wrap/NAME runs OUT/bin/NAME with the
# bundle's libraries (run.sh --client points GSYNCD and GSYNC_TESTBED here).
bundle_wraps() {
  local out=$1 name
  shift
  mkdir -p "$out/wrap"
  for name in "$@"; do
    [ -e "$out/bin/$name" ] || continue
    cat >"$out/wrap/$name" <<'EOF'
#!/bin/sh
# bin/ of the bundle under this name, with the bundle's libraries (run.sh
# --client points GSYNCD and GSYNC_TESTBED here).
w=$(cd "$(dirname "$0")" && pwd)
exec "$w/../run.sh" "$w/../bin/$(basename "$0")" "$@"
EOF
    chmod +x "$out/wrap/$name"
  done
}

# bundle_python OUT: python/gsync and python/gsync_testbed (pure python).
bundle_python() {
  mkdir -p "$1/python"
  tar -C python --exclude=__pycache__ --exclude='*.pyc' -cf - gsync gsync_testbed |
    tar -C "$1/python" -xf -
}

# bundle_finish BUILD OUT TITLE RUN_LINE [NEEDS_LINE...]: run.sh, MANIFEST
# (TITLE: "gsync GPU bundle: tools/gpu/bundle.sh"; RUN_LINE: how to run and
# check it; each NEEDS_LINE one more "needs ..." line), and the size, which
# fails the bundle above the 64 MiB a working tree may carry.
bundle_finish() {
  local build=$1 out=$2 bytes
  cp tools/common/bundle-run.sh "$out/run.sh"
  chmod +x "$out/run.sh"
  write_manifest "$@"
  bytes=$(du -sb "$out" | cut -f1)
  echo "bundle: $out: $(find "$out" -type f | wc -l) files, $((bytes / 1024)) KiB" \
    "($(awk -v b="$bytes" 'BEGIN { printf "%.1f", b / 1048576 }') MiB of the 64 MiB a" \
    "working tree may carry)"
  sed -n 's/^needs /bundle: needs /p' "$out/MANIFEST"
  if [ "$bytes" -gt "$bundle_limit" ]; then
    echo "bundle: FAIL: $out is over 64 MiB" >&2
    exit 1
  fi
}

write_manifest() {
  local build=$1 out=$2 title=$3 run_line=$4 elves=() cxx=() f
  shift 4
  while IFS= read -r f; do
    is_elf "$f" || continue
    case "$f" in "$out"/lib/cxx/*) cxx+=("$f") ;; *) elves+=("$f") ;; esac
  done < <(find "$out" -type f | sort)
  local glibc cxx_glibc glibcxx cxxabi rev os line
  glibc=$(max_version GLIBC "${elves[@]}")
  cxx_glibc=$(max_version GLIBC "${cxx[@]}")
  glibcxx=$(max_version GLIBCXX "${elves[@]}")
  cxxabi=$(max_version CXXABI "${elves[@]}")
  rev=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
  git diff --quiet HEAD 2>/dev/null || rev="$rev+changes"
  os=$(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME")
  {
    echo "# $title, $(date -u +%Y-%m-%dT%H:%MZ), from $build"
    echo "# at $rev on ${os:-unknown} ($(getconf GNU_LIBC_VERSION 2>/dev/null))."
    echo "# $run_line"
    echo "needs glibc: ${glibc#GLIBC_} ($glibc, the highest any file but lib/cxx's binds to:" \
      "the machine's libc, libm, ld-linux must be this or newer)"
    echo "needs libstdc++: $glibcxx $cxxabi (the machine's where it has them, else lib/cxx)"
    echo "needs glibc for lib/cxx: ${cxx_glibc#GLIBC_} (the bundle's libstdc++ and libgcc_s," \
      "used only where the machine's libstdc++ lacks $glibcxx)"
    for line in "$@"; do echo "needs $line"; done
    echo "# bytes  sha256 (first 16)  file"
    find "$out" \( -type f -o -type l \) -printf '%P\n' | LC_ALL=C sort | while read -r f; do
      if [ -L "$out/$f" ]; then
        printf '%9s  %-16s  %s -> %s\n' link - "$f" "$(readlink "$out/$f")"
      elif [ "$f" = MANIFEST ]; then
        continue
      else
        printf '%9d  %.16s  %s\n' "$(stat -c %s "$out/$f")" \
          "$(sha256sum "$out/$f" | cut -d' ' -f1)" "$f"
      fi
    done
  } >"$out/MANIFEST"
}

# --- checking (bundle check: one line per finding, then PASS or FAIL)

# check_begin DIR: dir (absolute), libpath, tmp (removed at exit, with any
# test bed still up), failures; exits when DIR is not a bundle.
check_begin() {
  dir=$(cd "$1" && pwd) || { echo "bundle check: FAIL (no bundle at $1)"; exit 1; }
  [ -f "$dir/MANIFEST" ] && [ -x "$dir/run.sh" ] ||
    { echo "bundle check: FAIL ($dir has no MANIFEST or run.sh: not a bundle)"; exit 1; }
  libpath="$dir/lib:$dir/lib/cxx"
  failures=()
  tmp=$(mktemp -d /tmp/gsync-bundle-check.XXXXXX)
  bed_pid=
  trap check_cleanup EXIT
}

# shellcheck disable=SC2317  # called from the trap
check_cleanup() {
  [ -n "$bed_pid" ] && kill -TERM "$bed_pid" 2>/dev/null && { wait "$bed_pid" || true; }
  rm -rf "$tmp"
}

fail() {
  echo "bundle check: $1"
  failures+=("$1")
}

# check_end: the verdict; 0 for PASS only.
check_end() {
  if [ ${#failures[@]} = 0 ]; then
    echo "bundle check: PASS ($dir runs with nothing of this machine but glibc)"
    return 0
  fi
  echo "bundle check: FAIL (${#failures[@]} problems: ${failures[0]})"
  return 1
}

# check_ldd [FOLDER...]: ldd of every ELF file under bin/, lib/ and the
# FOLDERs (relative to the bundle) under env -i with the bundle's library
# path alone must find every library inside the bundle, glibc's aside.
check_ldd() {
  local lib arrow path rest n=0 before=${#failures[@]} f folders=("$dir/bin" "$dir/lib") x
  for x in "$@"; do folders+=("$dir/$x"); done
  while IFS= read -r f; do
    [ -L "$f" ] && continue
    is_elf "$f" || continue
    n=$((n + 1))
    while read -r lib arrow path rest; do
      [ "$arrow" = "=>" ] || continue
      case "$path" in "$dir"/lib/*) continue ;; esac
      is_system_lib "$lib" && continue
      fail "${f#"$dir"/}: $lib => $path $rest (not the bundle's lib/)"
    done < <(env -i PATH=/usr/bin:/bin LD_LIBRARY_PATH="$libpath" /usr/bin/ldd "$f" 2>&1)
  done < <(find "${folders[@]}" -type f | sort)
  echo "bundle check: ldd of $n files with LD_LIBRARY_PATH=$libpath only:" \
    "$([ ${#failures[@]} = "$before" ] && echo "every library inside the bundle but glibc's" ||
      echo "$((${#failures[@]} - before)) outside")"
}

# The command line of the bundle's programs: nothing of the caller's
# environment, the system's programs at their usual places, and the
# bundle's libstdc++ (the oldest machine's case).
inside() { env -i PATH=/usr/bin:/bin HOME="$tmp" GSYNC_BUNDLE_CXX=bundle "$dir/run.sh" "$@"; }

loader_error() {
  grep -m1 -E 'error while loading shared libraries|cannot open shared object|run.sh: ' "$1" ||
    grep -m1 -E "version \`[^']*' not found" "$1"
}
tail_of() { tail -3 "$1" | tr '\n' ' '; }
summary() {
  local ok skipped
  ok=$(grep -c '^\[       OK \]' "$1" || true)
  skipped=$(grep -c '^\[  SKIPPED \]' "$1" || true)
  if [ "$ok" != 0 ] || [ "$skipped" != 0 ]; then
    echo "$ok cases passed, $skipped skipped$(grep -m1 -oE '^(no GPU|needs )[^:]*' "$1" |
      sed 's/^/: /')"
  else
    head -1 "$1" | cut -c1-100
  fi
}

# part NAME COMMAND...: COMMAND through run.sh under env -i, its output to
# $tmp/NAME.txt; a failure unless it loaded and exited 0.
part() {
  local name=$1 rc=0 why
  shift
  timeout 300 env -i PATH=/usr/bin:/bin HOME="$tmp" GSYNC_BUNDLE_CXX=bundle \
    "$dir/run.sh" "$@" >"$tmp/$name.txt" 2>&1 || rc=$?
  if why=$(loader_error "$tmp/$name.txt"); then
    fail "$name: does not load: $why"
  elif [ "$rc" != 0 ]; then
    fail "$name: exit status $rc: $(tail_of "$tmp/$name.txt")"
  else
    echo "bundle check: $name: ran ($(summary "$tmp/$name.txt"))"
  fi
}

# check_testbed: two daemons of a test bed on loopback, peered, answering
# gsyncctl; every library the daemon has mapped the bundle's or glibc's.
check_testbed() {
  # Not through inside(): a function in the background is a subshell, and
  # $! must be the bed itself (env and run.sh exec it) for the SIGTERM.
  env -i PATH=/usr/bin:/bin HOME="$tmp" GSYNC_BUNDLE_CXX=bundle "$dir/run.sh" \
    gsync-testbed up --hosts 2 --loopback >"$tmp/testbed.txt" 2>&1 &
  bed_pid=$!
  local admin=
  for _ in $(seq 1 100); do
    grep -q '^Ctrl-C tears' "$tmp/testbed.txt" && break
    kill -0 "$bed_pid" 2>/dev/null || break
    sleep 0.2
  done
  admin=$(awk '/^h1 / {print $NF}' "$tmp/testbed.txt")
  if [ -z "$admin" ]; then
    local why
    why=$(loader_error "$tmp/testbed.txt" || tail_of "$tmp/testbed.txt")
    fail "testbed: did not come up: $why"
  else
    local up=0 pid
    for _ in $(seq 1 50); do
      inside gsyncctl -s "$admin" peers >"$tmp/peers.txt" 2>&1 &&
        grep -qE '^h2 .* up ' "$tmp/peers.txt" && { up=1; break; }
      sleep 0.2
    done
    if [ "$up" = 1 ]; then
      echo "bundle check: testbed: 2 daemons on loopback, gsyncctl peers on h1 says h2 up"
    else
      fail "testbed: h1 does not see h2 up: $(tr '\n' ' ' <"$tmp/peers.txt" | cut -c1-300)"
    fi
    pid=$(inside gsyncctl -s "$admin" status 2>/dev/null | awk '/^pid:/ {print $2}' || true)
    if [ -n "$pid" ] && [ -r "/proc/$pid/maps" ]; then
      local mapped outside=() f
      mapped=$(awk '$6 ~ /\.so/ {print $6}' "/proc/$pid/maps" | sort -u)
      for f in $mapped; do
        case "$f" in "$dir"/*) continue ;; esac
        is_system_lib "$(basename "$f")" || outside+=("$f")
      done
      if [ ${#outside[@]} = 0 ]; then
        echo "bundle check: gsyncd (pid $pid) maps $(wc -w <<<"$mapped") shared objects:" \
          "$(grep -c "^$dir/" <<<"$mapped") the bundle's, the rest glibc's"
      else
        fail "gsyncd maps libraries from outside the bundle: ${outside[*]}"
      fi
    else
      fail "testbed: no pid from gsyncctl status"
    fi
  fi
  kill -TERM "$bed_pid" 2>/dev/null && { wait "$bed_pid" 2>/dev/null || true; }
  bed_pid=
}

# check_chroot "PROGRAM ARGS"...: as root with chroot(1), each PROGRAM
# (bundle-relative) in a root holding only glibc and the bundle, with what
# the bundle's env.sh sets.
check_chroot() {
  local chroot
  chroot=$(command -v chroot || true)
  if [ "$(id -u)" != 0 ] || [ -z "$chroot" ]; then
    echo "bundle check: chroot: not run (needs root and chroot)"
    return 0
  fi
  local root=$tmp/root g cmd programs=() rc=0 ran=()
  for cmd in "$@"; do programs+=("$dir/${cmd%% *}"); done
  mkdir -p "$root/lib/x86_64-linux-gnu" "$root/lib64" "$root/tmp" "$root/b"
  cp -a "$dir/." "$root/b/"
  for g in $(ldd "${programs[@]}" | awk '$2 == "=>" {print $1}' | sort -u); do
    is_system_lib "$g" || continue
    [[ "$g" == libcuda* || "$g" == libnvidia-* ]] && continue
    cp -L "/lib/x86_64-linux-gnu/$g" "$root/lib/x86_64-linux-gnu/" 2>/dev/null || true
  done
  cp -L /lib64/ld-linux-x86-64.so.2 "$root/lib64/"
  # What the bundle's env.sh (where it has one) sets, for the bundle at /b.
  local extra=()
  # shellcheck disable=SC2016  # $1 is the inner shell's
  [ -f "$dir/env.sh" ] && mapfile -t extra < <(env -i b=/b /bin/sh -c '. "$1"; unset b; env' sh \
    "$dir/env.sh" | grep -vE '^(PWD|SHLVL|_)=')
  for cmd in "$@"; do
    # shellcheck disable=SC2086  # the program and its arguments, one a word
    env -i LD_LIBRARY_PATH=/b/lib:/b/lib/cxx "${extra[@]}" "$chroot" "$root" /b/$cmd \
      >>"$tmp/chroot.txt" 2>&1 || { rc=$?; break; }
    ran+=("${cmd##*/}")
  done
  if [ "$rc" = 0 ]; then
    echo "bundle check: chroot (only $(ls "$root/lib/x86_64-linux-gnu" | tr '\n' ' ')and" \
      "ld-linux besides the bundle): $(printf '%s, ' "${ran[@]}" | sed 's/, $//')" \
      "($(summary "$tmp/chroot.txt"))"
  else
    fail "chroot: exit status $rc: $(loader_error "$tmp/chroot.txt" || tail_of "$tmp/chroot.txt")"
  fi
}
