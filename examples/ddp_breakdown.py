#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""ddp_breakdown: where one DDP step over gsync goes, from both processes.

Starts a test bed of --hosts hosts, trains examples/train_ddp.py's model over
gsync with --nproc ranks and --trace, then joins each rank's own times (step
start, forward, every bucket's hook call, copy into the arena, submit, the
completion seen by the completer thread, the future done, backward done,
optimizer) with its daemon's timeline of the same op (gsyncctl ops: when
each local rank's part came, the fold, the cross-host stage's rendezvous and
end, the store, the op's end). All times are CLOCK_MONOTONIC, shared by every
process and namespace of the machine. Prints the medians over the timed
steps, in milliseconds, for rank 0 and the slowest rank (--json: one object).

  examples/ddp_breakdown.py --hosts 2 --nproc 2      # one rank on each of 2 hosts
  examples/ddp_breakdown.py --hosts 1 --nproc 2      # 2 ranks on one host
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, List, Optional

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "python"))
sys.path.insert(0, str(REPO / "examples"))

from gsync_testbed import Testbed  # noqa: E402
from bench_ddp import find_openblas  # noqa: E402


def admin(path: str, command: str) -> dict:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    s.sendall(command.encode() + b"\n")
    chunks = []
    while True:
        b = s.recv(1 << 16)
        if not b:
            break
        chunks.append(b)
    s.close()
    return json.loads(b"".join(chunks).decode(errors="replace"))


def ms(a: Optional[int], b: Optional[int]) -> Optional[float]:
    return (b - a) / 1e6 if a and b else None


def med(xs: List[Optional[float]]) -> Optional[float]:
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def stage(op: dict, name: str) -> Optional[dict]:
    for s in op.get("stages", []):
        if s["stage"] == name:
            return s
    return None


