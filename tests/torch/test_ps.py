#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""The parameter server from PyTorch: examples/train_ps.py trains a small
MLP with gsync.torch.PSOptimizer (SGD with momentum, BSP) on a 2-host bed,
2 ranks each, in several buckets (keys). The loss rank 0 logs at every step
must follow, within float rounding, a reference computed here in one
process with torch.optim.SGD on the mean of the four ranks' gradients - the
servers' optimizer is PyTorch's and BSP's step is the weighted mean of all
of them. The loss over the training set must fall. An ASP run trains too,
and a sync mode gsync does not know fails the run, naming it.
"""
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent))
import torch_common as tc  # noqa: E402

tc.require_torch()
tc.require_testbed()

import torch  # noqa: E402
from gsync_testbed import Testbed  # noqa: E402

sys.path.insert(0, str(tc.REPO / "examples"))
from train_ddp import make_model, make_shard  # noqa: E402

EXAMPLE = tc.REPO / "examples" / "train_ps.py"
STEPS, WORLD, BATCH, LR, MOMENTUM = 40, 4, 64, 0.05, 0.9
ARGS = dict(din=64, hidden=256, layers=2, seed=1234, samples=65536, label_noise=0.1)


def reference_losses() -> list:
    """Rank 0's loss at each step of single-process SGD on the mean gradient."""
    torch.set_num_threads(1)
    a = SimpleNamespace(**ARGS)
    model = make_model(a)
    shards = [make_shard(a, r, WORLD) for r in range(WORLD)]
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    lossf = torch.nn.CrossEntropyLoss()
    nb = shards[0][0].shape[0] // BATCH
    out = []
    for i in range(STEPS):
        j = i % nb
        grads = None
        for r, (x, y) in enumerate(shards):
            model.zero_grad()
            loss = lossf(model(x[j * BATCH:(j + 1) * BATCH]), y[j * BATCH:(j + 1) * BATCH])
            loss.backward()
            if r == 0:
                out.append(loss.item())
            g = [p.grad.clone() for p in model.parameters()]
            grads = g if grads is None else [s + t for s, t in zip(grads, g)]
        for p, g in zip(model.parameters(), grads):
            p.grad = g / WORLD
        opt.step()
    return out


def run(bed, *extra, timeout=240):
    with tempfile.TemporaryDirectory(prefix="torch-ps-") as out:
        args = [sys.executable, str(EXAMPLE), "--nproc", str(WORLD), "--sockets",
                ",".join(bed.sockets), "--steps", str(STEPS), "--batch", str(BATCH),
                "--lr", str(LR), "--momentum", str(MOMENTUM), "--bucket-cap-mb", "0.1",
                "--din", "64", "--hidden", "256", "--layers", "2", "--log-every", "1",
                "--eval", "--json", "--json-dir", out, *extra]
        cp = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
        print(cp.stdout[-2000:], cp.stderr[-4000:], sep="", end="", flush=True)
        ranks = {}
        for f in Path(out).glob("rank*.json"):
            row = json.loads(f.read_text())
            ranks[row["rank"]] = row
        return cp, ranks


fails = tc.Failures()
want = reference_losses()
with Testbed(hosts=2, racks=1, daemon_args=["--op-timeout-ms", "60000"]) as bed:
    cp, ranks = run(bed, "--sync", "bsp", "--job", "torch-ps-bsp")
    fails.check(cp.returncode == 0, f"bsp: training exited {cp.returncode}")
    fails.check(sorted(ranks) == list(range(WORLD)), f"bsp: ranks reported {sorted(ranks)}")
    if 0 in ranks:
        got = [loss for _, loss in ranks[0]["losses"]]
        fails.check(len(got) == STEPS, f"bsp: {len(got)} losses logged, not {STEPS}")
        worst = max((abs(g - w) / abs(w) for g, w in zip(got, want)), default=1.0)
        print(f"# bsp: losses {got[0]:.6f} -> {got[-1]:.6f}, reference {want[0]:.6f} -> "
              f"{want[-1]:.6f}, worst relative difference {worst:.2e}", flush=True)
        fails.check(worst < 1e-4, f"bsp: a loss differs from torch.optim.SGD's by {worst:.2e}")
        final = ranks[0]["final_loss"]
        fails.check(final is not None and final < 0.8 * got[0],
                    f"bsp: the training set's loss went {got[0]} -> {final}")

    cp, ranks = run(bed, "--sync", "asp", "--job", "torch-ps-asp")
    fails.check(cp.returncode == 0, f"asp: training exited {cp.returncode}")
    if 0 in ranks:
        first, final = ranks[0]["losses"][0][1], ranks[0]["final_loss"]
        print(f"# asp: first loss {first:.6f}, final loss over the set {final}", flush=True)
        fails.check(final is not None and final < 0.8 * first,
                    f"asp: the training set's loss went {first} -> {final}")

    cp, _ = run(bed, "--sync", "ssp:x", "--job", "torch-ps-bad", "--steps", "1", timeout=120)
    fails.check(cp.returncode != 0, "an unknown sync mode trained anyway")
    fails.check("sync mode 'ssp:x'" in cp.stdout + cp.stderr,
                f"the error does not name the mode:\n{cp.stdout}{cp.stderr}")
fails.finish()
