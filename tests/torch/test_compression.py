#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Compression from PyTorch: examples/train_ddp.py trains the same model
from the same seed over a 2-host bed in 2 racks (every gradient byte crosses
a rack boundary) with gsync.torch.init(compression=None) and "int8": both
train, int8's loss over the training set ends within 2% of the
uncompressed run's, and the daemons' own counters show the uplink carried
about a quarter of the bytes. A codec name gsync does not know fails the
run at init, naming it. (The full comparison over 3000 steps and three
seeds, top-k with and without error feedback included, is
examples/compression_parity.py: docs/compression.md, "Training quality".)
"""
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import torch_common as tc  # noqa: E402

tc.require_torch()
tc.require_testbed()

from gsync_testbed import Testbed  # noqa: E402

STEPS = 150


def payload(bed) -> tuple:
    """Tensor bytes the daemons wrote to peers: on the wire, as fp32."""
    wire = logical = 0
    for h in bed.hosts:
        for p in tc.admin(h.admin_socket, "peers")["peers"]:
            wire += p["payload_wire_bytes"]
            logical += p["payload_logical_bytes"]
    return wire, logical


fails = tc.Failures()
with Testbed(hosts=2, racks=2, daemon_args=["--op-timeout-ms", "30000"]) as bed:
    common = ["--backend", "gsync", "--nproc", "2", "--sockets", ",".join(bed.sockets),
              "--steps", str(STEPS), "--quiet", "--eval", "--samples", "65536",
              "--label-noise", "0.1", *tc.SMALL_MODEL]
    losses = {}
    for codec in ("none", "int8"):
        before = payload(bed)
        cp = tc.run_example([*common, "--compression", codec], timeout=180)
        print(cp.stdout, cp.stderr, sep="", end="", flush=True)
        fails.check(cp.returncode == 0, f"{codec}: training exited {cp.returncode}")
        m = re.search(r"# eval loss ([0-9.eE+-]+)", cp.stdout)
        fails.check(m is not None, f"{codec}: no eval loss printed")
        if m:
            losses[codec] = float(m.group(1))
        after = payload(bed)
        wire, logical = after[0] - before[0], after[1] - before[1]
        print(f"# {codec}: {wire} bytes on the wire for {logical} bytes of fp32", flush=True)
        if codec == "none":
            fails.check(wire == logical and wire > 0, f"none: {wire} on the wire, {logical} fp32")
        else:
            fails.check(wire > 0 and logical / wire > 3.5,
                        f"int8: {wire} bytes on the wire for {logical} bytes of fp32")
    if len(losses) == 2:
        ratio = losses["int8"] / losses["none"]
        print(f"# final loss: none {losses['none']:.6f}, int8 {losses['int8']:.6f}, "
              f"ratio {ratio:.4f}", flush=True)
        fails.check(abs(ratio - 1) < 0.02, f"int8's final loss is {ratio:.4f}x the uncompressed")
    cp = tc.run_example([*common, "--steps", "1", "--compression", "zstd"], timeout=120)
    fails.check(cp.returncode != 0, "an unknown codec trained anyway")
    fails.check("codec 'zstd'" in cp.stdout + cp.stderr,
                f"the error does not name the codec:\n{cp.stdout}{cp.stderr}")
fails.finish()
