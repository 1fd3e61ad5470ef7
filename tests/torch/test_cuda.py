#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""gsync.torch with CUDA tensors (docs/gpu.md, docs/pytorch.md) on a test bed
of 2 hosts (2 ranks on the first, 1 on the second), all on GPU 0:

- the hook's state takes a CUDA bucket: it copies it into GPU memory from
  gsync_alloc_device on the GPU, the daemons average it there (the local
  fold, the staging across hosts, the store) and the future's value is a
  CUDA tensor holding the average, for float32, float16 and bfloat16;
- the same bucket again reuses its GPU block (no new allocation);
- DDP on cuda:0 with the hook registered (a gloo process group for DDP's
  own broadcasts): after backward every .grad is the average of the three
  ranks' gradients, each rank computing all three itself;
- gsync.torch.DataParallel on cuda:0: the same average, in place in .grad,
  which stays in gsync's GPU memory;
- gsync.torch.PSOptimizer over a model on cuda:0: one SGD step on the
  average, the parameters back on the GPU.

Needs PyTorch built with CUDA and a GPU: elsewhere it says SKIPPED with the
reason (Debian's python3-torch is a CPU build).
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import torch_common as tc  # noqa: E402

tc.require_torch()
tc.require_testbed()

import torch  # noqa: E402

if not torch.cuda.is_available():
    tc.skip(f"torch {torch.__version__} sees no GPU (CUDA build: {torch.version.cuda}); "
            "CUDA tensors need PyTorch built with CUDA and a GPU")

from gsync_testbed import free_port  # noqa: E402
from gsync_testbed import Testbed  # noqa: E402

WORKER = r'''
import os, sys
import torch
import torch.distributed as dist
import gsync.torch as gt

rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
dev = torch.device("cuda", 0)
torch.cuda.set_device(dev)


def check(cond, what):
    if not cond:
        print(f"FAIL rank {rank}: {what}", flush=True)
        sys.exit(1)


def values(r, n, dtype):
    g = torch.Generator().manual_seed(100 + r)
    return torch.randint(-8, 8, (n,), generator=g).to(dtype)


state = gt.init(job=os.environ["JOB"], timeout_ms=30000)
# 1. the hook's state on CUDA buckets: small integers, so every sum is exact
#    in every dtype whatever its order, and the average is one division
for i, dtype in enumerate((torch.float32, torch.float16, torch.bfloat16)):
    n = 300007
    bucket = values(rank, n, dtype).to(dev)
    got = state.submit(bucket, 10 + i).wait()
    check(got.device == dev, f"{dtype}: the result is on {got.device}")
    want = sum(values(r, n, torch.float32) for r in range(world)) / world
    check(torch.equal(got.float().cpu(), want.to(dtype).float()),
          f"{dtype}: not the average (max diff {float((got.float().cpu() - want).abs().max())})")
    again = state.submit(values(rank, n, dtype).to(dev), 10 + i).wait()
    check(again.data_ptr() == got.data_ptr(), f"{dtype}: the bucket's GPU block was not reused")
print("buckets ok", flush=True)

# 2. DDP on the GPU with the hook
dist.init_process_group("gloo", init_method=os.environ["PG"], rank=rank, world_size=world)


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a = torch.nn.Linear(32, 64)
        self.b = torch.nn.Linear(64, 8)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


def data(r):
    g = torch.Generator().manual_seed(1000 + r)
    return torch.randn(16, 32, generator=g).to(dev), torch.randint(0, 8, (16,), generator=g).to(dev)


net = Net().to(dev)
ddp = torch.nn.parallel.DistributedDataParallel(net, device_ids=[0], bucket_cap_mb=0.002)
ddp.register_comm_hook(state.for_model(1 << 32), gt.allreduce_hook)
x, y = data(rank)
torch.nn.functional.cross_entropy(ddp(x), y).backward()
per = []
for r in range(world):
    ref = Net().to(dev)
    xr, yr = data(r)
    torch.nn.functional.cross_entropy(ref(xr), yr).backward()
    per.append({n: p.grad for n, p in ref.named_parameters()})
for n, p in net.named_parameters():
    want = sum(g[n] for g in per) / world
    check(torch.allclose(p.grad, want, rtol=1e-5, atol=1e-6),
          f"{n}.grad is not the average (max diff {float((p.grad - want).abs().max()):.2e})")
print("ddp ok", flush=True)

# 3. gsync.torch.DataParallel on the GPU: .grad live in gsync's GPU memory
#    and are averaged there, in place
dp_net = Net().to(dev)
dp = gt.DataParallel(dp_net, state, bucket_cap_mb=0.002, first_bucket_mb=0.001)
blocks = {n: p.grad.data_ptr() for n, p in dp_net.named_parameters()}
x, y = data(rank)
torch.nn.functional.cross_entropy(dp(x), y).backward()
for n, p in dp_net.named_parameters():
    want = sum(g[n] for g in per) / world
    check(p.grad.device == dev and p.grad.data_ptr() == blocks[n], f"DataParallel: {n}.grad moved")
    check(torch.allclose(p.grad, want, rtol=1e-5, atol=1e-6),
          f"DataParallel: {n}.grad is not the average "
          f"(max diff {float((p.grad - want).abs().max()):.2e})")
dp.close()
print("data parallel ok", flush=True)

# 4. PSOptimizer with a model on the GPU: gradients go to the servers
#    through the host arena (the parameter server keeps host memory), the
#    next step's parameters come back onto the GPU
from gsync.torch_ps import PSOptimizer
ps_net = Net().to(dev)
start = {n: p.detach().clone() for n, p in ps_net.named_parameters()}
opt = PSOptimizer(ps_net.parameters(), job=os.environ["JOB"] + "-ps", lr=0.5)
x, y = data(rank)
torch.nn.functional.cross_entropy(ps_net(x), y).backward()
opt.step()
for n, p in ps_net.named_parameters():
    want = start[n] - 0.5 * sum(g[n] for g in per) / world
    check(p.device == dev, f"PSOptimizer: {n} left the GPU")
    check(torch.allclose(p.detach(), want, rtol=1e-5, atol=1e-6),
          f"PSOptimizer: {n} is not one SGD step on the average "
          f"(max diff {float((p.detach() - want).abs().max()):.2e})")
opt.close()
print("ps ok", flush=True)
dist.destroy_process_group()
state.close()
print("done", flush=True)
'''


fails = tc.Failures()
with Testbed(hosts=2, racks=1, daemon_args=["--op-timeout-ms", "30000"]) as bed:
    # 3 ranks on 2 hosts: h1 runs ranks 0 and 1, h2 rank 2.
    tc.run_workers(bed, WORKER, [(0, 0, 2), (0, 1, 2), (1, 0, 1)], fails,
                   ("buckets ok", "ddp ok", "data parallel ok", "ps ok", "done"), timeout=200,
                   extra_env={"JOB": "cuda-hook", "PG": f"tcp://127.0.0.1:{free_port()}",
                              "GLOO_SOCKET_IFNAME": "lo"})
fails.finish()
