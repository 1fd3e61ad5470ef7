#!/usr/bin/env bash
# The main job: installs dependencies, builds, and runs a real multi-host
# aggregation on this one machine. A test bed of 4 hosts in 2 racks (network
# namespaces joined by bridges; loopback when namespaces cannot be made), one
# gsyncd per host, RANKS rank processes per host allreducing ResNet-50's
# gradients (25.6 M parameters in DDP's 25 MiB buckets, averaged) step after
# step with every element checked; then a size sweep in nccl-tests' columns
# with the algorithm per size; then `gsyncctl peers` and `status` of host 1.
# HOSTS, RACKS, RANKS, STEPS, UPLINK_MBIT override the defaults.
# GSYNC_DEMO_PREBUILT=1 skips the install and the build and uses BUILD_DIR
# as it is: the test suite runs the demo that way (tests/integration).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${GSYNC_DEMO_PREBUILT:-}" ]; then
  bash tools/setup-deps.sh
  # What the main job runs, not the test suite: on two cores the rest would
  # be most of the build.
  bash tools/build.sh daemon/gsyncd libclient/libgsync.so.0.1.0 tools/testbed/gsync-testbed \
    tools/perf/gsync-perf tools/gsyncctl/gsyncctl >/dev/null
fi
build=${BUILD_DIR:-build}
hosts=${HOSTS:-4}
racks=${RACKS:-2}
ranks=${RANKS:-2}
steps=${STEPS:-10}
uplink=${UPLINK_MBIT:-0}

out=$(mktemp /tmp/gsync-demo.XXXXXX)
bed_pid=
cleanup() {
  if [ -n "$bed_pid" ]; then kill -TERM "$bed_pid" 2>/dev/null; wait "$bed_pid" 2>/dev/null; fi
  rm -f "$out"
}
trap cleanup EXIT INT TERM

shape=()
[ "$uplink" != 0 ] && shape=(--uplink-mbit "$uplink")
"$build/tools/testbed/gsync-testbed" up --hosts "$hosts" --racks "$racks" "${shape[@]}" \
  --log-level warn >"$out" 2>&1 &
bed_pid=$!
for _ in $(seq 300); do grep -q "Ctrl-C" "$out" && break; kill -0 "$bed_pid" 2>/dev/null || break; sleep 0.1; done
grep -q "Ctrl-C" "$out" || { cat "$out"; exit 1; }
sed '/Ctrl-C/d' "$out"
cluster=$(awk '/^cluster file:/ {print $3}' "$out")
# Columns by the header ("client socket" then "admin socket", the last two),
# so a column added before them does not shift these.
col='/^host / {for (i = 1; i <= NF; i++) if ($i == "client") c = i}'
sockets=$(awk "$col"' c && $1 ~ /^h[0-9]+$/ {print $c}' "$out" | paste -sd, -)
admin=$(awk "$col"' c && $1 ~ /^h[0-9]+$/ {print $(c + 1); exit}' "$out")
perf=("$build/tools/perf/gsync-perf" --cluster "$cluster" --sockets "$sockets" --admin-socket "$admin"
  --ranks-per-host "$ranks")

echo
echo "== ResNet-50 gradients over $hosts hosts x $ranks ranks, $steps steps, average (as DDP)"
"${perf[@]}" --workload resnet50 --steps "$steps" --warmup 2 --op avg
echo
echo "== allreduce size sweep over $hosts hosts x $ranks ranks, fp32 sum"
# 20 timed ops per size: the time printed is a median over samples, and
# with 5 one-op samples at 1 MiB and above one slow op moved a size's row.
"${perf[@]}" --min-bytes 4K --max-bytes 64M --iters 20 --warmup 2
echo
echo "== gsyncctl peers (host 1)"
"$build/tools/gsyncctl/gsyncctl" --socket "$admin" peers
echo
echo "== gsyncctl status (host 1)"
"$build/tools/gsyncctl/gsyncctl" --socket "$admin" status
