#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""The anomaly guard in a real training run: examples/train_ddp.py over
gsync on a 2-host test bed (1 rank a host) with anomaly_guard="skip",
and 100 faults injected into one rank's gradient in turn (a NaN, an Inf, a
100x spike of the layer's gradient) over 2000 steps. The model is a
linear classifier (a convex loss with one minimum) so that a run that
skipped 100 steps and one that skipped none end at the same loss up to
SGD's noise, and the comparison measures the guard, not the chaos of a
deep net's trajectory. Every fault's step is skipped on every
rank (the daemons decide, not the ranks), no non-finite value reaches the
parameters, no clean step is skipped, and the loss over the training set
at the end is within 0.5% of the same run without faults.
"""
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import torch_common as tc  # noqa: E402

tc.require_torch()
tc.require_testbed()

from gsync_testbed import Testbed  # noqa: E402

STEPS, RANKS, FAULTS = 2000, 2, 100

fails = tc.Failures()
with Testbed(hosts=2, racks=1, daemon_args=["--op-timeout-ms", "30000"]) as bed:
    common = ["--nproc", str(RANKS), "--steps", str(STEPS), "--quiet", "--eval",
              "--label-noise", "0.1", "--backend", "gsync", "--sockets", ",".join(bed.sockets),
              "--anomaly-guard", "skip", "--din", "64", "--layers", "0", "--batch", "256",
              "--lr", "0.02"]
    out = {}
    for name, extra in (("clean", []), ("faulty", ["--inject-faults", str(FAULTS)])):
        cp = tc.run_example([*common, *extra], timeout=300)
        print(cp.stdout[-1500:], cp.stderr[-3000:], sep="", end="", flush=True)
        fails.check(cp.returncode == 0, f"{name} run exited {cp.returncode}")
        if cp.returncode != 0:
            tc.print_daemon_logs(bed)
            fails.finish()
        loss = re.search(r"# eval loss ([0-9.]+)", cp.stdout)
        skipped = re.search(r"# steps skipped (\d+) params finite (\w+)", cp.stdout)
        fails.check(loss is not None and skipped is not None, f"{name}: no summary lines")
        if loss is None or skipped is None:
            fails.finish()
        out[name] = (float(loss.group(1)), int(skipped.group(1)), skipped.group(2) == "True")

clean, faulty = out["clean"], out["faulty"]
print(f"clean eval loss {clean[0]:.6f}, faulty {faulty[0]:.6f} "
      f"({faulty[0] / clean[0] - 1:+.3%}), steps skipped {faulty[1]}", flush=True)
fails.check(clean[1] == 0, f"the clean run skipped {clean[1]} steps (false alarms)")
fails.check(faulty[1] == FAULTS, f"the faulty run skipped {faulty[1]} steps, not {FAULTS}")
fails.check(clean[2] and faulty[2], "a non-finite value reached the parameters")
fails.check(abs(faulty[0] / clean[0] - 1) <= 0.005,
            f"eval loss {faulty[0]:.6f} is more than 0.5% from the clean run's {clean[0]:.6f}")
fails.finish()
