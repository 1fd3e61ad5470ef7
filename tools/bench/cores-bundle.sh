#!/usr/bin/env bash
# tools/bench/cores-bundle.sh: what tools/bench/device-cores.sh runs, for a
# machine with the cores this one lacks but no network, none of Debian's
# -dev libraries, no Open MPI and no Gloo (docs/performance.md, "With a core
# per process"): the daemon, libgsync, gsync-perf and the peer programs its
# --compare runs, Open MPI's launcher with what it loads at run time, and
# examples/bench_ddp.py for the machine's own python and torch.
#
#   tools/bench/cores-bundle.sh [--no-strip] [BUILD_DIR [OUT_DIR]]   make it
#   tools/bench/cores-bundle.sh --check [OUT_DIR]                    prove it here
#
# BUILD_DIR (default build) must have gsync-perf and the peer drivers built
# (Gloo's and Open MPI's need libgloo-dev and libopenmpi-dev here); OUT_DIR
# (default cores-bundle, git-ignored) is made anew. The bundle's layout is
# tools/common/bundle-lib.sh's, with:
#   bin/        gsyncd, gsyncctl, gsync-testbed, gsync-perf; gloo-allreduce,
#               mpi-allreduce, tcp-stream, netns-rsh.sh (found beside
#               gsync-perf); Open MPI's orterun as mpirun (found on PATH)
#               and orted (what netns-rsh.sh starts in a namespace); ip
#               (iproute2: the test bed's namespaces, where the machine has
#               no ip of its own)
#   openmpi/    lib/openmpi3/: the MCA components a run over TCP opens -
#               not those for UCX, OFI, openib, PSM (libraries of their own;
#               Debian's openmpi-mca-params.conf, in etc/, turns them off),
#               OpenSHMEM or MPI-IO (the driver uses neither); lib/pmix/:
#               PMIx's; share/openmpi, share/pmix: the help files their
#               messages are printed from; lib/hwloc/: empty (hwloc loads
#               none of the machine's plugins)
#   env.sh      sourced by run.sh: OPAL_PREFIX and OPAL_*DIR, PMIX_*,
#               HWLOC_PLUGINS_PATH into openmpi/
#   examples/bench_ddp.py, examples/train_ddp.py, python/gsync,
#               python/gsync_testbed: bench_ddp.py finds the rest from
#               where it is (run.sh --client python3 examples/bench_ddp.py)
#
# --check: ldd of every file, bin/, lib/ and openmpi/, under env -i with the
# bundle's library path alone; under env -i PATH=/usr/bin:/bin, through
# run.sh: gsyncd and mpirun --version, a two-host test bed (gsyncctl, the
# daemon's maps), and gsync-perf --compare gloo,mpi at 4 KiB across 2
# pinned hosts (namespaces where they can be made, else loopback) under
# strace: every file any process of it opened or ran must be the bundle's,
# glibc's, or the kernel's (/proc, /sys, /dev), /tmp, or one of a few files
# of /etc; as root, gsyncd and mpirun in a chroot of glibc and the bundle.
# Last line "bundle check: PASS" or "bundle check: FAIL (...)".
set -euo pipefail
# Paths given are the caller's; the defaults, the repository's.
caller=$PWD
self=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
cd "$(dirname "$0")/../.."

# shellcheck source=tools/common/bundle-lib.sh
. tools/common/bundle-lib.sh

ompi_lib=/usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3
pmix_lib=/usr/lib/x86_64-linux-gnu/pmix2/lib/pmix
ompi_share=/usr/share/openmpi
pmix_share=/usr/lib/x86_64-linux-gnu/pmix2/share/pmix
ompi_conf=/etc/openmpi/openmpi-mca-params.conf

# The project's programs and the peers': bundle name, path (under the
# build dir, or absolute), required.
programs=(
  "gsyncd daemon/gsyncd 1"
  "gsyncctl tools/gsyncctl/gsyncctl 1"
  "gsync-testbed tools/testbed/gsync-testbed 1"
  "gsync-perf tools/perf/gsync-perf 1"
  "gloo-allreduce tools/peers/gloo-allreduce 1"
  "mpi-allreduce tools/peers/mpi-allreduce 1"
  "tcp-stream tools/peers/tcp-stream 1"
  "netns-rsh.sh tools/peers/netns-rsh.sh 1"
)
# Built here, stripped of their symbol tables (the rest come stripped).
ours=(gsyncd gsyncctl gsync-testbed gsync-perf gloo-allreduce mpi-allreduce tcp-stream)
wrapped=(gsyncd gsync-testbed gsyncctl)
# MCA components left out (see the header).
unwanted='ucx|ofi|openib|psm|dbg_msgq'
unwanted+='|_atomic_|_memheap_|_scoll_|_spml_|_sshmem_'   # OpenSHMEM
unwanted+='|_io_|_fs_|_fbtl_|_fcoll_|_sharedfp_'         # MPI-IO

