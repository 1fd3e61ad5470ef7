#!/usr/bin/env bash
# tools/bench/device-cores.sh: the core-per-process measurement (issue #47;
# docs/performance.md, "With a core per process") in one run of under 8
# minutes, for a machine with 16 cores, from the bundle
# tools/bench/cores-bundle.sh makes (no build there; no Open MPI or Gloo of
# its own needed). Its files, in ./cores-out (CORES_OUT):
#
#   perf-nN-SIZE-rR.json  gsync-perf --hosts 4 --racks 1 -n N --pin -b SIZE
#                         -e SIZE --compare gloo,mpi --cpu --json: SIZE 4K,
#                         1M, 64M; N 1 and 2 ranks per host; R the round
#   ddp-hH.json           examples/bench_ddp.py --hosts H --nproc H --json:
#                         gloo, the hook (gsync), DataParallel (gsync_dp) and
#                         no_sync, each with its ranks' and daemons' CPU per
#                         step; H 2 and 4, under the machine's own torch
#   ops-4k.txt, trace-4k.json  a 4 KiB op's stages on the 4 pinned hosts
#                         (gsyncctl ops; gsyncctl trace, for Perfetto)
#   machine.txt, mode.txt, commands.txt, steps.txt, *.err, and
#   summary.txt (tools/bench/cores_summary.py: the tables and the targets)
# Where $OUT is set (the device machine's), summary.txt, steps.txt and
# cores-out.tar.gz (all of them) are copied there at the end, also when the
# run is cut short: 3 files (that machine returns 8 at most).
#
#   tools/bench/device-cores.sh             the measurement
#   tools/bench/device-cores.sh --dry-run   the same parts, few ops and a
#                                           small model: the harness, here
#
# Hosts are network namespaces (the test bed's; needs root and the bundle's
# or the machine's ip) where one can be made, else loopback: mode.txt says
# which and why. --pin gives each of the 4 hosts its own quarter of the
# CPUs: its daemon, its ranks and the peers' ranks on it run there (16
# cores: 4 a host, for 2 or 3 processes). bench_ddp.py's ranks are not
# pinned (8 processes at most on 16 cores). Every program of the bundle runs
# under env -i with the bundle's run.sh; bench_ddp.py runs under the
# caller's environment (the machine's python and torch: run.sh --client).
# Parts run in order of importance and are skipped, said in summary.txt,
# once the budget (BUDGET_S, default 420 s) would be exceeded. A first
# preflight (2 loopback hosts, 4 KiB, gsync alone) stops the run early,
# with its error in summary.txt, where the daemons cannot run at all.
#
# Environment: GSYNC_BUNDLE (default ./cores-bundle), CORES_OUT, OUT, PYTHON
# (default: the first of python3, python3.12, /usr/bin/python3 that imports
# torch), BUDGET_S (default 420), ROUNDS (rounds of the gsync-perf runs,
# default 2; 1 with --dry-run), SIZES (default "4K 1M 64M"), DDP_HOSTS
# (default "2 4"; empty: none), LOOPBACK=1 (gsync-perf's hosts on loopback
# even where namespaces can be made; bench_ddp.py's bed picks for itself).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
dry=0
case "${1:-}" in
  --dry-run) dry=1 ;;
  "") ;;
  *) sed -n '2,/^set -uo/p' "$0" | sed '$d'; exit 2 ;;
