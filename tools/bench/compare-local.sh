#!/usr/bin/env bash
# Single-host comparison in one run: gsync-perf (private daemon) and Open MPI's
# MPI_Allreduce over shared memory (btl self,vader), same ranks and sizes,
# alternating REPS times; prints busbw per size for both, the ratio, and
# gsync's reduce throughput against the a += b memory reference.
#   RANKS=4 MIN=4K MAX=256M REPS=3 tools/bench/compare-local.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${BUILD_DIR:-build}
ranks=${RANKS:-4}
min=${MIN:-4K}
max=${MAX:-256M}
reps=${REPS:-3}
out=$(mktemp -d /tmp/gsync-compare.XXXXXX)
trap 'rm -rf "$out"' EXIT
to_bytes() { numfmt --from=iec "$1"; }

for rep in $(seq "$reps"); do
  "$build/tools/perf/gsync-perf" --ranks "$ranks" --min-bytes "$min" --max-bytes "$max" --json \
    >"$out/gsync_$rep.jsonl"
  mpirun --allow-run-as-root --oversubscribe -np "$ranks" --mca pml ob1 --mca btl self,vader \
    "$build/tools/peers/mpi-allreduce" "$(to_bytes "$min")" "$(to_bytes "$max")" 20 \
    >"$out/mpi_$rep.jsonl" 2>/dev/null
done
python3 - "$out" "$reps" <<'PY'
import json, statistics, sys, glob
out, reps = sys.argv[1], int(sys.argv[2])
def load(kind):
    rows = {}
    for f in sorted(glob.glob(f"{out}/{kind}_*.jsonl")):
        for line in open(f):
            j = json.loads(line)
            if "bytes" in j and "busbw_gbps" in j:
                rows.setdefault(j["bytes"], []).append(j)
            elif "add_gbps" in j:
                rows.setdefault("ref", []).append(j)
    return rows
g, m = load("gsync"), load("mpi")
med = lambda rows, k: statistics.median(r[k] for r in rows)
print(f"# medians of {reps} alternating runs; busbw in GB/s")
print(f"# {'bytes':>11} {'gsync_busbw':>12} {'mpi_busbw':>10} {'vs_mpi':>7} {'gsync_us':>10} {'mpi_us':>10} {'reduce/add':>10}")
for b in sorted(k for k in g if k != "ref"):
    gb, gt = med(g[b], "busbw_gbps"), med(g[b], "time_us")
    ratio_add = ""
    if "ref" in g:
        ratio_add = f"{med(g[b], 'reduce_gbps') / med(g['ref'], 'add_gbps'):.2f}"
    if b in m:
        mb, mt = med(m[b], "busbw_gbps"), med(m[b], "time_us")
        print(f"  {b:>11} {gb:>12.3f} {mb:>10.3f} {gb / mb:>7.2f} {gt:>10.1f} {mt:>10.1f} {ratio_add:>10}")
    else:
        print(f"  {b:>11} {gb:>12.3f} {'-':>10} {'-':>7} {gt:>10.1f} {'-':>10} {ratio_add:>10}")
if "ref" in g:
    r = g["ref"]
    print(f"# memory reference: memcpy {med(r, 'memcpy_gbps'):.2f} GB/s, fp32 a+=b {med(r, 'add_gbps'):.2f} GB/s (1 thread)")
wrong = sum(j["wrong"] for rows in list(g.values()) + list(m.values()) for j in rows)
print(f"# wrong elements: {wrong}")
PY
