#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""train_ddp: a small real DDP training run on CPU, over gloo or gsync.

Model: an MLP (default 256-1024-1024-1024-10, 2,372,618 parameters, 9.5 MB of
gradients a step). Data: a synthetic 10-class problem made from a fixed seed
(labels = argmax of a random linear "teacher"), sharded by rank. SGD with
momentum. The same seed gives the same model and data for either backend.

The gsync backend is plain DDP plus the two lines this example exists to
show (search for "gsync:"). DDP itself still needs a process group (it
broadcasts the initial parameters with it); the gradients go through gsync.

Run one rank per process, torchrun-style (RANK, WORLD_SIZE, LOCAL_RANK,
LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, GSYNC_SOCKET in the environment),
or let it start the ranks itself:

  examples/train_ddp.py --nproc 2 --backend gloo
  examples/train_ddp.py --nproc 4 --backend gsync --sockets /tmp/gtb-.../h1/gsyncd.sock,...
  examples/train_ddp.py --nproc 2 --bench --sockets ...   # step time, exposed communication

Prints per step (rank 0): step, loss, step time. --dump DIR writes each
rank's losses and final parameters to DIR/rank<r>.pt.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))

NCLS = 10


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", choices=["gloo", "gsync", "gsync_dp"], default="gloo",
                   help="gsync: DDP with gsync's hook; gsync_dp: gsync.torch.DataParallel "
                        "(gradients in the arena)")
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--warmup", type=int, default=10, help="--bench: untimed steps per phase")
    p.add_argument("--din", type=int, default=256)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--layers", type=int, default=3, help="hidden layers")
    p.add_argument("--batch", type=int, default=64, help="per rank")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--bucket-cap-mb", type=float, default=25.0, help="DDP bucket size")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads per rank")
    p.add_argument("--job", default=None, help="gsync job name (default: from MASTER_PORT)")
    p.add_argument("--timeout-ms", type=int, default=30000, help="gsync per-op timeout")
    p.add_argument("--staged", action="store_true",
                   help="gsync: let libgsync stage DDP's buckets instead of arena buffers")
    p.add_argument("--dump", default=None, help="directory for rank<r>.pt")
    p.add_argument("--trace", default=None,
                   help="directory for rank<r>.json: each step's and each bucket's times "
                        "(CLOCK_MONOTONIC ns, the daemon's clock), for examples/ddp_breakdown.py")
    p.add_argument("--quiet", action="store_true", help="no per-step lines")
    p.add_argument("--compression", default=None,
                   help="gsync: how gradients cross between hosts (int8, fp16, bf16, topk:0.01, "
                        "...,noef; docs/compression.md)")
    p.add_argument("--reproducible", action="store_true",
                   help="gsync: the same bits on any layout (docs/reproducibility.md)")
    p.add_argument("--anomaly-guard", choices=["skip", "fail"], default=None,
                   help="gsync's anomaly guard (docs/fault-tolerance.md): skip the step of an "
                        "anomalous gradient on every rank, or fail")
    p.add_argument("--inject-faults", type=int, default=0,
                   help="corrupt this many steps' gradients on one rank each (NaN, Inf, a 100x "
                        "spike in turn), every 3rd step from step 30: the guard's test")
    p.add_argument("--eval", action="store_true",
                   help="at the end, rank 0 prints the loss over the whole training set")
    p.add_argument("--samples", type=int, default=16384, help="training set size")
    p.add_argument("--label-noise", type=float, default=0.0,
                   help="share of labels replaced by random ones (a loss floor)")
    p.add_argument("--bench", action="store_true",
                   help="time gloo DDP, gsync DDP and no_sync (no communication) in one run")
    p.add_argument("--rounds", type=int, default=2, help="--bench: rounds of the phases")
    p.add_argument("--json", action="store_true",
                   help="--bench: one JSON object per phase, then one with gsync_vs_gloo")
    p.add_argument("--noop-phase", action="store_true",
                   help="--bench: also time DDP with a hook that communicates nothing "
                        "(DDP's own bucket copies and hook overhead, the floor for any hook)")
    # Launcher (when RANK is not in the environment).
    p.add_argument("--nproc", type=int, default=None, help="start this many local ranks")
    p.add_argument("--sockets", default="", help="comma-separated gsyncd sockets, one per host")
    p.add_argument("--admin-sockets", default="",
                   help="--bench: the hosts' admin sockets, comma-separated: each phase's CPU "
                        "then counts the daemons' too (admin `cpu`)")
    p.add_argument("--port", type=int, default=None, help="MASTER_PORT (default: a free one)")
    return p.parse_args(argv)


