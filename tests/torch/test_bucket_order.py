#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Bucket order: 4 ranks on a 2-host test bed hand the same buckets to the
hook's submit path (GsyncState.submit, what allreduce_hook calls with
bucket.buffer() and bucket.index()) in a different order on every rank and
every step, with buckets of different sizes and dtypes; each result must be
the exact average. Ops are matched by (bucket index, per-bucket step), so
the order must not matter, and is_last() (which one rank hands first) must
not shift the step either.
"""
import os
import random
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import torch_common as tc  # noqa: E402

RANKS, STEPS = 4, 4
# (elements, dtype name): one bucket larger than a cross-host chunk.
BUCKETS = [(1000, "float32"), (3 << 20, "float32"), (777, "float64"), (4096, "float16"),
           (1, "float32"), (65536, "bfloat16")]


def value(rank: int, index: int, step: int) -> float:
    # Small integers: every dtype holds them and their average exactly.
    return float(4 * (rank + 1) + index + 8 * step)


def worker() -> int:
    import torch
    import gsync.torch
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    state = gsync.torch.init(job=os.environ["GSYNC_TEST_JOB"], timeout_ms=20000)
    rng = random.Random(rank)
    for step in range(STEPS):
        order = list(range(len(BUCKETS)))
        rng.shuffle(order)
        futs = {}
        for i in order:
            n, dt = BUCKETS[i]
            t = torch.full((n,), value(rank, i, step), dtype=getattr(torch, dt))
            futs[i] = state.submit(t, i)
        for i, fut in futs.items():
            want = sum(value(r, i, step) for r in range(world)) / world
            got = fut.wait()
            if not torch.all(got == want):
                bad = (got != want).nonzero()[0].item()
                print(f"rank {rank} step {step} bucket {i} ({BUCKETS[i]}): element {bad} = "
                      f"{got[bad].item()}, want {want}", file=sys.stderr)
                return 1
        print(f"rank {rank} step {step}: order {order} ok", flush=True)
    state.close()
    return 0


def main() -> None:
    tc.require_torch()
    tc.require_testbed()
    from gsync_testbed import spawn_ranks
    from gsync_testbed import Testbed
    fails = tc.Failures()
    with Testbed(hosts=2, racks=1) as bed:
        t0 = time.monotonic()
        procs = spawn_ranks([sys.executable, __file__, "--worker"], RANKS, bed.sockets,
                            extra_env={"GSYNC_TEST_JOB": f"bucket-order-{os.getpid()}"},
                            capture=True)
        for r, p in enumerate(procs):
            try:
                out, err = p.communicate(timeout=120)
            except subprocess.TimeoutExpired:
                p.kill()
                out, err = p.communicate()
            print(out + err, end="")
            fails.check(p.returncode == 0, f"rank {r} exited {p.returncode}")
        print(f"{RANKS} ranks x {STEPS} steps x {len(BUCKETS)} buckets in shuffled orders: "
              f"{time.monotonic() - t0:.1f} s")
    fails.finish()


if __name__ == "__main__":
    if "--worker" in sys.argv:
        sys.exit(worker())
    main()
