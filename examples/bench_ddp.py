#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""bench_ddp: DDP step time over gloo and over gsync, and how much of the
step communication leaves exposed, for examples/train_ddp.py's model, in one
run on one multi-host test bed.

Starts `gsync-testbed up --hosts H`, then `train_ddp.py --bench` with N ranks
spread over the hosts. In the same processes, from the same initial weights,
it times (rounds of) three phases:

  gloo     plain DDP, torch's gloo allreduce (tcp 127.0.0.1)
  gsync    DDP with gsync.torch.allreduce_hook, buckets through the hosts' gsyncd
  gsync_dp gsync.torch.DataParallel in place of DDP: the gradients live in
           gsync's arena, reduced in place (no copy on the rank)
  no_sync  DDP under model.no_sync(): no communication at all

and prints step_ms and exposed = 1 - t(no_sync) / t(phase) for each, and
gloo's step time over gsync's (gsync_vs_gloo, gsync_dp_vs_gloo); and the CPU
of each phase per step - the ranks' and the daemons' (admin `cpu`) - with
the communication's share: beyond the no_sync phase's compute
(comm_cpu_ms_per_step; gsync_comm_cpu_vs_gloo in the summary).

BLAS: Debian's torch uses the system libblas.so.3 (the reference BLAS here,
~25x slower than OpenBLAS on this model's GEMMs), which would hide any
communication cost. Give --openblas DIR with libopenblas0-pthread unpacked
(apt-get download libopenblas0-pthread && dpkg -x libopenblas0-pthread_*.deb DIR;
never installed, see docs/pytorch.md); default: $GSYNC_OPENBLAS, else
build-torch/openblas or build/openblas in the repository when present.

  examples/bench_ddp.py --hosts 1 --nproc 2          # the peers/ baseline's shape
  examples/bench_ddp.py --hosts 2 --nproc 2          # one rank on each of 2 hosts
  examples/bench_ddp.py --hosts 2 --nproc 2 --json   # the same, as JSON lines
"""
import argparse
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "python"))

from gsync_testbed import Testbed  # noqa: E402

_OPENBLAS_SUBDIR = "usr/lib/x86_64-linux-gnu/openblas-pthread"


def find_openblas(explicit: str) -> str:
    cands = [explicit, os.environ.get("GSYNC_OPENBLAS", ""),
             str(REPO / "build-torch" / "openblas"), str(REPO / "build" / "openblas")]
    for c in cands:
        if c and (Path(c) / _OPENBLAS_SUBDIR / "libblas.so.3").exists():
            return str(Path(c) / _OPENBLAS_SUBDIR)
    return ""


def openblas_env(explicit: str) -> dict:
    """os.environ with OpenBLAS (one thread) in front of the system BLAS
    when it is found; said on stderr when it is not."""
    env = dict(os.environ)
    blas = find_openblas(explicit)
    if blas:
        env["LD_LIBRARY_PATH"] = blas + (":" + env["LD_LIBRARY_PATH"]
                                         if env.get("LD_LIBRARY_PATH") else "")
        env["OPENBLAS_NUM_THREADS"] = "1"
    else:
        print("OpenBLAS not found; timing with the system BLAS", file=sys.stderr)
    return env


def main() -> int:
    p = argparse.ArgumentParser(description="gloo vs gsync DDP step time on the test bed")
    p.add_argument("--hosts", type=int, default=1)
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--openblas", default="", help="dir where libopenblas0-pthread was unpacked")
    p.add_argument("--staged", action="store_true", help="gsync without arena buffers")
    p.add_argument("--json", action="store_true",
                   help="one JSON object per phase (phase, hosts, ranks, step_ms, exposed), then "
                        "one with gsync_vs_gloo (gloo's step time / gsync's)")
    p.add_argument("--daemon-arg", action="append", default=[],
                   help="extra gsyncd argument for every host (repeat: --daemon-arg=--algo "
                        "--daemon-arg=ring)")
    p.add_argument("model_args", nargs="*", help="more train_ddp.py arguments (after --)")
    args = p.parse_args()

    env = openblas_env(args.openblas)
    with Testbed(hosts=args.hosts, racks=1, daemon_args=args.daemon_arg) as bed:
        cmd = [sys.executable, str(REPO / "examples" / "train_ddp.py"), "--bench",
               "--nproc", str(args.nproc), "--sockets", ",".join(bed.sockets),
               "--admin-sockets", ",".join(h.admin_socket for h in bed.hosts),
               "--steps", str(args.steps), "--warmup", str(args.warmup),
               "--rounds", str(args.rounds), *(["--staged"] if args.staged else []),
               *(["--json"] if args.json else []),
               *args.model_args]
        print("$ " + " ".join(cmd), file=sys.stderr if args.json else sys.stdout, flush=True)
        return subprocess.run(cmd, env=env).returncode


if __name__ == "__main__":
    sys.exit(main())
