# SPDX-License-Identifier: Apache-2.0
"""What the torch tests share: skipping without torch, the repository's
python/ on sys.path, the example, and a small model's arguments."""
from __future__ import annotations

import importlib
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

REPO = Path(__file__).resolve().parent.parent.parent
EXAMPLE = REPO / "examples" / "train_ddp.py"
sys.path.insert(0, str(REPO / "python"))

# 64-256-256-10 (85,002 parameters) in 0.1 MB buckets: several buckets, and
# fast enough with the reference BLAS on 2 shared cores.
SMALL_MODEL = ["--din", "64", "--hidden", "256", "--layers", "2", "--bucket-cap-mb", "0.1"]


def skip(reason: str) -> None:
    print(f"SKIPPED: {reason}", flush=True)
    sys.exit(77)


def require_torch() -> None:
    try:
        importlib.import_module("torch")
    except ImportError as e:
        skip(f"torch is not importable by {sys.executable} ({e}); apt-get install python3-torch")


def require_testbed() -> None:
    from gsync_testbed import find_tool
    if not find_tool("GSYNC_TESTBED", "tools/testbed/gsync-testbed", "gsync-testbed"):
        skip("gsync-testbed not found (set GSYNC_TESTBED or build it)")


def admin(path: str, command: str) -> dict:
    """A daemon's admin report (gsyncctl's protocol: one line, JSON back)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    s.sendall(command.encode() + b"\n")
    data = b""
    while True:
        b = s.recv(1 << 16)
        if not b:
            break
        data += b
    s.close()
    return json.loads(data)


def run_example(args: Sequence[str], timeout: float) -> subprocess.CompletedProcess:
    cmd = [sys.executable, str(EXAMPLE), *args]
    t0 = time.monotonic()
    cp = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    print(f"$ {' '.join(cmd)}  # exit {cp.returncode}, {time.monotonic() - t0:.1f} s", flush=True)
    return cp


def print_daemon_logs(bed) -> None:
    """The end of every host's gsyncd.log, for a failure's report."""
    for h in range(len(bed.hosts)):
        print(f"--- {bed.hosts[h].id} gsyncd.log ---\n{bed.daemon_log(h)[-3000:]}")


def run_example_on(bed, args: Sequence[str], fails: "Failures", what: str,
                   timeout: float) -> subprocess.CompletedProcess:
    """run_example, its output printed; a run that fails is a failed check,
    reported with the daemons' logs, and ends the test."""
    cp = run_example(args, timeout)
    print(cp.stdout, cp.stderr, sep="", end="", flush=True)
    fails.check(cp.returncode == 0, f"{what} exited {cp.returncode}")
    if cp.returncode != 0:
        print_daemon_logs(bed)
        fails.finish()
    return cp


class Failures:
    """Collects failed checks; exit code 1 with all of them listed."""

    def __init__(self) -> None:
        self.items: List[str] = []

    def check(self, ok: bool, what: str) -> None:
        if not ok:
            self.items.append(what)
            print(f"FAIL: {what}", flush=True)

    def finish(self) -> None:
        if self.items:
            print(f"{len(self.items)} check(s) failed", flush=True)
            sys.exit(1)
        print("PASS", flush=True)
        sys.exit(0)


def run_workers(bed, worker: str, places: Sequence[Tuple[int, int, int]], fails: Failures,
                expect: Sequence[str], timeout: float,
                extra_env: Optional[Dict[str, str]] = None) -> None:
    """Runs `worker` (python source) as one process per rank, rank r on host
    places[r][0] of the test bed as local rank places[r][1] of
    places[r][2], with the torchrun variables and GSYNC_SOCKET set; each must
    exit 0 having printed every line of `expect`. On a failure the daemons'
    logs are printed."""
    procs = []
    for r, (h, lr, ls) in enumerate(places):
        env = dict(os.environ, PYTHONPATH=str(REPO / "python"), RANK=str(r),
                   WORLD_SIZE=str(len(places)), LOCAL_RANK=str(lr), LOCAL_WORLD_SIZE=str(ls),
                   GSYNC_SOCKET=bed.sockets[h], **(extra_env or {}))
        procs.append(subprocess.Popen([sys.executable, "-c", worker], env=env, text=True,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    for r, p in enumerate(procs):
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
        print(f"--- rank {r} (exit {p.returncode})\n{out}{err[-3000:]}", flush=True)
        fails.check(p.returncode == 0, f"rank {r} exited {p.returncode}")
        for what in expect:
            fails.check(what in out, f"rank {r}: no '{what}'")
    if fails.items:
        print_daemon_logs(bed)
