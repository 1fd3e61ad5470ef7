#!/usr/bin/env bash
# The main job: installs dependencies, builds, starts a gsyncd, and has 4 rank
# processes allreduce ResNet-50's gradients (25.6 M parameters in DDP's 25 MiB
# buckets) step after step, every element checked; then a size sweep with the
# machine's memory bandwidth as the reference, and the daemon's status.
# RANKS, STEPS override the defaults.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup-deps.sh
bash tools/build.sh >/dev/null
build=${BUILD_DIR:-build}
ranks=${RANKS:-4}
steps=${STEPS:-10}

dir=$(mktemp -d /tmp/gsync-demo.XXXXXX)
daemon_pid=
cleanup() {
  if [ -n "$daemon_pid" ]; then kill "$daemon_pid" 2>/dev/null; wait "$daemon_pid" 2>/dev/null; fi
  rm -rf "$dir"
}
trap cleanup EXIT INT TERM

"$build/daemon/gsyncd" --socket "$dir/gsyncd.sock" --admin-socket "$dir/admin.sock" \
  --log-level warn >"$dir/gsyncd.log" 2>&1 &
daemon_pid=$!
for _ in $(seq 100); do [ -S "$dir/admin.sock" ] && break; sleep 0.05; done
[ -S "$dir/admin.sock" ] || { cat "$dir/gsyncd.log"; exit 1; }

echo "== gsyncd pid $daemon_pid on $dir/gsyncd.sock"
echo "== ResNet-50 gradients, $ranks ranks, $steps steps, average (as DDP)"
"$build/tools/perf/gsync-perf" --socket "$dir/gsyncd.sock" --admin-socket "$dir/admin.sock" \
  --ranks "$ranks" --workload resnet50 --steps "$steps" --op avg
echo
echo "== allreduce size sweep, $ranks ranks, fp32 sum"
"$build/tools/perf/gsync-perf" --socket "$dir/gsyncd.sock" --admin-socket "$dir/admin.sock" \
  --ranks "$ranks" --min-bytes 64K --max-bytes 256M --iters 10 --warmup 3
echo
echo "== gsyncctl status"
"$build/tools/gsyncctl/gsyncctl" --socket "$dir/admin.sock" status
