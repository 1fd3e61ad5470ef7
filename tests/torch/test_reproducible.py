#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Reproducible training (docs/reproducibility.md): examples/train_ddp.py
with gsync.torch.init(reproducible=True) on 4 hosts x 1 rank, 2 hosts x 2
ranks and 1 host x 4 ranks of one test bed (2 racks x 2 hosts), each rank
fed the same samples in every layout: the losses are bit-identical at every
step on every rank, and so are the final parameters. Two of the layouts
without the mode are run too, and must differ somewhere: else the model and
data would be too easy to show anything.
"""
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import torch_common as tc  # noqa: E402

tc.require_torch()
tc.require_testbed()

import torch  # noqa: E402
from gsync_testbed import Testbed  # noqa: E402

STEPS, RANKS = 20, 4
LAYOUTS = {"4 hosts x 1": 4, "2 hosts x 2": 2, "1 host x 4": 1}
DEFAULT_LAYOUTS = {"4 hosts x 1": 4, "1 host x 4": 1}

fails = tc.Failures()
runs = {}
with tempfile.TemporaryDirectory(prefix="gsync-repro.") as tmp, \
        Testbed(hosts=4, racks=2, daemon_args=["--op-timeout-ms", "30000"]) as bed:
    common = ["--nproc", str(RANKS), "--steps", str(STEPS), "--quiet", "--backend", "gsync",
              *tc.SMALL_MODEL]
    for mode in ("reproducible", "default"):
        # Two layouts are enough to show the default mode differs.
        layouts = LAYOUTS if mode == "reproducible" else DEFAULT_LAYOUTS
        for layout, hosts in layouts.items():
            out = f"{tmp}/{mode}-{hosts}"
            extra = ["--reproducible"] if mode == "reproducible" else []
            tc.run_example_on(bed, [*common, *extra, "--dump", out,
                                    "--sockets", ",".join(bed.sockets[:hosts])],
                              fails, f"{mode} {layout}", timeout=150)
            runs[(mode, layout)] = [torch.load(f"{out}/rank{r}.pt") for r in range(RANKS)]


def same(a, b) -> bool:
    """Bit for bit: the losses as floats, the parameters as tensors."""
    return (a["losses"] == b["losses"]
            and all(torch.equal(p, b["params"][n]) for n, p in a["params"].items()))


first = ("reproducible", "4 hosts x 1")
for layout in LAYOUTS:
    for r in range(RANKS):
        got = runs[("reproducible", layout)][r]
        fails.check(got["gsync_buckets"] >= STEPS,
                    f"{layout} rank {r}: only {got['gsync_buckets']} buckets went through gsync")
        want = runs[first][r]  # each rank its own shard, so its own losses
        fails.check(len(got["losses"]) == STEPS, f"{layout} rank {r}: {len(got['losses'])} losses")
        for i, (a, b) in enumerate(zip(want["losses"], got["losses"])):
            fails.check(a == b, f"reproducible {layout} rank {r} step {i}: loss {b!r}, "
                        f"4 hosts x 1 rank {r} had {a!r}")
        for name, p in want["params"].items():
            fails.check(torch.equal(p, got["params"][name]),
                        f"reproducible {layout} rank {r} {name}: max |diff| "
                        f"{float((p - got['params'][name]).abs().max()):.3e}")

default_differs = any(not same(runs[("default", a)][0], runs[("default", b)][0])
                      for a in DEFAULT_LAYOUTS for b in DEFAULT_LAYOUTS if a < b)
fails.check(default_differs, "the default mode gave the same bits on every layout: the test "
                             "no longer shows what the mode is for")
print(f"reproducible: {STEPS} steps x {RANKS} ranks, identical on {', '.join(LAYOUTS)}; "
      f"last loss {runs[first][0]['losses'][-1]!r}; default mode differs across layouts: "
      f"{default_differs}")
fails.finish()
