#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""PSOptimizer is told when the servers roll a step back (issue #38, item
4; docs/fault-tolerance.md, "The anomaly guard"): a bsp job with the guard
on trains 8 steps, and at step 5 the loss (so every gradient) is NaN. That
step's buckets come back rolled back - `rolled_back` holds the guard's
text for each, naming the clock and rank 0 as the one whose gradient held
the NaN - and the model holds the parameters of step 5 as they were before
it; no other step says so, and `rollbacks` counts them.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import torch_common as tc  # noqa: E402

tc.require_torch()
tc.require_testbed()

import torch  # noqa: E402
from gsync_testbed import Testbed  # noqa: E402
from gsync.torch import PSOptimizer  # noqa: E402

BAD = 5
fails = tc.Failures()
with Testbed(hosts=1) as bed:
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    # Two buckets: each key's clock is judged and rolled back on its own.
    opt = PSOptimizer(model.parameters(), job="ps-rollback", socket=bed.sockets[0],
                      world_size=1, rank=0, lr=0.1, momentum=0.9, anomaly_guard=True,
                      bucket_cap_mb=0.00038)
    fails.check(len(opt.buckets) == 2, f"{len(opt.buckets)} buckets, not 2")
    x, y = torch.randn(32, 8), torch.randint(0, 4, (32,))
    for step in range(8):
        before = [p.detach().clone() for p in model.parameters()]
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        if step == BAD:
            loss = loss * float("nan")
        loss.backward()
        opt.step()
        if step != BAD:
            fails.check(opt.rolled_back == [], f"step {step}: rolled back {opt.rolled_back}")
            continue
        fails.check(len(opt.rolled_back) == len(opt.buckets),
                    f"step {step}: {len(opt.rolled_back)} buckets said rolled back: "
                    f"{opt.rolled_back}")
        for text in opt.rolled_back:
            for want in (f"job ps-rollback parameter key", f"clock {BAD} rolled back",
                         "the first non-finite value is rank 0's"):
                fails.check(want in text, f"'{want}' not in '{text}'")
        for p, q in zip(model.parameters(), before):
            fails.check(torch.equal(p.detach(), q), "a rolled-back step changed the model")
    fails.check(opt.rollbacks == len(opt.buckets), f"rollbacks {opt.rollbacks}")
    fails.check(all(bool(torch.isfinite(p).all()) for p in model.parameters()), "non-finite")
    opt.close()
fails.finish()
