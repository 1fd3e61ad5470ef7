#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Tracing a DDP step across the two processes: 2 ranks on a 2-host test bed
train 4 steps with --trace; each rank's own times (hook, copy, submit, the
completer seeing the completion, the future done) and its daemon's timeline
of the same op (gsyncctl ops) must line up on the one clock they share: the
daemon takes a bucket after the client copied it and before the client sees
it done, and ends the op before the client's completer sees it. What
examples/ddp_breakdown.py builds on.
"""
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import torch_common as tc  # noqa: E402

STEPS = 4


def main() -> None:
    tc.require_torch()
    tc.require_testbed()
    from gsync_testbed import Testbed
    fails = tc.Failures()
    out = Path(tempfile.mkdtemp(prefix="gsync-trace-"))
    with Testbed(hosts=2, racks=1) as bed:
        cp = tc.run_example(["--backend", "gsync", "--nproc", "2", "--sockets",
                             ",".join(bed.sockets), "--steps", str(STEPS), "--quiet",
                             "--trace", str(out), *tc.SMALL_MODEL], timeout=180)
        print(cp.stdout + cp.stderr, end="")
        fails.check(cp.returncode == 0, f"training exited {cp.returncode}")
        recent = {h.socket: tc.admin(h.admin_socket, "ops")["recent"] for h in bed.hosts}
    for f in sorted(out.glob("rank*.json")):
        t = json.loads(f.read_text())
        r = t["rank"]
        fails.check(len(t["steps"]) == STEPS, f"rank {r}: {len(t['steps'])} steps traced")
        for s in t["steps"]:
            fails.check(s["start_ns"] <= s["forward_ns"] <= s["backward_ns"] <= s["optimizer_ns"],
                        f"rank {r}: step times out of order: {s}")
        fails.check(len(t["buckets"]) >= STEPS, f"rank {r}: {len(t['buckets'])} buckets traced")
        ops = {(o["key"], o["step"]): o for o in recent[t["socket"]] if o["job"] == t["job"]}
        for b in t["buckets"]:
            what = f"rank {r} bucket {b['key']} step {b['step']}"
            fails.check(b["hook_ns"] <= b["copied_ns"] <= b["submitted_ns"] <= b["completed_ns"]
                        <= b["future_ns"], f"{what}: client times out of order: {b}")
            op = ops.get((b["key"], b["step"]))
            if op is None:
                fails.check(False, f"{what}: no such op in its daemon's gsyncctl ops")
                continue
            fails.check(op["code"] == 0, f"{what}: failed in the daemon: {op['error']}")
            mine = [a["ns"] for a in op["arrivals"] if a["rank"] == r]
            fails.check(len(mine) == 1 and b["copied_ns"] <= mine[0] <= b["completed_ns"],
                        f"{what}: the daemon took it at {mine}, outside [copy {b['copied_ns']}, "
                        f"completed {b['completed_ns']}]")
            fails.check(op["finished_ns"] <= b["completed_ns"],
                        f"{what}: the op ended at {op['finished_ns']}, after the client saw it "
                        f"done at {b['completed_ns']}")
            fails.check(any(s["stage"] == "cross-host" and "rendezvous" in s["marks_ns"]
                            for s in op["stages"]),
                        f"{what}: no cross-host stage with its rendezvous mark: {op['stages']}")
    fails.finish()


if __name__ == "__main__":
    main()
