#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""ps_sync_modes: what BSP, SSP and ASP buy under stragglers
(docs/parameter-server.md, "The three sync modes"; issue #18's runs).

Runs examples/train_ps.py on a test bed of 4 hosts with one worker each, in
each mode, with every worker's step taking --compute-ms more (a sleep: the
machine's cores stay free for the daemons), in two scenarios:

  stalls     each worker-step has a 10% chance of a 60 ms stall. Reported:
             time_to_target_s, how long the mode took to bring rank 0's
             smoothed training loss (an EMA) to where BSP's was after --steps
             steps - for BSP itself, its time to that step - (median of the
             seeds), and seconds, the whole run; SSP with s = 3 should need
             at most 0.75x BSP's time.
  straggler  worker 3 is permanently twice as slow. Reported: updates_per_s,
             pushes the servers applied per second (every worker's steps over
             the run's time): ASP at least 1.5x BSP; and for SSP the fast
             workers' clock rate against the straggler's (the bound holds
             them within 5%).

  examples/ps_sync_modes.py --json
  examples/ps_sync_modes.py --steps 300 --seeds 1     # a quick look
"""
import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "python"))
sys.path.insert(0, str(REPO / "examples"))

from gsync_testbed import Testbed  # noqa: E402
from bench_ddp import openblas_env  # noqa: E402

MODES = ["bsp", "ssp:3", "asp"]


def run(bed, args, mode, seed, extra, env):
    with tempfile.TemporaryDirectory(prefix="ps-sync-modes-") as out:
        cmd = [sys.executable, str(REPO / "examples" / "train_ps.py"), "--nproc",
               str(args.hosts), "--sockets", ",".join(bed.sockets), "--steps", str(args.steps),
               "--sync", mode, "--seed", str(seed), "--json", "--json-dir", out, "--log-every",
               "1", "--compute-ms", str(args.compute_ms), "--lr", str(args.lr), *extra]
        cp = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=3600)
        if cp.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} exited {cp.returncode}:\n{cp.stdout}\n{cp.stderr}")
        return [json.loads(Path(out, f"rank{r}.json").read_text()) for r in range(args.hosts)]


def smoothed(losses):
    """(elapsed seconds, EMA of the batch loss) per step of rank 0."""
    out, ema, t = [], None, 0.0
    for (step, loss), dt in zip(losses[0]["losses"], losses[0]["step_times"]):
        t += dt
        ema = loss if ema is None else 0.97 * ema + 0.03 * loss
        out.append((t, ema))
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--hosts", type=int, default=4)
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--compute-ms", type=float, default=10.0)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    env = openblas_env("")
    rows = []
    with Testbed(hosts=args.hosts, racks=1) as bed:
        # Stalls: time to BSP's loss.
        curves = {m: [] for m in MODES}
        for seed in range(1, args.seeds + 1):
            for mode in MODES:
                curves[mode].append(run(bed, args, mode, seed, ["--stall", "0.1:60"], env))
        for mode in MODES:
            times, totals, finals = [], [], []
            for i, ranks in enumerate(curves[mode]):
                bsp = smoothed(curves["bsp"][i])
                target = bsp[-1][1]
                curve = smoothed(ranks)
                # BSP's time is its wall-clock time at its last step (where
                # its loss is the target); the others', when their loss
                # first comes down to it.
                reached = (curve[-1][0] if mode == "bsp" else
                           next((t for t, l in curve if l <= target), None))
                times.append(reached if reached is not None else float("inf"))
                totals.append(curve[-1][0])
                finals.append(curve[-1][1])
            rows.append({"scenario": "stalls", "mode": mode,
                         "time_to_target_s": statistics.median(times),
                         "seconds": statistics.median(totals),
                         "final_loss": statistics.median(finals), "seeds": args.seeds})
        # A permanent straggler: updates per second.
        for mode in MODES:
            ranks = run(bed, args, mode, 1, ["--slow-rank", str(args.hosts - 1)], env)
            # Each worker's own rate, summed: the pushes the servers take per
            # second while all of them run (a fast worker that is through
            # waits for the others at the end, which is not a rate of its).
            updates = sum(r["steps"] / r["seconds"] for r in ranks)
            slow = ranks[-1]["steps"] / ranks[-1]["seconds"]
            fast = statistics.median(r["steps"] / r["seconds"] for r in ranks[:-1])
            rows.append({"scenario": "straggler", "mode": mode, "updates_per_s": updates,
                         "fast_clock_rate": fast, "straggler_clock_rate": slow,
                         "fast_over_straggler": fast / slow,
                         "final_loss": smoothed(ranks)[-1][1]})
    bsp_t = next(r["time_to_target_s"] for r in rows if r["mode"] == "bsp" and "time_to_target_s" in r)
    bsp_u = next(r["updates_per_s"] for r in rows if r["mode"] == "bsp" and "updates_per_s" in r)
    for r in rows:
        if "time_to_target_s" in r:
            r["vs_bsp_time"] = r["time_to_target_s"] / bsp_t
        if "updates_per_s" in r:
            r["vs_bsp_updates"] = r["updates_per_s"] / bsp_u
        print(json.dumps(r) if args.json else
              "  ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                        for k, v in r.items()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
