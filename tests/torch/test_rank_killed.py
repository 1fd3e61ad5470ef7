#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""A rank killed mid-training: examples/train_ddp.py runs 4 ranks over gsync
(the DDP hook, then gsync.torch.DataParallel) on a 2-host test bed with a 5 s op timeout; once rank 0 has printed step 20,
rank 3 (on host h2) gets SIGKILL. Every other rank, on either host, must
leave training with a Python exception from loss.backward() that carries
gsync's text naming rank 3, within the timeout (the daemon reports a dead
rank at once; the timeout is only the bound).
"""
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import torch_common as tc  # noqa: E402

tc.require_torch()
tc.require_testbed()

from gsync_testbed import spawn_ranks  # noqa: E402
from gsync_testbed import Testbed  # noqa: E402

RANKS, VICTIM, TIMEOUT_MS = 4, 3, 5000

fails = tc.Failures()


def run(bed: Testbed, backend: str) -> None:
    cmd = [sys.executable, str(tc.EXAMPLE), "--backend", backend, "--steps", "100000",
           "--timeout-ms", str(TIMEOUT_MS), *tc.SMALL_MODEL]
    procs = spawn_ranks(cmd, RANKS, bed.sockets, capture=True)
    outs = {r: [] for r in range(RANKS)}
    errs = {r: [] for r in range(RANKS)}
    exited = {}
    started = threading.Event()

    def pump(r: int, p: subprocess.Popen) -> None:
        def read_err() -> None:
            errs[r].extend(p.stderr)
        te = threading.Thread(target=read_err, daemon=True)
        te.start()
        for line in p.stdout:
            outs[r].append(line)
            if r == 0 and re.match(r"step\s+20 ", line):
                started.set()
        p.wait()
        te.join()
        exited[r] = time.monotonic()

    threads = [threading.Thread(target=pump, args=(r, p), daemon=True)
               for r, p in enumerate(procs)]
    for t in threads:
        t.start()
    ok = started.wait(timeout=120)
    fails.check(ok, f"{backend}: rank 0 never reached step 20")
    t_kill = time.monotonic()
    procs[VICTIM].send_signal(signal.SIGKILL)
    for t in threads:
        t.join(timeout=TIMEOUT_MS / 1000 + 30)
    for p in procs:
        if p.poll() is None:
            p.kill()
    for r in range(RANKS):
        if r == VICTIM:
            continue
        err = "".join(errs[r])
        print(f"--- rank {r} (exit {procs[r].returncode}), stderr:\n{err.strip()}\n---")
        fails.check(procs[r].returncode not in (None, 0), f"{backend}: rank {r} did not fail")
        took = exited.get(r, float("inf")) - t_kill
        fails.check(took <= TIMEOUT_MS / 1000, f"{backend}: rank {r} took {took:.1f} s to fail "
                    f"(timeout {TIMEOUT_MS} ms)")
        fails.check(f"rank {VICTIM}" in err and "training failed" in err,
                    f"{backend}: rank {r}: the exception does not name rank {VICTIM}")
        fails.check("GSYNC_ERR_RANK_DEAD" in err or "GSYNC_ERR_HOST_LOST" in err,
                    f"{backend}: rank {r}: the exception does not say GSYNC_ERR_RANK_DEAD")
        print(f"{backend}: rank {r}: failed {took:.2f} s after the kill")
    if not ok or fails.items:
        for h in range(len(bed.hosts)):
            print(f"--- {bed.hosts[h].id} gsyncd.log ---\n{bed.daemon_log(h)[-2000:]}")


with Testbed(hosts=2, racks=1) as bed:
    for backend in ("gsync", "gsync_dp"):
        run(bed, backend)
fails.finish()