# ---- model and data ----

def make_model(args: argparse.Namespace):
    import torch.nn as nn
    import torch
    torch.manual_seed(args.seed)
    layers, width = [], args.din
    for _ in range(args.layers):
        layers += [nn.Linear(width, args.hidden), nn.ReLU()]
        width = args.hidden
    layers.append(nn.Linear(width, NCLS))
    return nn.Sequential(*layers)


def make_shard(args: argparse.Namespace, rank: int, world: int, n_total: int = 0):
    """Rank's shard of the training set. --label-noise replaces that share
    of the labels with random ones, so the loss has a floor well above zero
    and runs can be compared by it."""
    import torch
    n_total = n_total or getattr(args, "samples", 16384)
    g = torch.Generator().manual_seed(args.seed + 1)
    x = torch.randn(n_total, args.din, generator=g)
    teacher = torch.randn(args.din, NCLS, generator=g)
    y = (x @ teacher).argmax(dim=1)
    noise = getattr(args, "label_noise", 0.0)
    if noise > 0:
        gn = torch.Generator().manual_seed(args.seed + 3)
        flip = torch.rand(n_total, generator=gn) < noise
        y = torch.where(flip, torch.randint(0, NCLS, (n_total,), generator=gn), y)
    return x[rank::world].contiguous(), y[rank::world].contiguous()


# ---- training ----

def build_ddp(args: argparse.Namespace, hook_state=None, data_parallel: bool = False):
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP
    if data_parallel:
        import gsync.torch
        # In place of DDP: the gradients live in gsync's arena, no copies.
        model = gsync.torch.DataParallel(make_model(args), hook_state,
                                         bucket_cap_mb=args.bucket_cap_mb)
    else:
        model = DDP(make_model(args), bucket_cap_mb=args.bucket_cap_mb)
        if hook_state is not None:
            import gsync.torch
            model.register_comm_hook(hook_state, gsync.torch.allreduce_hook)  # gsync: line 2 of 2
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    return model, opt


