#!/usr/bin/env python3
"""ab.py: the same gsync-perf command from two builds, interleaved, medians.

  tools/bench/ab.py --a BUILD_A --b BUILD_B --rounds 6 -- --hosts 4 --racks 1 -n 1 \\
      --loopback -b 4K -e 4K --iters 3000 --compare mpi

Runs `BUILD/tools/perf/gsync-perf ARGS --json` alternately from A and B
(A B, B A, A B, ...: both see the same noise of a shared machine, and
neither always goes first), and prints,
per size, the median and range of time_us for each, each one's ratios
against the peers measured in its own runs (vs_gloo, vs_mpi), and B's
median time over A's. --json-out writes every row.
"""
import argparse
import json
import statistics
import subprocess
import sys


def run(build, args, timeout):
    cmd = [f"{build}/tools/perf/gsync-perf", *args, "--json"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    rows = []
    for line in p.stdout.splitlines():
        line = line.strip()
        if line.startswith("{"):
            r = json.loads(line)
            if "time_us" in r:
                rows.append(r)
    if p.returncode != 0 or not rows:
        sys.stderr.write(f"ab.py: {' '.join(cmd)} failed ({p.returncode}):\n{p.stderr[-2000:]}\n")
        return None
    if any(r.get("wrong", 0) for r in rows):
        sys.stderr.write(f"ab.py: wrong elements from {build}\n")
        return None
    return rows


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--a", required=True, help="build directory A (before)")
    ap.add_argument("--b", required=True, help="build directory B (after)")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--timeout", type=int, default=900, help="seconds per run")
    ap.add_argument("--json-out", help="write every row here, one JSON object per line")
    ap.add_argument("args", nargs=argparse.REMAINDER)
    o = ap.parse_args()
    args = o.args[1:] if o.args[:1] == ["--"] else o.args
    results = {"a": [], "b": []}
    for i in range(o.rounds):
        for side in ("a", "b") if i % 2 == 0 else ("b", "a"):
            rows = run(getattr(o, side), args, o.timeout)
            if rows:
                for r in rows:
                    r["side"], r["round"] = side, i
                results[side].extend(rows)
            print(f"# round {i + 1}/{o.rounds} {side}: " +
                  (", ".join(f"{r['bytes']}B {r['time_us']:.1f}us" for r in rows) if rows else "failed"),
                  flush=True)
    if o.json_out:
        with open(o.json_out, "w") as f:
            for side in ("a", "b"):
                for r in results[side]:
                    f.write(json.dumps(r) + "\n")
    sizes = sorted({r["bytes"] for side in results.values() for r in side})
    print(f"{'bytes':>12} {'side':>4} {'runs':>4} {'median_us':>11} {'range_us':>21} "
          f"{'vs_gloo':>8} {'vs_mpi':>8}")
    for size in sizes:
        t = {}
        for side in ("a", "b"):
            rows = [r for r in results[side] if r["bytes"] == size]
            times = [r["time_us"] for r in rows]
            t[side] = med(times)
            g = [r["vs_gloo"] for r in rows if isinstance(r.get("vs_gloo"), (int, float))]
            m = [r["vs_mpi"] for r in rows if isinstance(r.get("vs_mpi"), (int, float))]
            rng = f"{min(times):.1f}-{max(times):.1f}" if times else "-"
            print(f"{size:>12} {side:>4} {len(times):>4} {t[side]:>11.1f} {rng:>21} "
                  f"{med(g):>8.3f} {med(m):>8.3f}")
        print(f"{size:>12}  b/a time: {t['b'] / t['a']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
