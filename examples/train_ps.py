#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""train_ps: a real training run whose optimizer runs in gsync's parameter
servers (docs/parameter-server.md), no DDP and no torch.distributed.

The model and data are examples/train_ddp.py's (an MLP on a problem labelled
by a fixed random teacher, sharded by rank). Each rank computes its
gradient; gsync.torch.PSOptimizer pushes it bucket by bucket during backward
and step() brings back the parameters of the next step, which the daemons'
shards computed with the declared optimizer, as the job's sync mode allows.

  examples/train_ps.py --nproc 4 --sockets S1,S2                 # 2 hosts x 2 ranks, bsp
  examples/train_ps.py --nproc 4 --sockets S1,S2,S3,S4 --sync ssp:3 --optimizer adamw --lr 1e-3
  examples/train_ps.py --nproc 2 --sockets ... --stall 0.1:60    # 10% of steps stall 60 ms
  examples/train_ps.py --nproc 4 --sockets S1,S2 --epochs 3      # batches leased (below)

With --epochs E the ranks share the whole data set and the daemons lease its
batches (docs/fault-tolerance.md, "Batch leases"; LeasedBatchSampler): a rank
that dies has its batches trained on by the others, each batch exactly once
per epoch. --lease-log DIR writes DIR/rank<R>.log: "leased E B" when a rank
gets batch B of epoch E, "done E B" once its step is applied, flushed line by
line so a killed rank's log is whole.