def fault_at(step: int, faults: int) -> Optional[str]:
    """The fault --inject-faults puts into `step`, if any."""
    k = step - 30
    if faults <= 0 or k < 0 or k % 3 or k // 3 >= faults:
        return None
    return ("nan", "inf", "spike")[k // 3 % 3]


def run_steps(model, opt, x, y, steps: int, batch: int, no_sync: bool = False,
              on_step=None, step_times: Optional[List[dict]] = None, state=None,
              faults: int = 0, rank: int = 0, world: int = 1) -> List[float]:
    """Trains `steps` steps; returns the losses. on_step(i, loss, seconds).
    step_times: a list to append each step's CLOCK_MONOTONIC ns to (start,
    forward done, backward done, optimizer done)."""
    import contextlib
    import torch.nn as nn
    lossf = nn.CrossEntropyLoss()
    nb = x.shape[0] // batch
    losses = []
    first = next(iter(model.parameters()))
    fault = [None]

    def corrupt(g):
        # Runs before DDP's reducer takes the gradient into its bucket.
        if fault[0] == "nan":
            g = g.clone()
            g.view(-1)[0] = float("nan")
        elif fault[0] == "inf":
            g = g.clone()
            g.view(-1)[0] = float("inf")
        elif fault[0] == "spike":
            g = g * 100.0
        return g
    if faults:
        first.register_hook(corrupt)
    run_steps.skipped = 0
    for i in range(steps):
        f = fault_at(i, faults)
        fault[0] = f if f is not None and rank == (i // 3) % world else None
        t0 = time.perf_counter()
        t_start = time.monotonic_ns()
        j = i % nb
        xb, yb = x[j * batch:(j + 1) * batch], y[j * batch:(j + 1) * batch]
        opt.zero_grad(set_to_none=False)
        with model.no_sync() if no_sync else contextlib.nullcontext():
            loss = lossf(model(xb), yb)
            t_forward = time.monotonic_ns()
            loss.backward()
            t_backward = time.monotonic_ns()
        if state is None or state.should_step():
            opt.step()
        else:
            run_steps.skipped += 1  # the daemons found it anomalous, on every rank alike
        losses.append(loss.item())
        if step_times is not None:
            step_times.append({"start_ns": t_start, "forward_ns": t_forward,
                               "backward_ns": t_backward, "optimizer_ns": time.monotonic_ns()})
        if on_step:
            on_step(i, losses[-1], time.perf_counter() - t0)
    return losses


def init_rank(args: argparse.Namespace):
    import torch
    import torch.distributed as dist
    torch.set_num_threads(args.threads)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=world)
    state = None
    if args.backend in ("gsync", "gsync_dp") or args.bench:
        import gsync.torch
        job = args.job or f"train-ddp-{os.environ.get('MASTER_PORT', '0')}"
        state = gsync.torch.init(job=job, timeout_ms=args.timeout_ms,  # gsync: line 1 of 2
                                 zero_copy=not args.staged, compression=args.compression,
                                 anomaly_guard=args.anomaly_guard,
                                 reproducible=args.reproducible)
    return rank, world, state


def train_main(args: argparse.Namespace) -> int:
    import torch
    import torch.distributed as dist
    rank, world, state = init_rank(args)
    x, y = make_shard(args, rank, world)
    uses_gsync = args.backend in ("gsync", "gsync_dp")
    model, opt = build_ddp(args, state if uses_gsync else None, args.backend == "gsync_dp")
    if rank == 0:
        n = sum(p.numel() for p in model.parameters())
        print(f"# backend={args.backend} ranks={world} params={n} "
              f"grad_bytes={n * 4} batch/rank={args.batch} torch={torch.__version__}", flush=True)

    def on_step(i, loss, secs):
        if rank == 0 and not args.quiet:
            print(f"step {i:4d} loss {loss:.6f} time_ms {secs * 1e3:.2f}", flush=True)

    step_times: Optional[List[dict]] = [] if args.trace else None
    if args.trace and state is not None:
        state.trace = []
    t0 = time.perf_counter()
    try:
        losses = run_steps(model, opt, x, y, args.steps, args.batch, on_step=on_step,
                           step_times=step_times,
                           state=state if uses_gsync else None,
                           faults=args.inject_faults, rank=rank, world=world)
    except RuntimeError as e:
        # A gsync failure inside the hook surfaces here, from loss.backward().
        print(f"rank {rank}: training failed: {e}", file=sys.stderr, flush=True)
        os._exit(1)  # peers may be gone; do not wait on them at exit
    elapsed = time.perf_counter() - t0
    if rank == 0:
        print(f"# {args.steps} steps in {elapsed:.2f} s, {elapsed / args.steps * 1e3:.2f} ms/step, "
              f"final loss {losses[-1]:.6f}", flush=True)
    if rank == 0 and args.eval:
        # The loss over every rank's shard: one step's batch is too noisy
        # to compare runs by.
        xa, ya = make_shard(args, 0, 1)
        with torch.no_grad():
            full = torch.nn.functional.cross_entropy(model.module(xa), ya).item()
        print(f"# eval loss {full:.6f}", flush=True)
    if rank == 0 and (args.inject_faults or args.anomaly_guard):
        finite = all(bool(torch.isfinite(p).all()) for p in model.parameters())
        print(f"# steps skipped {run_steps.skipped} params finite {finite}", flush=True)
    if args.trace:
        import json
        if state is not None:
            state.completer.quiesce()  # the last bucket's trace is written
        Path(args.trace).mkdir(parents=True, exist_ok=True)
        job = state.comm.job if state is not None else None
        (Path(args.trace) / f"rank{rank}.json").write_text(json.dumps(
            {"rank": rank, "world": world, "job": job,
             "local_rank": int(os.environ.get("LOCAL_RANK", rank)),
             "socket": os.environ.get("GSYNC_SOCKET", ""), "steps": step_times,
             "buckets": state.trace if state is not None else []}))
    if args.dump:
        Path(args.dump).mkdir(parents=True, exist_ok=True)
        params = {k: v.detach().clone() for k, v in model.module.state_dict().items()}
        handed = state.stats.buckets if state is not None else 0
        torch.save({"losses": losses, "params": params, "gsync_buckets": handed},
                   Path(args.dump) / f"rank{rank}.pt")
    dist.barrier()
    if state is not None:
        state.close()
    dist.destroy_process_group()
    return 0


# ---- benchmark: gloo DDP vs gsync DDP vs no communication, same processes ----

def daemons_cpu_s(admin_sockets: List[str]) -> float:
    """The daemons' CPU seconds so far, summed (admin `cpu`); 0 without them."""
    import json
    import socket
    total = 0.0
    for path in admin_sockets:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.connect(path)
            s.sendall(b"cpu\n")
            reply = b""
            while chunk := s.recv(4096):
                reply += chunk
        total += float(json.loads(reply)["cpu_s"])
    return total


def bench_main(args: argparse.Namespace) -> int:
    import torch
    import torch.distributed as dist
    rank, world, state = init_rank(args)
    x, y = make_shard(args, rank, world)
    phases = ["gloo", "gsync", "gsync_dp", "no_sync"] + (["noop_hook"] if args.noop_phase else [])
    times: Dict[str, List[float]] = {k: [] for k in phases}
    # CPU per step: every rank's (compute and communication), and the
    # daemons' (read by rank 0 around the timed steps).
    rank_cpu: Dict[str, List[float]] = {k: [] for k in phases}
    daemon_cpu: Dict[str, List[float]] = {k: [] for k in phases}
    admins = [a for a in args.admin_sockets.split(",") if a]
    inflight: List[float] = []
    copy_in: List[float] = []
    for _ in range(args.rounds):
        for phase in phases:
            model, opt = build_ddp(args, state if phase in ("gsync", "gsync_dp") else None,
                                   phase == "gsync_dp")
            if phase == "noop_hook":
                model.register_comm_hook(None, _noop_hook)
            run_steps(model, opt, x, y, args.warmup, args.batch, no_sync=phase == "no_sync")
            if phase == "gsync":
                c0, i0 = state.stats.copy_in_s, state.completer.inflight_s
            dist.barrier()
            d0 = daemons_cpu_s(admins) if rank == 0 else 0.0
            cpu0 = time.process_time()
            t0 = time.perf_counter()
            run_steps(model, opt, x, y, args.steps, args.batch, no_sync=phase == "no_sync")
            step_s = (time.perf_counter() - t0) / args.steps
            cpu_s = (time.process_time() - cpu0) / args.steps
            d1 = daemons_cpu_s(admins) if rank == 0 else 0.0
            dist.barrier()
            t = torch.tensor([step_s, cpu_s])
            dist.all_reduce(t)
            times[phase].append(float(t[0]) / world)
            rank_cpu[phase].append(float(t[1]))
            daemon_cpu[phase].append((d1 - d0) / args.steps)
            if phase == "gsync":
                copy_in.append((state.stats.copy_in_s - c0) / args.steps)
                inflight.append((state.completer.inflight_s - i0) / args.steps)
            if phase == "gsync_dp":
                model.close()  # its gradients' arena blocks
    if rank == 0:
        n = sum(p.numel() for p in make_model(args).parameters())
        med = {k: statistics.median(v) for k, v in times.items()}
        hosts = len(args.sockets.split(",")) if args.sockets else 1
        blas = "openblas" if "openblas" in os.environ.get("LD_LIBRARY_PATH", "") else "system"
        # Other work on the machine only ever adds time, so the best round
        # is shown beside the median: on a shared machine it is the steadier.
        best = {k: min(v) for k, v in times.items()}
        # Communication CPU per step: what a phase costs the ranks beyond
        # the no_sync phase's compute, plus the daemons' (gsync).
        rcpu = {k: statistics.median(v) for k, v in rank_cpu.items()}
        dcpu = {k: statistics.median(v) for k, v in daemon_cpu.items()}
        comm = {k: rcpu[k] - rcpu["no_sync"] + dcpu[k] for k in phases}
        if args.json:
            import json
            for k in phases:
                print(json.dumps({"phase": k, "hosts": hosts, "ranks": world,
                                  "step_ms": med[k] * 1e3, "exposed": 1 - med["no_sync"] / med[k],
                                  "best_step_ms": best[k] * 1e3,
                                  "rounds_ms": [v * 1e3 for v in times[k]],
                                  "rank_cpu_ms_per_step": rcpu[k] * 1e3,
                                  "daemon_cpu_ms_per_step": dcpu[k] * 1e3 if admins else None,
                                  "comm_cpu_ms_per_step": comm[k] * 1e3}), flush=True)
            summary = {"hosts": hosts, "ranks": world,
                       "gsync_vs_gloo": med["gloo"] / med["gsync"],
                       "gsync_dp_vs_gloo": med["gloo"] / med["gsync_dp"],
                       "copy_in_ms": statistics.median(copy_in) * 1e3,
                       "in_flight_ms": statistics.median(inflight) * 1e3}
            if admins and comm["gloo"] > 0:
                # The daemons' CPU per step against gloo's communication CPU.
                summary["gsync_comm_cpu_vs_gloo"] = comm["gsync"] / comm["gloo"]
                summary["gsync_dp_comm_cpu_vs_gloo"] = comm["gsync_dp"] / comm["gloo"]
                summary["gsync_daemon_cpu_vs_gloo"] = dcpu["gsync"] / comm["gloo"]
            print(json.dumps(summary), flush=True)
        else:
            print_bench(args, world, hosts, n, blas, phases, times, med, best, copy_in, inflight)
            if admins:
                print("  CPU ms per step (ranks + daemons beyond no_sync's compute): " +
                      ", ".join(f"{k} {comm[k] * 1e3:.2f}" for k in phases if k != "no_sync") +
                      f"; daemons alone in gsync {dcpu['gsync'] * 1e3:.2f}", flush=True)
    state.close()
    dist.barrier()
    dist.destroy_process_group()
    return 0


def print_bench(args, world, hosts, n, blas, phases, times, med, best, copy_in, inflight) -> None:
    import torch
    print(f"# bench: ranks={world} hosts={hosts} params={n} grad_bytes={n * 4} "
          f"batch/rank={args.batch} threads/rank={args.threads} bucket_cap_mb="
          f"{args.bucket_cap_mb} steps={args.steps} (+{args.warmup} warm-up) x "
          f"{args.rounds} rounds, torch {torch.__version__}, BLAS {blas}")
    print(f"# {'phase':9s} {'median_ms':>9s} {'exposed':>8s} {'best_ms':>8s} {'exposed':>8s}"
          f"   per-round step_ms")
    for k in phases:
        rounds = " ".join(f"{v * 1e3:.2f}" for v in times[k])
        print(f"  {k:9s} {med[k] * 1e3:9.2f} {1 - med['no_sync'] / med[k]:8.3f} "
              f"{best[k] * 1e3:8.2f} {1 - best['no_sync'] / best[k]:8.3f}   {rounds}")
    print(f"  gsync per step: copy-in (bucket -> arena) {statistics.median(copy_in) * 1e3:.2f}"
          f" ms; in flight (submit -> future done, summed over buckets) "
          f"{statistics.median(inflight) * 1e3:.2f} ms; zero_copy={not args.staged}")
    print(f"  gloo / gsync: {med['gloo'] / med['gsync']:.3f}x (DDP hook), "
          f"{med['gloo'] / med['gsync_dp']:.3f}x (gsync.torch.DataParallel)", flush=True)


def _noop_hook(state, bucket):
    """A hook that returns the bucket unreduced: what DDP costs without communication."""
    import torch
    fut = torch.futures.Future()
    fut.set_result(bucket.buffer())
    return fut


def launch(args: argparse.Namespace, argv: List[str]) -> int:
    """Starts --nproc ranks of this script and waits for them; if one fails,
    the others get 30 s to report their own error before they are killed."""
    from gsync_testbed import spawn_ranks
    sockets = [s for s in args.sockets.split(",") if s]
    procs = spawn_ranks([sys.executable, str(Path(__file__).resolve()), *argv], args.nproc,
                        sockets, master_port=args.port)
    rc, deadline = 0, None
    while any(p.poll() is None for p in procs):
        codes = [p.poll() for p in procs]
        if deadline is None and any(c not in (None, 0) for c in codes):
            deadline = time.monotonic() + 30
        if deadline is not None and time.monotonic() > deadline:
            for p in procs:
                if p.poll() is None:
                    p.kill()
        time.sleep(0.1)
    for r, p in enumerate(procs):
        if p.returncode != 0:
            print(f"train_ddp: rank {r} exited with {p.returncode}", file=sys.stderr)
            rc = 1
    return rc


def main() -> int:
    argv = sys.argv[1:]
    args = parse_args(argv)
    if "RANK" not in os.environ:
        if not args.nproc:
            print("train_ddp: set RANK/WORLD_SIZE/... (torchrun) or give --nproc", file=sys.stderr)
            return 2
        return launch(args, argv)
    return bench_main(args) if args.bench else train_main(args)


if __name__ == "__main__":
    sys.exit(main())