make_bundle() {
  local strip=$1 build=$2 out=$3 f
  [ -d "$build" ] || { echo "bundle: no build dir $build" >&2; exit 1; }
  local orterun ip
  orterun=$(readlink -f "$(command -v mpirun || echo /usr/bin/mpirun)")
  ip=$(command -v ip || true)
  for f in "$orterun" /usr/bin/orted "$ompi_lib" "$pmix_lib" "$ompi_share" "$pmix_share"; do
    [ -e "$f" ] || { echo "bundle: $f is not here (openmpi-bin, libpmix2)" >&2; exit 1; }
  done
  rm -rf "$out"
  bundle_programs "$build" "$out" "${programs[@]}" "mpirun $orterun 1" "orted /usr/bin/orted 1" \
    "ip ${ip:-/sbin/ip} 0"
  bundle_libgsync "$build" "$out"

  local o=$out/openmpi
  mkdir -p "$o"/lib/{openmpi3,pmix,hwloc} "$o"/share/{openmpi,pmix} "$o/etc"
  for f in "$ompi_lib"/*.so; do
    grep -qE "$unwanted" <<<"$(basename "$f")" || cp "$f" "$o/lib/openmpi3/"
  done
  cp "$pmix_lib"/*.so "$o/lib/pmix/"
  cp "$ompi_share"/help-*.txt "$o/share/openmpi/"
  cp -r "$ompi_share/amca-param-sets" "$o/share/openmpi/"
  cp "$pmix_share"/help-*.txt "$o/share/pmix/"
  cp "$ompi_conf" "$o/etc/"
  # Debian's names its component folder by absolute path: this one is empty,
  # env.sh names the folder instead.
  : >"$o/etc/pmix-mca-params.conf"
  cat >"$out/env.sh" <<'EOF'
# env.sh of a cores bundle (tools/bench/cores-bundle.sh), sourced by run.sh
# with $b the bundle: Open MPI and PMIx find their components, help files
# and settings inside it, not where Debian installed them; hwloc loads no
# plugin of the machine's.
o=$b/openmpi
export OPAL_PREFIX="$o" OPAL_EXEC_PREFIX="$o" OPAL_BINDIR="$b/bin" OPAL_LIBDIR="$b/lib" \
  OPAL_PKGLIBDIR="$o/lib/openmpi3" OPAL_DATADIR="$o/share" OPAL_PKGDATADIR="$o/share/openmpi" \
  OPAL_SYSCONFDIR="$o/etc"
export PMIX_PREFIX="$o" PMIX_INSTALL_PREFIX="$o" PMIX_LIBDIR="$b/lib" PMIX_PKGLIBDIR="$o/lib/pmix" \
  PMIX_DATADIR="$o/share" PMIX_PKGDATADIR="$o/share/pmix" PMIX_SYSCONFDIR="$o/etc" \
  PMIX_MCA_mca_base_component_path="$o/lib/pmix"
export HWLOC_PLUGINS_PATH="$o/lib/hwloc"
EOF
  bundle_libs "$out" "$out"/bin/* "$out"/lib/libgsync.so.*.* "$o"/lib/*/*.so
  if [ "$strip" = 1 ]; then
    # Symbol tables only: the CUDA fat binaries of a CUDA build's gsyncd
    # are allocated sections and stay.
    for f in "${ours[@]}"; do strip --strip-unneeded "$out/bin/$f"; done
    strip --strip-unneeded "$out"/lib/libgsync.so.*.*
  fi
  bundle_wraps "$out" "${wrapped[@]}"
  bundle_python "$out"
  mkdir -p "$out/examples"
  cp examples/bench_ddp.py examples/train_ddp.py "$out/examples/"
  local run_line ompi_line
  run_line="Run: tools/bench/device-cores.sh (docs/performance.md); check:"
  run_line+=" tools/bench/cores-bundle.sh --check DIR."
  ompi_line="Open MPI: none ($(mpirun --version 2>/dev/null | head -1 | sed 's/.*) //')"
  ompi_line+=" is in openmpi/ and bin/, over TCP)"
  bundle_finish "$build" "$out" "gsync cores bundle: tools/bench/cores-bundle.sh" "$run_line" \
    "$ompi_line" \
    "python: the machine's python3 with torch for examples/bench_ddp.py (run.sh --client)"
}

# --- --check