def breakdown(trace: dict, ops: Dict[tuple, dict], skew: Dict[tuple, float], warmup: int) -> dict:
    """Medians over the timed steps of one rank."""
    steps = trace["steps"][warmup:]
    first = steps[0]["start_ns"] if steps else 0
    buckets = [b for b in trace["buckets"] if b["hook_ns"] >= first]
    seg: Dict[str, List[Optional[float]]] = {}

    def add(k, v):
        seg.setdefault(k, []).append(v)

    for s in steps:
        mine = [b for b in buckets if s["forward_ns"] <= b["hook_ns"] <= s["backward_ns"]]
        add("step", ms(s["start_ns"], s["optimizer_ns"]))
        add("forward", ms(s["start_ns"], s["forward_ns"]))
        add("backward (all)", ms(s["forward_ns"], s["backward_ns"]))
        add("optimizer", ms(s["backward_ns"], s["optimizer_ns"]))
        if mine:
            add("backward until the first bucket", ms(s["forward_ns"], mine[0]["hook_ns"]))
            add("last bucket handed -> backward done", ms(mine[-1]["hook_ns"], s["backward_ns"]))
            add("buckets per step", float(len(mine)))
    for b in buckets:
        k = b["key"]
        add(f"bucket {k}: copy into the arena", ms(b["hook_ns"], b["copied_ns"]))
        add(f"bucket {k}: submit", ms(b["copied_ns"], b["submitted_ns"]))
        op = ops.get((b["key"], b["step"]))
        add(f"bucket {k}: in flight (submit -> future done)", ms(b["submitted_ns"], b.get("future_ns")))
        add(f"bucket {k}: ranks' submit skew across hosts", skew.get((b["key"], b["step"])))
        if not op:
            continue
        own = [a["ns"] for a in op["arrivals"] if a["rank"] == trace["rank"]]
        last = max(a["ns"] for a in op["arrivals"])
        if own:
            add(f"bucket {k}: submit -> daemon took it", ms(b["submitted_ns"], own[0]))
            add(f"bucket {k}: waiting for this host's other ranks", ms(own[0], last))
        fold, cross, store = stage(op, "fold"), stage(op, "cross-host"), stage(op, "store")
        local = stage(op, "local")
        if local:
            add(f"bucket {k}: local reduce", ms(local["begun_ns"], local["finished_ns"]))
        if fold:
            add(f"bucket {k}: fold", ms(fold["begun_ns"], fold["finished_ns"]))
        if cross:
            rv = cross.get("marks_ns", {}).get("rendezvous")
            add(f"bucket {k}: cross-host: waiting for the other hosts", ms(cross["begun_ns"], rv))
            add(f"bucket {k}: cross-host: schedule (wire)", ms(rv, cross["finished_ns"]))
        if store and cross:
            add(f"bucket {k}: store after the cross-host stage", ms(cross["finished_ns"], store["finished_ns"]))
        add(f"bucket {k}: op done -> completer saw it", ms(op["finished_ns"], b.get("completed_ns")))
        add(f"bucket {k}: completer -> future done", ms(b.get("completed_ns"), b.get("future_ns")))
    return {k: med(v) for k, v in seg.items()}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--hosts", type=int, default=2)
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--openblas", default="")
    p.add_argument("--json", action="store_true")
    p.add_argument("--daemon-arg", action="append", default=[])
    p.add_argument("--backend", choices=["gsync", "gsync_dp"], default="gsync",
                   help="gsync: DDP with the hook; gsync_dp: gsync.torch.DataParallel (its "
                        "buckets' hook time is when their last gradient was in; no copy)")
    p.add_argument("model_args", nargs="*", help="more train_ddp.py arguments (after --)")
    args = p.parse_args()
    env = dict(os.environ)
    blas = find_openblas(args.openblas)
    if blas:
        env["LD_LIBRARY_PATH"] = blas + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
        env["OPENBLAS_NUM_THREADS"] = "1"
    out = Path(tempfile.mkdtemp(prefix="ddp-breakdown-"))
    with Testbed(hosts=args.hosts, racks=1, daemon_args=args.daemon_arg) as bed:
        cmd = [sys.executable, str(REPO / "examples" / "train_ddp.py"), "--backend", args.backend,
               "--nproc", str(args.nproc), "--sockets", ",".join(bed.sockets), "--quiet",
               "--steps", str(args.steps), "--trace", str(out), *args.model_args]
        rc = subprocess.run(cmd, env=env).returncode
        if rc != 0:
            print(f"ddp_breakdown: training failed ({rc})", file=sys.stderr)
            return rc
        recent = {h.socket: admin(h.admin_socket, "ops")["recent"] for h in bed.hosts}
    traces = [json.loads(f.read_text()) for f in sorted(out.glob("rank*.json"))]
    # The same bucket's submit on every rank: how far apart the hosts hand it in.
    submits: Dict[tuple, List[int]] = {}
    for t in traces:
        for b in t["buckets"]:
            submits.setdefault((b["key"], b["step"]), []).append(b["submitted_ns"])
    skew = {k: (max(v) - min(v)) / 1e6 for k, v in submits.items() if len(v) == len(traces)}
    rows = {}
    for t in traces:
        ops = {(o["key"], o["step"]): o for o in recent[t["socket"]] if o["job"] == t["job"]}
        rows[t["rank"]] = breakdown(t, ops, skew, args.warmup)
    slowest = max(rows, key=lambda r: rows[r].get("step") or 0)
    result = {"backend": args.backend, "hosts": args.hosts, "ranks": args.nproc, "steps": args.steps - args.warmup,
              "blas": "openblas" if blas else "system", "rank0": rows[0], "slowest": slowest,
              "slowest_rank": rows[slowest]}
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"# ddp_breakdown: {args.backend}, {args.hosts} hosts x {args.nproc} ranks, "
          f"{args.steps - args.warmup} timed steps, BLAS {result['blas']}; medians in ms (rank 0, "
          f"and rank {slowest}, the slowest)")
    for k in rows[0]:
        a, b = rows[0].get(k), rows[slowest].get(k)
        fa = f"{a:10.3f}" if a is not None else f"{'-':>10}"
        fb = f"{b:10.3f}" if b is not None else f"{'-':>10}"
        print(f"  {k:55s} {fa} {fb}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
