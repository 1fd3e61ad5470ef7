#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""A worker killed mid-epoch in a run of leased batches
(docs/fault-tolerance.md, "Batch leases"): examples/train_ps.py trains a
linear classifier 3 epochs on 2 hosts x 2 ranks, bsp, its batches leased by the daemons
(LeasedBatchSampler), once without a failure and once with rank 3 killed
by SIGKILL in the middle of epoch 1. In the killed run every batch of every
epoch is trained on exactly once (the ranks' logs: what the survivors
trained, what the victim trained before it died, and at most the one batch
it was in the middle of), and the final loss over the training set is
within 0.2% of the run without the failure.
"""
import signal
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import torch_common as tc  # noqa: E402

tc.require_torch()
tc.require_testbed()

from gsync_testbed import spawn_ranks  # noqa: E402
from gsync_testbed import Testbed  # noqa: E402

RANKS, VICTIM, EPOCHS = 4, 3, 3
SAMPLES, BATCH = 8192, 32  # 256 batches an epoch
EXAMPLE = tc.REPO / "examples" / "train_ps.py"
# A linear classifier (the teacher problem of examples/train_ddp.py), the
# last epoch at a tenth of the rate: near its optimum, so the killed run's
# smaller steps (3 batches a clock after the kill, not 4) end where the
# clean run ends.
ARGS = ["--epochs", str(EPOCHS), "--samples", str(SAMPLES), "--batch", str(BATCH),
        "--din", "16", "--layers", "0", "--lr", "0.2", "--momentum", "0.9", "--anneal",
        "--eval", "--json", "--quiet"]


def run(bed, job: str, logs: str, jsons: str, kill_after: int = -1):
    """Runs the example; with kill_after >= 0 kills the victim once its log
    shows that many steps of epoch 1 done. Returns (exit codes, killed)."""
    cmd = [sys.executable, str(EXAMPLE), *ARGS, "--job", job, "--lease-log", logs,
           "--json-dir", jsons]
    procs = spawn_ranks(cmd, RANKS, bed.sockets)
    killed = False
    deadline = time.monotonic() + 180
    while kill_after >= 0 and not killed and time.monotonic() < deadline:
        if procs[VICTIM].poll() is not None:
            break
        log = Path(logs, f"rank{VICTIM}.log")
        done = log.read_text().count("done 1 ") if log.exists() else 0
        if done >= kill_after:
            procs[VICTIM].send_signal(signal.SIGKILL)
            killed = True
        else:
            time.sleep(0.01)
    codes = []
    for p in procs:
        try:
            codes.append(p.wait(timeout=max(1.0, deadline - time.monotonic())))
        except Exception:
            p.kill()
            codes.append(None)
    return codes, killed


def lines(logs: str, rank: int):
    path = Path(logs, f"rank{rank}.log")
    out = []
    for ln in path.read_text().splitlines() if path.exists() else []:
        parts = ln.split()
        if len(parts) == 3:
            out.append((parts[0], int(parts[1]), int(parts[2])))
    return out


def final_loss(jsons: str) -> float:
    import json
    return json.loads(Path(jsons, "rank0.json").read_text())["final_loss"]


fails = tc.Failures()
batches = SAMPLES // BATCH
with Testbed(hosts=2, racks=1) as bed, tempfile.TemporaryDirectory(prefix="gsync-leases.") as tmp:
    dirs = {name: Path(tmp, name) for name in ("clean-log", "clean-json", "kill-log", "kill-json")}
    for d in dirs.values():
        d.mkdir()
    codes, _ = run(bed, "leases-clean", str(dirs["clean-log"]), str(dirs["clean-json"]))
    fails.check(codes == [0] * RANKS, f"the run without a failure exited {codes}")
    codes, killed = run(bed, "leases-kill", str(dirs["kill-log"]), str(dirs["kill-json"]),
                        kill_after=20)
    fails.check(killed, "the victim was never killed mid-epoch 1")
    fails.check(codes[VICTIM] == -signal.SIGKILL, f"the victim exited {codes[VICTIM]}")
    for r in range(RANKS):
        if r != VICTIM:
            fails.check(codes[r] == 0, f"rank {r} exited {codes[r]} in the killed run")
    for name in ("clean-log", "kill-log"):
        for epoch in range(EPOCHS):
            done = Counter()
            leased_not_done = []
            for r in range(RANKS):
                got = lines(str(dirs[name]), r)
                d = [b for kind, e, b in got if kind == "done" and e == epoch]
                done.update(d)
                leased = [b for kind, e, b in got if kind == "leased" and e == epoch]
                leased_not_done += [b for b in leased if b not in d]
            twice = sorted(b for b, n in done.items() if n > 1)
            fails.check(not twice, f"{name} epoch {epoch}: batches trained twice: {twice}")
            # The victim's batch in flight at the kill was trained or not:
            # either way once (its pushes began, or it went to another).
            missing = sorted(set(range(batches)) - set(done) - set(leased_not_done))
            fails.check(not missing, f"{name} epoch {epoch}: batches never trained: {missing}")
            fails.check(len(leased_not_done) <= (1 if name == "kill-log" else 0),
                        f"{name} epoch {epoch}: leased and not trained: {leased_not_done}")
            in_flight_and_redone = [b for b in leased_not_done if done[b] > 0]
            print(f"{name} epoch {epoch}: {sum(done.values())} of {batches} batches trained; "
                  f"in flight at the kill: "
                  f"{leased_not_done} (trained again by another: {in_flight_and_redone})")
    victim_epoch1 = [b for kind, e, b in lines(str(dirs["kill-log"]), VICTIM) if kind == "done"
                     and e == 1]
    fails.check(20 <= len(victim_epoch1) < batches // RANKS,
                f"the victim trained {len(victim_epoch1)} batches of epoch 1: not mid-epoch")
    clean, kill = final_loss(str(dirs["clean-json"])), final_loss(str(dirs["kill-json"]))
    rel = abs(kill - clean) / clean
    print(f"final loss: {clean:.6f} without a failure, {kill:.6f} with rank {VICTIM} killed "
          f"mid-epoch 1 ({100 * rel:.3f}% apart; the bound is 0.2%)")
    fails.check(rel <= 0.002, f"final losses {clean:.6f} and {kill:.6f} are {100 * rel:.3f}% apart")
    if fails.items:
        for h in range(len(bed.hosts)):
            print(f"--- daemon h{h + 1} log tail:\n" + "\n".join(
                bed.daemon_log(h).splitlines()[-40:]))
fails.finish()
