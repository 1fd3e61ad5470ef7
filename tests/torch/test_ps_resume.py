#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""PSOptimizer resumes from a checkpoint (docs/fault-tolerance.md): a job
trains 7 steps with checkpoint_clocks=2 on a daemon with a checkpoint
folder and ends; the same job id started again, with a model initialized
differently, comes back at clock 6 (`PSOptimizer.clock`) holding exactly
the parameters it had after step 6 (the declaration pulled them), and
trains on. A job started with resume=False starts over from its own
initial values.
"""
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import torch_common as tc  # noqa: E402

tc.require_torch()
tc.require_testbed()

import torch  # noqa: E402
from gsync_testbed import Testbed  # noqa: E402
from gsync.torch import PSOptimizer  # noqa: E402

JOB = "ps-resume"


def model_with(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))


def optimizer(model, bed, **kw):
    return PSOptimizer(model.parameters(), job=JOB, socket=bed.sockets[0], world_size=1, rank=0,
                       lr=0.1, momentum=0.9, checkpoint_clocks=2, **kw)


def train(model, opt, steps: int) -> None:
    torch.manual_seed(99)
    x, y = torch.randn(32, 8), torch.randint(0, 4, (32,))
    for _ in range(steps):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()


def wait_for(what: str, cond, timeout_s: float = 30.0) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.02)
    print(f"timed out waiting for {what}", flush=True)
    return False


def checkpoint_clock(admin: str) -> int:
    for row in tc.admin(admin, "jobs").get("jobs", []):
        if row.get("job") == JOB:
            for k in row.get("parameters", []):
                c = k.get("checkpoint") or {}
                if (c.get("last") or {}).get("clock") is not None and not c.get("writing"):
                    return c["last"]["clock"]
    return -1


def job_gone(admin: str) -> bool:
    return all(row.get("job") != JOB for row in tc.admin(admin, "jobs").get("jobs", []))


fails = tc.Failures()
with tempfile.TemporaryDirectory(prefix="gsync-ps-resume.") as ckpt, \
        Testbed(hosts=1, daemon_args=["--checkpoint-dir", ckpt]) as bed:
    admin = bed.hosts[0].admin_socket
    model = model_with(1)
    opt = optimizer(model, bed)
    fails.check(opt.clock == 0, f"a fresh job starts at clock {opt.clock}")
    train(model, opt, 6)
    after6 = [p.detach().clone() for p in model.parameters()]
    fails.check(wait_for("the checkpoint of clock 6", lambda: checkpoint_clock(admin) == 6),
                "no checkpoint of clock 6")
    train(model, opt, 1)  # clock 7: not checkpointed; lost with the job
    opt.close()
    fails.check(wait_for("the job to end", lambda: job_gone(admin)), "the job did not end")

    again = model_with(2)  # other initial values: only the checkpoint can give step 6's
    opt = optimizer(again, bed)
    fails.check(opt.clock == 6, f"resumed at clock {opt.clock}, not 6")
    for p, q in zip(again.parameters(), after6):
        fails.check(torch.equal(p.detach(), q), "the resumed parameters differ from step 6's")
    train(again, opt, 2)
    fails.check(opt.clock == 8, f"after two more steps the clock is {opt.clock}")
    fails.check(all(bool(torch.isfinite(p).all()) for p in again.parameters()), "non-finite")
    opt.close()
    fails.check(wait_for("the job to end", lambda: job_gone(admin)), "the job did not end")

    fresh = model_with(3)
    init3 = [p.detach().clone() for p in fresh.parameters()]
    opt = optimizer(fresh, bed, resume=False)
    fails.check(opt.clock == 0, f"resume=False started at clock {opt.clock}")
    for p, q in zip(fresh.parameters(), init3):
        fails.check(torch.equal(p.detach(), q), "resume=False did not keep its own values")
    opt.close()
fails.finish()
