#!/usr/bin/env python3
"""ab.py: the same gsync-perf command from two builds, interleaved, medians.

  tools/bench/ab.py --a BUILD_A --b BUILD_B --rounds 6 -- --hosts 4 --racks 1 -n 1 \\
      --loopback -b 4K -e 4K --iters 3000 --compare mpi

or one build with different arguments per side (two transports, say):

  tools/bench/ab.py --a build --a-args="--transport tcp" --b-args="--transport dpdk" \\
      --rounds 5 -- --hosts 2 --racks 1 --ranks 1 --loopback -b 64M -e 64M --iters 10

Runs `BUILD/tools/perf/gsync-perf ARGS --json` alternately from A and B
(A B, B A, A B, ...: both see the same noise of a shared machine, and
neither always goes first), and prints,
per size, the median and range of time_us for each, each one's ratios
against the peers measured in its own runs (vs_gloo, vs_mpi), and B's
median time over A's. --json-out writes every row.
"""
import argparse
import json
import shlex
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
    ap.add_argument("--b", help="build directory B (after); default: A's")
    ap.add_argument("--a-args", default="", help="more gsync-perf arguments for A only")
    ap.add_argument("--b-args", default="", help="more gsync-perf arguments for B only")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--timeout", type=int, default=900, help="seconds per run")
    ap.add_argument("--json-out", help="write every row here, one JSON object per line")
    ap.add_argument("args", nargs=argparse.REMAINDER)
    o = ap.parse_args()
    args = o.args[1:] if o.args[:1] == ["--"] else o.args
    o.b = o.b or o.a
    extra = {"a": shlex.split(o.a_args), "b": shlex.split(o.b_args)}
    results = {"a": [], "b": []}
    for i in range(o.rounds):
        for side in ("a", "b") if i % 2 == 0 else ("b", "a"):
            rows = run(getattr(o, side), args + extra[side], o.timeout)
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
        print(f"{size:>12}  b/a time: {t['b'] / t['a']:.3f}  (a/b: b is {t['a'] / t['b']:.2f}x as fast)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