Prints per step (rank 0, unless --quiet) and at the end: steps, time,
updates per second, the final loss over the training set (--eval), and with
--json one object a rank: rank, steps, seconds, final_loss, losses (every
--log-every'th), step_times; one line each on stdout, or with --json-dir one
file each (rank<R>.json: long lines from several ranks on one pipe would
interleave).
"""
import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "python"))
sys.path.insert(0, str(REPO / "examples"))


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nproc", type=int, default=None, help="start this many local ranks")
    p.add_argument("--sockets", default="", help="comma-separated gsyncd sockets, one per host")
    p.add_argument("--job", default=None)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--sync", default="bsp", help="bsp, asp or ssp:S")
    p.add_argument("--optimizer", default="sgd", choices=["sgd", "adam", "adamw"])
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--din", type=int, default=64)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--samples", type=int, default=65536)
    p.add_argument("--label-noise", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--stall", default="", help="P:MS: each step stalls MS ms with probability P")
    p.add_argument("--slow-rank", type=int, default=-1, help="this rank's steps take twice as long")
    p.add_argument("--compute-ms", type=float, default=0.0,
                   help="simulated extra compute per step (a sleep), for the sync-mode runs")
    p.add_argument("--eval", action="store_true", help="rank 0: the loss over the training set")
    p.add_argument("--log-every", type=int, default=50)
    p.add_argument("--quiet", action="store_true")
    p.add_argument("--json", action="store_true")
    p.add_argument("--json-dir", default="", help="with --json: write DIR/rank<R>.json instead")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--bucket-cap-mb", type=float, default=25.0, help="PSOptimizer's buckets")
    p.add_argument("--epochs", type=int, default=0,
                   help="train E epochs of leased batches instead of --steps steps")
    p.add_argument("--lease-log", default="", help="with --epochs: DIR/rank<R>.log")
    p.add_argument("--anneal", action="store_true",
                   help="with --epochs: the last epoch at a tenth of --lr")
    return p.parse_args(argv)


def rank_main(args) -> int:
    import torch
    import torch.nn as nn
    import gsync.torch
    from train_ddp import make_model, make_shard
    torch.set_num_threads(args.threads)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    job = args.job or f"train-ps-{os.environ.get('MASTER_PORT', '0')}"
    model = make_model(args)
    x, y = make_shard(args, rank, world)
    opt = gsync.torch.PSOptimizer(model.parameters(), job=job, optimizer=args.optimizer,
                                  lr=args.lr, momentum=args.momentum if args.optimizer == "sgd" else 0,
                                  weight_decay=args.weight_decay, sync=args.sync,
                                  weight=float(args.batch), bucket_cap_mb=args.bucket_cap_mb,
                                  timeout_ms=120000)
    lossf = nn.CrossEntropyLoss()
    if args.epochs:
        return leased_main(args, rank, model, opt, lossf)
    rng = random.Random(args.seed * 1000 + rank)
    stall_p, stall_ms = (float(v) for v in args.stall.split(":")) if args.stall else (0.0, 0.0)
    nb = x.shape[0] // args.batch
    losses, times = [], []
    t0 = time.perf_counter()
    for i in range(args.steps):
        ts = time.perf_counter()
        j = i % nb
        xb, yb = x[j * args.batch:(j + 1) * args.batch], y[j * args.batch:(j + 1) * args.batch]
        opt.zero_grad()
        loss = lossf(model(xb), yb)
        loss.backward()
        extra = args.compute_ms * (2 if rank == args.slow_rank else 1)
        if stall_p and rng.random() < stall_p:
            extra += stall_ms
        if extra:
            time.sleep(extra / 1000)
        opt.step()
        times.append(time.perf_counter() - ts)
        if i % args.log_every == 0 or i == args.steps - 1:
            losses.append((i, loss.item()))
            if rank == 0 and not args.quiet and not args.json:
                print(f"step {i:5d} loss {loss.item():.6f}", flush=True)
    secs = time.perf_counter() - t0
    final = None
    if args.eval and rank == 0:
        xa, ya = make_shard(args, 0, 1)
        with torch.no_grad():
            final = nn.functional.cross_entropy(model(xa), ya).item()
    if args.json:
        line = json.dumps({"rank": rank, "steps": args.steps, "seconds": secs,
                           "final_loss": final, "losses": losses, "step_times": times})
        if args.json_dir:
            Path(args.json_dir, f"rank{rank}.json").write_text(line + "\n")
        else:
            print(line, flush=True)
    elif rank == 0:
        print(f"# {args.steps} steps in {secs:.2f} s, {secs / args.steps * 1e3:.2f} ms/step, "
              f"{args.steps / secs:.1f} updates/s" +
              (f", final loss {final:.6f}" if final is not None else ""), flush=True)
    # Every rank is through before any leaves: a rank that leaves a job
    # fails the others' ops (in asp and ssp the fast ones finish first).
    opt.comm.barrier(1, 600000)
    opt.close()
    return 0


def leased_main(args, rank, model, opt, lossf) -> int:
    """--epochs: every rank trains on the batches the daemons lease it."""
    import torch
    import gsync.torch
    from train_ddp import make_shard
    x, y = make_shard(args, 0, 1)  # the whole set: the leases split it
    sampler = gsync.torch.LeasedBatchSampler(opt, x.shape[0], args.batch, seed=args.seed,
                                             drop_last=True)
    log = open(Path(args.lease_log, f"rank{rank}.log"), "w", buffering=1) if args.lease_log else None
    t0, steps = time.perf_counter(), 0
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        if args.anneal and epoch == args.epochs - 1:
            opt.lr = args.lr / 10  # pushes carry it
        for b in opt.leased_batches(epoch, len(sampler)):
            if log:
                log.write(f"leased {epoch} {b}\n")
            idx = sampler.batch(b)
            opt.zero_grad()
            loss = lossf(model(x[idx]), y[idx])
            loss.backward()
            if args.compute_ms:
                time.sleep(args.compute_ms / 1000)
            opt.step()
            steps += 1
            if log:
                log.write(f"done {epoch} {b}\n")
        if rank == 0 and not args.quiet:
            print(f"epoch {epoch} done at clock {opt.clock} ({steps} steps here)", flush=True)
    secs = time.perf_counter() - t0
    final = None
    if args.eval and rank == 0:
        with torch.no_grad():
            final = lossf(model(x), y).item()
    if args.json:
        line = json.dumps({"rank": rank, "steps": steps, "clock": opt.clock, "seconds": secs,
                           "final_loss": final})
        if args.json_dir:
            Path(args.json_dir, f"rank{rank}.json").write_text(line + "\n")
        else:
            print(line, flush=True)
    # No barrier: the job leases, so a rank that leaves is let go, and every
    # rank was told the end of the last epoch at the same clock.
    opt.close()
    return 0


def main() -> int:
    argv = sys.argv[1:]
    args = parse_args(argv)
    if "RANK" in os.environ:
        return rank_main(args)
    if not args.nproc:
        print("train_ps: give --nproc (and --sockets) or run it under a launcher", file=sys.stderr)
        return 2
    from gsync_testbed import spawn_ranks
    sockets = [s for s in args.sockets.split(",") if s]
    procs = spawn_ranks([sys.executable, str(Path(__file__).resolve()), *argv], args.nproc, sockets)
    rc = 0
    for r, p in enumerate(procs):
        if p.wait() != 0:
            print(f"train_ps: rank {r} exited with {p.returncode}", file=sys.stderr)
            rc = 1
    return rc


if __name__ == "__main__":
    sys.exit(main())
