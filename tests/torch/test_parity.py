#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Training parity: examples/train_ddp.py with the same seed and data over
plain DDP with gloo (tcp://127.0.0.1), over gsync's DDP hook and over
gsync.torch.DataParallel (--backend gsync_dp) on a 2-host test bed
(2 racks, 2 ranks a host): the losses agree at every step on every rank and
the final parameters match, within fp32 tolerance. The two differ only in
the order the four gradients are summed (gloo's ring vs gsync's local reduce
then cross-host), so the differences are rounding, which training then
carries along; 40 steps keep them far below the tolerance.
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

STEPS, RANKS = 40, 4
LOSS_RTOL, PARAM_ATOL, PARAM_RTOL = 1e-5, 1e-6, 1e-5

fails = tc.Failures()
with tempfile.TemporaryDirectory(prefix="gsync-parity.") as tmp, \
        Testbed(hosts=2, racks=2, daemon_args=["--op-timeout-ms", "30000"]) as bed:
    common = ["--nproc", str(RANKS), "--steps", str(STEPS), "--quiet", *tc.SMALL_MODEL]
    runs = {}
    for backend in ("gloo", "gsync", "gsync_dp"):
        extra = ["--sockets", ",".join(bed.sockets)] if backend != "gloo" else []
        tc.run_example_on(bed, [*common, "--backend", backend, "--dump", f"{tmp}/{backend}",
                                *extra], fails, f"{backend} run", timeout=150)
        runs[backend] = [torch.load(f"{tmp}/{backend}/rank{r}.pt") for r in range(RANKS)]

for run in ("gsync", "gsync_dp"):
    worst_loss = worst_param = 0.0
    for r in range(RANKS):
        g, s = runs["gloo"][r], runs[run][r]
        fails.check(s["gsync_buckets"] >= STEPS, f"{run} rank {r}: gsync handed "
                    f"{s['gsync_buckets']} buckets in {STEPS} steps: nothing went through gsync")
        fails.check(len(g["losses"]) == len(s["losses"]) == STEPS,
                    f"{run} rank {r}: loss counts differ")
        for i, (a, b) in enumerate(zip(g["losses"], s["losses"])):
            d = abs(a - b)
            worst_loss = max(worst_loss, d / max(1.0, abs(a)))
            fails.check(d <= LOSS_RTOL * max(1.0, abs(a)),
                        f"{run} rank {r} step {i}: loss gloo {a:.8f} {run} {b:.8f} (diff {d:.2e})")
        for name, p in g["params"].items():
            q = s["params"][name]
            worst_param = max(worst_param, float((p - q).abs().max()))
            fails.check(torch.allclose(p, q, rtol=PARAM_RTOL, atol=PARAM_ATOL),
                        f"{run} rank {r} {name}: max |diff| {float((p - q).abs().max()):.2e}")
    # Ranks of one run end with identical parameters (DDP's invariant).
    for r in range(1, RANKS):
        for name, p in runs[run][0]["params"].items():
            fails.check(torch.equal(p, runs[run][r]["params"][name]),
                        f"{run}: rank {r} {name} differs from rank 0")
    print(f"{run}: {STEPS} steps x {RANKS} ranks (2 hosts x 2): worst relative loss diff "
          f"{worst_loss:.2e}, worst parameter |diff| {worst_param:.2e}; first loss "
          f"{runs['gloo'][0]['losses'][0]:.6f}, last {runs['gloo'][0]['losses'][-1]:.6f}")
fails.finish()
