#!/usr/bin/env bash
# tools/gpu/bundle.sh: the GPU programs of a CUDA build with the shared
# libraries they load, for a machine that has a GPU, CUDA and PyTorch but not
# the project's -dev libraries (docs/gpu.md, "The bundle for a machine
# without -dev libraries"). tools/gpu/device-check.sh runs a bundle instead
# of building when it finds one.
#
#   tools/gpu/bundle.sh [--no-strip] [BUILD_DIR [OUT_DIR]]   make it
#   tools/gpu/bundle.sh --check [OUT_DIR]                    prove it here
#
# BUILD_DIR (default build) must be configured with CUDA and built; OUT_DIR
# (default gpu-bundle, git-ignored) is made anew:
#   bin/        gsyncd, gsyncctl, gsync-testbed, test_gpu_reduce,
#               test_gpu_buffers, test_cuda_abi, bench_gpu_reduce,
#               bench_device_allreduce
#   lib/        libgsync.so and every library those load (ldd), less
#   lib/cxx/    libstdc++ and libgcc_s, which run.sh adds only where the
#               machine's own libstdc++ is older than the bundle needs
#   wrap/       gsyncd, gsync-testbed, gsyncctl: scripts that run bin/'s
#               with the bundle's libraries (for run.sh --client)
#   python/gsync, python/gsync_testbed, tests/torch/{test_cuda,torch_common}.py
#   run.sh      (tools/gpu/bundle-run.sh) runs a command with all of it
#   MANIFEST    every file, and the glibc, libstdc++ and CUDA driver the
#               machine must have
# Not bundled: glibc (libc, libm, libdl, libpthread, librt, libresolv,
# ld-linux: the loader and libc go together, and the machine's serves) and
# the NVIDIA driver's libcuda / libnvidia-* (they must match the kernel
# module). The CUDA runtime is linked in statically by nvcc.
#
# --check runs the bundle with nothing of this machine but glibc: (a) ldd
# under env -i with only the bundle's library path must resolve every
# library inside it (glibc and libcuda aside); (b) under env -i
# PATH=/usr/bin:/bin, through run.sh with the bundle's libstdc++: gsyncd
# --version, the three GPU programs (their GPU cases say SKIPPED without a
# GPU; the point is that they load and start), a two-host test bed answering
# gsyncctl, and every library its daemon has mapped must be the bundle's or
# glibc's; (c) as root with chroot(1), gsyncd and test_gpu_reduce in a root
# holding only glibc and the bundle. Last line: "bundle check: PASS" or
# "bundle check: FAIL (...)"; exit status 0 for PASS only.
set -euo pipefail
# Paths given are the caller's; the defaults, the repository's.
caller=$PWD
self=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
cd "$(dirname "$0")/../.."
given() { case "$1" in /*) echo "$1" ;; *) echo "$caller/$1" ;; esac; }

# Programs: bundle name, path under the build dir, required.
programs=(
  "gsyncd daemon/gsyncd 1"
  "gsyncctl tools/gsyncctl/gsyncctl 0"
  "gsync-testbed tools/testbed/gsync-testbed 1"
  "test_gpu_reduce tests/gpu/test_gpu_reduce 1"
  "test_gpu_buffers tests/gpu/test_gpu_buffers 1"
  "test_cuda_abi tests/gpu/test_cuda_abi 1"
  "bench_gpu_reduce tools/bench/bench_gpu_reduce 1"
  "bench_device_allreduce tools/bench/bench_device_allreduce 1"
)
# The wrap/ scripts: what a python process starts (GSYNCD, GSYNC_TESTBED).
wrapped=(gsyncd gsync-testbed gsyncctl)
# The torch test and what it imports from the repository.
python_files=(tests/torch/test_cuda.py tests/torch/torch_common.py)
limit=$((64 << 20))

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

make_bundle() {
  local strip=$1 build=$2 out=$3
  [ -d "$build" ] || { echo "bundle: no build dir $build" >&2; exit 1; }
  if ! grep -q '^#define GSYNC_HAVE_CUDA 1' "$build/gsync_build_config.h" 2>/dev/null; then
    echo "bundle: $build is not a CUDA build (GSYNC_HAVE_CUDA in gsync_build_config.h):" \
      "its GPU tests would only skip" >&2
    exit 1
  fi
  rm -rf "$out"
  mkdir -p "$out"/{bin,lib/cxx,wrap,python,tests/torch}
  local entry name rel required
  for entry in "${programs[@]}"; do
    read -r name rel required <<<"$entry"
    if [ ! -x "$build/$rel" ]; then
      [ "$required" = 1 ] && { echo "bundle: $build/$rel is not built" >&2; exit 1; }
      echo "bundle: $build/$rel is not built: left out"
      continue
    fi
    cp -L "$build/$rel" "$out/bin/$name"
  done
  local so
  so=$(readlink -f "$build/libclient/libgsync.so")
  [ -f "$so" ] || { echo "bundle: $build/libclient/libgsync.so is not built" >&2; exit 1; }
  cp "$so" "$out/lib/"
  ln -s "$(basename "$so")" "$out/lib/libgsync.so.0"
  ln -s libgsync.so.0 "$out/lib/libgsync.so"

  # Every library the programs and libgsync load, as ldd resolves it here
  # (the build's RUNPATH, then the system's): ldd lists the whole closure.
  local f lib arrow path dest
  for f in "$out"/bin/* "$out/lib/$(basename "$so")"; do
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
  if [ "$strip" = 1 ]; then
    # Symbol tables only: the CUDA fat binaries are allocated sections and
    # stay. The system's libraries come stripped already.
    strip --strip-unneeded "$out"/bin/* "$out/lib/$(basename "$so")"
  fi

  for name in "${wrapped[@]}"; do
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
  tar -C python --exclude=__pycache__ --exclude='*.pyc' -cf - gsync gsync_testbed | tar -C "$out/python" -xf -
  cp "${python_files[@]}" "$out/tests/torch/"
  cp tools/gpu/bundle-run.sh "$out/run.sh"
  chmod +x "$out/run.sh"

  write_manifest "$build" "$out"
  local bytes
  bytes=$(du -sb "$out" | cut -f1)
  echo "bundle: $out: $(find "$out" -type f | wc -l) files, $((bytes / 1024)) KiB" \
    "($(awk -v b="$bytes" 'BEGIN { printf "%.1f", b / 1048576 }') MiB of the 64 MiB a" \
    "working tree may carry)"
  sed -n 's/^needs /bundle: needs /p' "$out/MANIFEST"
  if [ "$bytes" -gt "$limit" ]; then
    echo "bundle: FAIL: $out is over 64 MiB" >&2
    exit 1
  fi
}

write_manifest() {
  local build=$1 out=$2 elves=() cxx=() f
  while IFS= read -r f; do
    is_elf "$f" || continue
    case "$f" in "$out"/lib/cxx/*) cxx+=("$f") ;; *) elves+=("$f") ;; esac
  done < <(find "$out" -type f | sort)
  local glibc cxx_glibc glibcxx cxxabi cuda rev os
  glibc=$(max_version GLIBC "${elves[@]}")
  cxx_glibc=$(max_version GLIBC "${cxx[@]}")
  glibcxx=$(max_version GLIBCXX "${elves[@]}")
  cxxabi=$(max_version CXXABI "${elves[@]}")
  cuda=$(nvcc --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\).*/\1/p')
  rev=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
  git diff --quiet HEAD 2>/dev/null || rev="$rev+changes"
  os=$(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME")
  {
    echo "# gsync GPU bundle: tools/gpu/bundle.sh, $(date -u +%Y-%m-%dT%H:%MZ), from $build"
    echo "# at $rev on ${os:-unknown} ($(getconf GNU_LIBC_VERSION 2>/dev/null))."
    echo "# Run: run.sh COMMAND (docs/gpu.md); check: tools/gpu/bundle.sh --check DIR."
    echo "needs glibc: ${glibc#GLIBC_} ($glibc, the highest any file but lib/cxx's binds to:" \
      "the machine's libc, libm, ld-linux must be this or newer)"
    echo "needs libstdc++: $glibcxx $cxxabi (the machine's where it has them, else lib/cxx)"
    echo "needs glibc for lib/cxx: ${cxx_glibc#GLIBC_} (the bundle's libstdc++ and libgcc_s," \
      "used only where the machine's libstdc++ lacks $glibcxx)"
    echo "needs CUDA driver: ${cuda:-unknown} (the CUDA runtime of nvcc $cuda is linked in; the" \
      "machine's libcuda.so.1 must support it: nvidia-smi's 'CUDA Version' >= ${cuda%.*})"
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

# --- --check

check_bundle() {
  local dir
  dir=$(cd "$1" && pwd) || { echo "bundle check: FAIL (no bundle at $1)"; exit 1; }
  [ -f "$dir/MANIFEST" ] && [ -x "$dir/run.sh" ] ||
    { echo "bundle check: FAIL ($dir has no MANIFEST or run.sh: not a bundle)"; exit 1; }
  local failures=() libpath="$dir/lib:$dir/lib/cxx" f
  fail() {
    echo "bundle check: $1"
    failures+=("$1")
  }

  # (a) ldd with the bundle's library path alone.
  local lib arrow path rest n=0
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
  done < <(find "$dir/bin" "$dir/lib" -type f | sort)
  echo "bundle check: ldd of $n files with LD_LIBRARY_PATH=$libpath only:" \
    "$([ ${#failures[@]} = 0 ] && echo "every library inside the bundle but glibc's" ||
      echo "${#failures[@]} outside")"

  # (b) the programs, under env -i, through run.sh with the bundle's libstdc++.
  # Globals, for the trap.
  tmp=$(mktemp -d /tmp/gsync-bundle-check.XXXXXX)
  bed_pid=
  # shellcheck disable=SC2317  # called from the trap
  cleanup() {
    [ -n "$bed_pid" ] && kill -TERM "$bed_pid" 2>/dev/null && { wait "$bed_pid" || true; }
    rm -rf "$tmp"
  }
  trap cleanup EXIT
  inside() { env -i PATH=/usr/bin:/bin HOME="$tmp" GSYNC_BUNDLE_CXX=bundle "$dir/run.sh" "$@"; }
  loader_error() {
    grep -m1 -E 'error while loading shared libraries|cannot open shared object|run.sh: ' "$1" ||
      grep -m1 -E "version \`[^']*' not found" "$1"
  }
  tail_of() { tail -3 "$1" | tr '\n' ' '; }
  # part NAME COMMAND...: runs it, its output to $tmp/NAME.txt; 0 unless it
  # could not load or exited non-zero.
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
  part gsyncd-version gsyncd --version
  part test_gpu_reduce test_gpu_reduce
  part test_cuda_abi test_cuda_abi
  part test_gpu_buffers test_gpu_buffers
  part bench_gpu_reduce bench_gpu_reduce --inputs 2 64

  # A real thing without a GPU: two daemons of a test bed on loopback,
  # peered, answering gsyncctl.
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
    # Every shared object the daemon has mapped: the bundle's, or glibc's.
    pid=$(inside gsyncctl -s "$admin" status 2>/dev/null | awk '/^pid:/ {print $2}' || true)
    if [ -n "$pid" ] && [ -r "/proc/$pid/maps" ]; then
      local mapped outside=()
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

  # (c) a root of glibc and the bundle alone.
  local chroot
  chroot=$(command -v chroot || true)
  if [ "$(id -u)" = 0 ] && [ -n "$chroot" ]; then
    local root=$tmp/root g
    mkdir -p "$root/lib/x86_64-linux-gnu" "$root/lib64" "$root/tmp" "$root/b"
    cp -a "$dir/." "$root/b/"
    for g in $(ldd "$dir/bin/gsyncd" "$dir/bin/test_gpu_reduce" | awk '$2 == "=>" {print $1}' |
      sort -u); do
      is_system_lib "$g" || continue
      [[ "$g" == libcuda* || "$g" == libnvidia-* ]] && continue
      cp -L "/lib/x86_64-linux-gnu/$g" "$root/lib/x86_64-linux-gnu/" 2>/dev/null || true
    done
    cp -L /lib64/ld-linux-x86-64.so.2 "$root/lib64/"
    local rc=0
    env -i LD_LIBRARY_PATH=/b/lib:/b/lib/cxx "$chroot" "$root" /b/bin/gsyncd --version \
      >"$tmp/chroot.txt" 2>&1 &&
      env -i LD_LIBRARY_PATH=/b/lib:/b/lib/cxx "$chroot" "$root" /b/bin/test_gpu_reduce \
        >>"$tmp/chroot.txt" 2>&1 || rc=$?
    if [ "$rc" = 0 ]; then
      echo "bundle check: chroot (only $(ls "$root/lib/x86_64-linux-gnu" | tr '\n' ' ')and" \
        "ld-linux besides the bundle): gsyncd --version, test_gpu_reduce" \
        "($(summary "$tmp/chroot.txt"))"
    else
      fail "chroot: exit status $rc: $(loader_error "$tmp/chroot.txt" || tail_of "$tmp/chroot.txt")"
    fi
  else
    echo "bundle check: chroot: not run (needs root and chroot)"
  fi

  if [ ${#failures[@]} = 0 ]; then
    echo "bundle check: PASS ($dir runs with nothing of this machine but glibc)"
    return 0
  fi
  echo "bundle check: FAIL (${#failures[@]} problems: ${failures[0]})"
  return 1
}

strip=1
if [ "${1:-}" = --check ]; then
  check_bundle "$([ -n "${2:-}" ] && given "$2" || echo gpu-bundle)"
  exit
fi
if [ "${1:-}" = --no-strip ]; then
  strip=0
  shift
fi
case "${1:-}" in -*) sed -n '2,/^set -euo/p' "$self" | sed '$d'; exit 2 ;; esac
make_bundle "$strip" "$([ -n "${1:-}" ] && given "$1" || echo build)" \
  "$([ -n "${2:-}" ] && given "$2" || echo gpu-bundle)"
