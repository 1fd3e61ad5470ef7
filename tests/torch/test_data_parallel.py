#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""gsync.torch.DataParallel's contract, on a test bed of 2 hosts (2 ranks on
the first, 1 on the second: the local fold and the cross-host step both
run). Each rank can compute every rank's local gradients itself (the inputs
are seeded by rank), so what it gets is checked against the true average:

- the parameters and buffers start as rank 0's (rank 1 and 2 are built
  from other seeds);
- after backward every .grad is the average over the ranks, in place in
  the arena (its storage is the bucket's arena block, never copied);
- no_sync(): two backward passes accumulate locally, the third reduces the
  sum of all three;
- a parameter that gets no gradient on some ranks (a branch only rank 0
  uses) neither hangs the others nor disturbs the average;
- zero_grad(set_to_none=True) between steps: the gradients come back in
  the arena;
- a buffer changed on a rank is rank 0's again after the next forward;
- several buckets (bucket_cap_mb small) are all reduced, the first small.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import torch_common as tc  # noqa: E402

tc.require_torch()
tc.require_testbed()

from gsync_testbed import Testbed  # noqa: E402

WORKER = r'''
import os, sys
import torch
import gsync.torch as gt

rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
torch.set_num_threads(1)


class Net(torch.nn.Module):
    def __init__(self, seed):
        super().__init__()
        torch.manual_seed(seed)
        self.a = torch.nn.Linear(32, 64)
        self.b = torch.nn.Linear(64, 8)
        self.side = torch.nn.Linear(32, 8)  # used on rank 0 only
        self.register_buffer("count", torch.zeros(3))

    def forward(self, x, use_side):
        y = self.b(torch.relu(self.a(x)))
        return y + self.side(x) if use_side else y


def data(r, step):
    g = torch.Generator().manual_seed(1000 * step + r)
    return torch.randn(16, 32, generator=g), torch.randint(0, 8, (16,), generator=g)


def local_grads(net, r, steps):
    """Rank r's gradients, summed over `steps`, on a copy of net."""
    ref = Net(0)
    ref.load_state_dict(net.state_dict())
    for s in steps:
        x, y = data(r, s)
        torch.nn.functional.cross_entropy(ref(x, r == 0), y).backward()
    return {n: (p.grad.clone() if p.grad is not None else torch.zeros_like(p))
            for n, p in ref.named_parameters()}


def average(net, steps):
    per = [local_grads(net, r, steps) for r in range(world)]
    return {n: sum(g[n] for g in per) / world for n in per[0]}


def check(cond, what):
    if not cond:
        print(f"FAIL rank {rank}: {what}", flush=True)
        sys.exit(1)


state = gt.init(job=os.environ["JOB"], timeout_ms=20000)
net = Net(rank)  # rank 0's weights must win
if rank == 1:
    net.count += 5
dp = gt.DataParallel(net, state, bucket_cap_mb=0.002, first_bucket_mb=0.001)
ref0 = Net(0)
for (n, p), q in zip(net.named_parameters(), ref0.parameters()):
    check(torch.equal(p, q), f"{n} is not rank 0's after construction")
check(torch.equal(net.count, torch.zeros(3)), "the buffer is not rank 0's")
sizes = dp.bucket_sizes()
check(len(sizes) >= 3 and sizes[0] <= sizes[1], f"buckets {sizes}")
arena = {n: p.grad.data_ptr() for n, p in net.named_parameters()}

def step(s):
    x, y = data(rank, s)
    loss = torch.nn.functional.cross_entropy(dp(x, rank == 0), y)
    loss.backward()

# 1. one step: the average, in place
step(1)
want = average(net, [1])
for n, p in net.named_parameters():
    check(p.grad.data_ptr() == arena[n], f"{n}.grad left the arena")
    check(torch.allclose(p.grad, want[n], rtol=1e-5, atol=1e-6),
          f"{n}.grad is not the average (max diff {float((p.grad - want[n]).abs().max()):.2e})")
print("average ok", flush=True)

# 2. no_sync: 2 and 3 accumulate, 4 reduces the sum of 2, 3 and 4
for p in net.parameters():
    p.grad.zero_()
with dp.no_sync():
    step(2)
    mine = {n: p.grad.clone() for n, p in net.named_parameters()}
    check(all(torch.allclose(mine[n], local_grads(net, rank, [2])[n], rtol=1e-5, atol=1e-6)
              for n in mine), "no_sync reduced something")
    step(3)
step(4)
want = average(net, [2, 3, 4])
for n, p in net.named_parameters():
    check(torch.allclose(p.grad, want[n], rtol=1e-5, atol=1e-6),
          f"no_sync: {n}.grad is not the average of three accumulated steps")
print("no_sync ok", flush=True)

# 3. set_to_none, then a buffer changed on rank 2, then a step
for p in net.parameters():
    p.grad = None
if rank == 2:
    net.count += 7
step(5)
want = average(net, [5])
for n, p in net.named_parameters():
    check(p.grad is not None and p.grad.data_ptr() == arena[n], f"{n}.grad not back in the arena")
    check(torch.allclose(p.grad, want[n], rtol=1e-5, atol=1e-6), f"{n}.grad after set_to_none")
check(torch.equal(net.count, torch.zeros(3)), f"the buffer is {net.count.tolist()}, not rank 0's")
print("set_to_none ok", flush=True)
dp.close()
state.close()
print("done", flush=True)
'''

fails = tc.Failures()
with Testbed(hosts=2, racks=1, daemon_args=["--op-timeout-ms", "20000"]) as bed:
    # 3 ranks on 2 hosts: h1 runs ranks 0 and 1, h2 rank 2.
    tc.run_workers(bed, WORKER, [(0, 0, 2), (0, 1, 2), (1, 0, 1)], fails,
                   ("average ok", "no_sync ok", "set_to_none ok", "done"), timeout=180,
                   extra_env={"JOB": "dp-contract"})
fails.finish()