# Files a process of the bundle's may open outside it: glibc's
# (is_system_lib), the kernel's, the scratch folders, the network
# namespaces (ip's net:[...]), and what glibc and ip read of /etc.
allowed_outside() {
  case "$1" in
    / | /proc | /proc/* | /sys | /sys/* | /dev/* | 'net:['* | /tmp | /tmp/* | /run/netns* | \
      /var/run/netns* | \
      /etc/ld.so.cache | /etc/nsswitch.conf | /etc/hosts | /etc/host.conf | /etc/resolv.conf | \
      /etc/gai.conf | /etc/passwd | /etc/group | /etc/localtime | /etc/services | \
      /etc/protocols | /etc/netns/* | /etc/iproute2/* | /usr/share/iproute2/* | \
      /usr/share/zoneinfo/*) return 0 ;;
  esac
  is_system_lib "$(basename "$1")"
}
# The machine's programs a run may start: the shell and the base utilities
# (run.sh's, and strace and timeout of this check). Their own libraries are
# the machine's business.
machine_programs='sh|dash|bash|env|timeout|strace|cut|dirname|basename|getconf|head|tail|sed'
machine_programs+='|sort|tr|cat|grep|awk|mawk|ldconfig|uname'

# compare_run: gsync-perf --compare gloo,mpi at 4 KiB across 2 pinned hosts,
# under strace -f; what each process opened or ran, by the program it runs.
compare_run() {
  local mode=(--loopback) how="loopback"
  if ip netns add "gsync-probe-$$" 2>/dev/null; then
    ip netns del "gsync-probe-$$"
    mode=()
    how="network namespaces"
  fi
  if ! command -v strace >/dev/null; then
    fail "compare: strace is not here (Debian's strace): cannot list what the run opens"
    return
  fi
  local rc=0 out=$tmp/compare.txt
  # -z: the calls that succeeded; -y: the path of each file opened (as
  # "= FD</path>"); clone and fork to know a child's program. An O_PATH
  # open reads nothing (libsystemd walks / with them): not counted.
  timeout 300 env -i PATH=/usr/bin:/bin HOME="$tmp" GSYNC_BUNDLE_CXX=bundle \
    strace -f -qq -z -y -e trace=open,openat,execve,clone,clone3,fork,vfork -o "$tmp/strace.txt" \
    "$dir/run.sh" gsync-perf --hosts 2 --racks 1 -n 1 --pin "${mode[@]}" -b 4K -e 4K \
    --iters 20 --warmup 2 --compare gloo,mpi >"$out" 2>&1 || rc=$?
  local why
  if why=$(loader_error "$out"); then
    fail "compare: does not load: $why"
    return
  elif [ "$rc" != 0 ]; then
    fail "compare: exit status $rc: $(tail_of "$out")"
    return
  elif grep -q '^# peer run failed' "$out"; then
    fail "compare: $(grep -m1 '^# peer run failed' "$out")"
    return
  fi
  local row
  row=$(awk '$1 == 4096' "$out" | head -1 | tr -s ' ')
  # "PROGRAM<tab>FILE" per file opened, "exec<tab>PROGRAM" per program run.
  local what f outside=() machine=() n=0
  while IFS=$'\t' read -r what f; do
    if [ "$what" = exec ]; then
      case "$f" in "$dir"/*) continue ;; esac
      if grep -qxE "$machine_programs" <<<"$(basename "$f")"; then
        machine+=("$(basename "$f")")
      else
        outside+=("ran $f")
      fi
      continue
    fi
    case "$what" in "$dir"/*) ;; *) continue ;; esac
    n=$((n + 1))
    case "$f" in "$dir"/* | "$tmp"/*) continue ;; esac
    allowed_outside "$f" || outside+=("${what##*/} opened $f")
  done < <(awk -v OFS='\t' '
      { pid = $1 }
      / (clone3?|v?fork)\(/ { prog[$NF] = prog[pid]; next }
      / execve\("/ { split($0, a, "\""); prog[pid] = a[2]; print "exec", a[2]; next }
      / open(at)?\(.*O_PATH/ { next }
      / open(at)?\(.*= [0-9]+</ { sub(/.*= [0-9]+</, ""); sub(/>$/, ""); print prog[pid], $0 }' \
      "$tmp/strace.txt" | sort -u)
  if [ ${#outside[@]} = 0 ]; then
    echo "bundle check: compare: gsync-perf --compare gloo,mpi, 2 pinned hosts on $how," \
      "4 KiB: ran (row: ${row:-none}); the bundle's processes opened $n files, none outside" \
      "it but glibc's, the kernel's, /tmp's and /etc's usual ones; the machine's programs" \
      "run: $(printf '%s\n' "${machine[@]}" | sort -u | tr '\n' ' ')"
  else
    fail "compare: outside the bundle: $(printf '%s; ' "${outside[@]}" | sort -u)"
  fi
}

check_bundle() {
  check_begin "$1"
  check_ldd openmpi
  part gsyncd-version gsyncd --version
  part mpirun-version mpirun --version
  check_testbed
  compare_run
  check_chroot "bin/gsyncd --version" "bin/mpirun --version"
  check_end
}

bundle_main cores-bundle "$@"