esac
out=${CORES_OUT:-cores-out}
mkdir -p "$out"
out=$(cd "$out" && pwd)
# An earlier run's files (only this script's), so that the summary reads this one's.
rm -f "$out"/{perf-,ddp-,trace-,ops-}*.{json,txt,err} "$out"/*.err "$out/summary.txt"
bundle=${GSYNC_BUNDLE:-cores-bundle}
if ! bundle=$(cd "$bundle" 2>/dev/null && pwd) || [ ! -x "$bundle/run.sh" ] ||
  [ ! -x "$bundle/bin/gsync-perf" ]; then
  echo "device-cores: no cores bundle at ${GSYNC_BUNDLE:-cores-bundle}" \
    "(make one with tools/bench/cores-bundle.sh)" | tee "$out/summary.txt"
  exit 1
fi
start=$(date +%s)
budget=${BUDGET_S:-420}
rounds=${ROUNDS:-2}
home=$(mktemp -d /tmp/gsync-cores.XXXXXX)
# shellcheck disable=SC2317  # the trap's
finish() {
  rm -rf "$home"
  if [ -n "${OUT:-}" ] && mkdir -p "$OUT"; then
    cp "$out/steps.txt" "$OUT/" 2>/dev/null
    [ -f "$out/summary.txt" ] && cp "$out/summary.txt" "$OUT/"
    tar -C "$(dirname "$out")" -czf "$OUT/cores-out.tar.gz" "$(basename "$out")"
  fi
}
trap finish EXIT

# Sizes: name, gsync-perf's -b/-e, timed ops, warm-up ops.
if [ "$dry" = 1 ]; then
  all_sizes=("4K 4K 60 5" "1M 1M 8 2" "64M 64M 2 1")
  ddp_args=(--rounds 1 --steps 3 --warmup 1 -- --hidden 256 --layers 2)
  trace_iters=100
  rounds=${ROUNDS:-1}
else
  all_sizes=("4K 4K 3000 200" "1M 1M 200 20" "64M 64M 10 2")
  ddp_args=(--rounds 3 --steps 100 --warmup 10)
  trace_iters=3000
fi
sizes=()
for entry in "${all_sizes[@]}"; do
  [[ " ${SIZES-4K 1M 64M} " == *" ${entry%% *} "* ]] && sizes+=("$entry")
done

# The bundle's programs: nothing of the caller's environment.
inside=(env -i PATH=/usr/bin:/bin:/usr/sbin:/sbin HOME="$home" "$bundle/run.sh")
left() { echo $((budget - ($(date +%s) - start))); }
# step NAME ESTIMATE_S CAP_S FILE COMMAND...: COMMAND's stdout to FILE,
# stderr to NAME.err, under a timeout of the budget left (at most CAP_S);
# not started when less than ESTIMATE_S is left.
step() {
  local name=$1 est=$2 cap=$3 file=$4 t rc=0 t0
  shift 4
  t=$(left)
  if [ "$t" -lt "$est" ]; then
    echo "device-cores: $name: skipped ($t s of the $budget s budget left, it needs about $est)" |
      tee -a "$out/steps.txt"
    return 0
  fi
  [ "$t" -gt "$cap" ] && t=$cap
  echo "$name: $*" >>"$out/commands.txt"
  t0=$(date +%s)
  timeout -k 10 "$t" "$@" >"$file" 2>"$out/$name.err" || rc=$?
  echo "device-cores: $name: exit status $rc, $(($(date +%s) - t0)) s" | tee -a "$out/steps.txt"
}

python=${PYTHON:-}
if [ -z "$python" ]; then
  for cand in python3 python3.12 /usr/bin/python3; do
    if command -v "$cand" >/dev/null && "$cand" -c 'import torch' 2>/dev/null; then
      python=$(command -v "$cand")
      break
    fi
  done
fi
: >"$out/steps.txt"
: >"$out/commands.txt"
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "cpus: $(nproc) ($(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -1);" \
    "$(lscpu 2>/dev/null | sed -n 's/^Thread(s) per core: *//p') threads a core)"
  echo "kernel: $(uname -r); $(getconf GNU_LIBC_VERSION)"
  echo "bundle: $(sed -n 1,2p "$bundle/MANIFEST" | sed 's/^# //' | tr '\n' ' ')"
  echo "python: ${python:-none with torch} $([ -n "$python" ] && "$python" -c \
    'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__,
     "threads", torch.get_num_threads())' 2>&1)"
  echo "dry run: $([ "$dry" = 1 ] && echo yes || echo no)"
} | tee "$out/machine.txt"
if [ "$dry" = 0 ] && [ "$(nproc)" -lt 12 ]; then
  echo "device-cores: only $(nproc) CPUs: 4 hosts of a daemon and 2 ranks need 12 for a" \
    "core each" | tee -a "$out/machine.txt"
fi

# Namespaces if the bundle can make one here, else loopback.
bed=()
probe="gsync-cores-probe-$$"
if [ "${LOOPBACK:-0}" = 1 ]; then
  bed=(--loopback)
  echo "loopback: asked for (LOOPBACK=1)" >"$out/mode.txt"
elif why=$("${inside[@]}" ip netns add "$probe" 2>&1); then
  "${inside[@]}" ip netns del "$probe"
  echo "network namespaces (veth pairs on a bridge; ip netns add works here)" >"$out/mode.txt"
else
  bed=(--loopback)
  echo "loopback: network namespaces cannot be made here ($(id -un), ip netns add: $why)" \
    >"$out/mode.txt"
