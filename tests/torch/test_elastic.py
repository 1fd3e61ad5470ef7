#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Elastic training that loses and regains a host: examples/train_elastic.py
(gsync.torch.elastic) runs one rank on each of three hosts of an etcd test
bed, min_hosts 2. Once every rank has taken 30 steps, h3's daemon and rank
are killed (SIGKILL): h1 and h2 go on in a world of two. Then a new host
joins the bed (h4) with a rank of its own: it is admitted at a step
boundary, takes the job's state from the others, and the three train on.
Every rank of the last world holds the same parameters at the same step
(their digests, printed every DIGEST steps, are compared at a step all
three passed 20 steps after the join), the survivors saw the worlds 3, 2,
3, and the loss went on falling across both changes (no rank restarted
from scratch, none diverged). The ranks run until the test has seen that,
so its length does not depend on how fast this machine trains.
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

from gsync_testbed import Testbed  # noqa: E402

EXAMPLE = tc.REPO / "examples" / "train_elastic.py"
STEPS = 1_000_000  # never reached: the test stops the ranks
DIGEST = 10

fails = tc.Failures()


class Rank:
    """One train_elastic.py process and the lines it printed."""

    def __init__(self, name: str, socket: str):
        self.name = name
        self.proc = subprocess.Popen(
            [sys.executable, str(EXAMPLE), "--job", "el", "--socket", socket, "--min-hosts", "2",
             "--steps", str(STEPS), "--digest-every", str(DIGEST)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines = []
        self.err = []
        self.cv = threading.Condition()
        threading.Thread(target=self._pump, daemon=True).start()
        threading.Thread(target=lambda: self.err.extend(self.proc.stderr), daemon=True).start()

    def _pump(self) -> None:
        for line in self.proc.stdout:
            with self.cv:
                self.lines.append(line.rstrip("\n"))
                self.cv.notify_all()

    def steps(self, world=None):
        out = []
        for line in list(self.lines):
            m = re.match(r"step (\d+) loss (\S+) world (\d+)", line)
            if m and (world is None or int(m.group(3)) == world):
                out.append((int(m.group(1)), float(m.group(2))))
        return out

    def digests(self):
        out = {}
        for line in list(self.lines):
            m = re.match(r"params at step (\d+) (\S+)", line)
            if m:
                out[int(m.group(1))] = m.group(2)
        return out

    def wait_for(self, pred, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        with self.cv:
            while not pred():
                left = deadline - time.monotonic()
                if left <= 0 or self.proc.poll() is not None:
                    return pred()
                self.cv.wait(timeout=min(left, 0.5))
        return True


def last_step(r: Rank) -> int:
    s = r.steps()
    return s[-1][0] if s else 0


with Testbed(hosts=3, racks=1, etcd=True, daemon_args=["--op-timeout-ms", "20000"]) as bed:
    ranks = [Rank(h.id, h.socket) for h in bed.hosts]
    for r in ranks:
        fails.check(r.wait_for(lambda r=r: last_step(r) >= 30, 180),
                    f"{r.name} never reached step 30: {r.err[-5:]}")
    t_kill = time.monotonic()
    bed.remove_host("h3", kill=True)
    ranks[2].proc.send_signal(signal.SIGKILL)
    for r in ranks[:2]:
        fails.check(r.wait_for(lambda r=r: len(r.steps(world=2)) >= 20, 60),
                    f"{r.name} took no 20 steps in a world of two")
    shrink_s = time.monotonic() - t_kill
    at_shrink = last_step(ranks[0])
    h4 = bed.add_host()
    newcomer = Rank(h4.id, h4.socket)
    fails.check(newcomer.wait_for(lambda: len(newcomer.steps(world=3)) >= 20, 120),
                f"{h4.id} took no 20 steps in a world of three: {newcomer.err[-5:]}")
    final = ranks[:2] + [newcomer]
    joined = re.search(r"^world epoch \d+: 3 hosts, 3 ranks, rank \d, from step (\d+)",
                       "\n".join(newcomer.lines), re.M)
    fails.check(joined is not None and int(joined.group(1)) > at_shrink,
                f"{h4.id} did not start from the job's step (after {at_shrink}): "
                f"{newcomer.lines[:3]}")
    # A step all three passed, 20 after the join: the same parameters.
    start = int(joined.group(1)) if joined else 0
    common = (start + 20 + DIGEST - 1) // DIGEST * DIGEST
    for r in final:
        fails.check(r.wait_for(lambda r=r: common in r.digests(), 120),
                    f"{r.name} did not reach step {common}: {''.join(r.err[-20:])}")
    digests = {r.name: r.digests().get(common) for r in final}
    fails.check(len(set(digests.values())) == 1 and None not in digests.values(),
                f"the ranks hold different parameters at step {common}: {digests}")
    for r in final:
        fails.check(r.proc.poll() is None,
                    f"{r.name} exited {r.proc.returncode}: {''.join(r.err[-20:])}")
        if r is not newcomer:
            text = "\n".join(r.lines)
            sizes = [int(m) for m in re.findall(r"^world epoch \d+: \d+ hosts, (\d+) ranks", text,
                                                re.M)]
            # 3, then 2, then 3 (a first world of two may form before the
            # third host's rank connects).
            it = iter(sizes)
            fails.check(all(n in it for n in (3, 2, 3)) and sizes[-1] == 3,
                        f"{r.name}: worlds {sizes}, not 3, 2, 3")
    # The loss went on falling: the survivors' first steps, the steps in the
    # world of two, and the last steps, each lower than the one before.
    s = ranks[0].steps()
    first = sum(l for _, l in s[:20]) / 20
    two = [l for _, l in ranks[0].steps(world=2)]
    mid = sum(two) / max(len(two), 1)
    last = sum(l for _, l in s[-20:]) / 20
    print(f"loss: first 20 steps {first:.4f}, in the world of two {mid:.4f}, last 20 {last:.4f}; "
          f"kill to 20 steps on two hosts {shrink_s:.1f} s; {h4.id} joined at step "
          f"{joined.group(1) if joined else '?'}")
    fails.check(first > mid > last, f"the loss did not keep falling: {first} {mid} {last}")
    if fails.items:
        for h in range(len(bed.hosts)):
            print(f"--- {bed.hosts[h].id}\n{bed.daemon_log(h)[-4000:]}")
    for r in ranks + [newcomer]:
        if r.proc.poll() is None:
            r.proc.kill()
fails.finish()