fi
echo "device-cores: hosts: $(cat "$out/mode.txt")"

# Can the daemons run here at all (glibc, io_uring, sockets)?
step preflight 10 60 "$out/preflight.json" "${inside[@]}" gsync-perf --hosts 2 --racks 1 -n 1 \
  --loopback -b 4K -e 4K --iters 20 --warmup 2 --json
if ! grep -q '"time_us"' "$out/preflight.json"; then
  { echo "device-cores: STOPPED: 2 loopback hosts of the bundle's gsyncd did not run a 4 KiB"
    echo "allreduce here, so nothing else would; its error (preflight.err):"
    tail -5 "$out/preflight.err"; } | tee "$out/summary.txt"
  exit 1
fi

perf_runs() {
  local r=$1 n entry name size iters warmup
  for entry in "${sizes[@]}"; do
    read -r name size iters warmup <<<"$entry"
    for n in 1 2; do
      step "perf-n$n-$name-r$r" 20 150 "$out/perf-n$n-$name-r$r.json" \
        "${inside[@]}" gsync-perf --hosts 4 --racks 1 -n "$n" --pin "${bed[@]}" \
        -b "$size" -e "$size" --iters "$iters" --warmup "$warmup" --compare gloo,mpi --cpu --json
    done
  done
}

ddp_runs() {
  local h
  for h in ${DDP_HOSTS-2 4}; do
    if [ -z "$python" ]; then
      echo "device-cores: ddp-h$h: skipped (no python here imports torch; set PYTHON)" |
        tee -a "$out/steps.txt"
      continue
    fi
    step "ddp-h$h" 45 200 "$out/ddp-h$h.json" \
      "$bundle/run.sh" --client "$python" "$bundle/examples/bench_ddp.py" --hosts "$h" \
      --nproc "$h" --json "${ddp_args[@]}"
  done
}

# A 4 KiB op's stages: a pinned 4-host bed kept up while gsync-perf drives
# it (its ranks in this namespace, unpinned), then gsyncctl ops of h1 and
# the trace of all four daemons.
trace_run() {
  if [ "$(left)" -lt 40 ]; then
    echo "device-cores: trace: skipped ($(left) s of the budget left)" | tee -a "$out/steps.txt"
    return
  fi
  "${inside[@]}" gsync-testbed up --hosts 4 --racks 1 --pin "${bed[@]}" --log-level warn \
    >"$out/trace-bed.txt" 2>&1 &
  local pid=$!
  for _ in $(seq 1 150); do
    grep -q '^Ctrl-C tears' "$out/trace-bed.txt" && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.2
  done
  local cluster sockets admins
  cluster=$(sed -n 's/^cluster file: *//p' "$out/trace-bed.txt")
  sockets=$(awk '/^h[0-9]+ / {print $(NF-1)}' "$out/trace-bed.txt" | paste -sd,)
  admins=$(awk '/^h[0-9]+ / {print $NF}' "$out/trace-bed.txt")
  if [ -z "$cluster" ] || [ -z "$sockets" ]; then
    echo "device-cores: trace: the test bed did not come up (trace-bed.txt)" |
      tee -a "$out/steps.txt"
  else
    step trace-perf 20 120 "$out/trace-perf.json" "${inside[@]}" gsync-perf --cluster "$cluster" \
      --sockets "$sockets" --admin-socket "$(head -1 <<<"$admins")" -n 1 -b 4K -e 4K \
      --iters "$trace_iters" --warmup 20 --json
    "${inside[@]}" gsyncctl -s "$(head -1 <<<"$admins")" ops >"$out/ops-4k.txt" 2>&1
    "${inside[@]}" gsyncctl --json -s "$(head -1 <<<"$admins")" ops >"$out/ops-4k-h1.json" 2>&1
    # shellcheck disable=SC2086  # one admin socket a word
    "${inside[@]}" gsyncctl trace -o "$out/trace-4k.json" $admins >>"$out/ops-4k.txt" 2>&1
  fi
  kill -TERM "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
}

perf_runs 1
ddp_runs
trace_run
for r in $(seq 2 "$rounds"); do perf_runs "$r"; done

echo "device-cores: $(($(date +%s) - start)) s in all (budget $budget s)" | tee -a "$out/steps.txt"
summarize=python3
command -v python3 >/dev/null || summarize=$python
"$summarize" tools/bench/cores_summary.py "$out" | tee "$out/summary.txt"
