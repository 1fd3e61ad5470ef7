# SPDX-License-Identifier: Apache-2.0
"""Drives the `gsync-testbed up` CLI (docs/testbed.md) from Python: starts a
multi-host test bed, reads back every host's client socket, tears it down.

The CLI is used rather than reimplementing the bed so that Python tests and
examples run on exactly the network and daemons the C++ tests use.
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Sequence

_REPO = Path(__file__).resolve().parent.parent.parent


@dataclass
class Host:
    id: str
    rack: str
    address: str
    netns: str  # "-" in loopback mode
    socket: str
    admin_socket: str
    cpus: str = "all"  # the host's CPUs with --pin, "all" without


# gsync-testbed's table: header words -> Host fields. Columns are found by
# where each header starts, so a column added later does not shift these.
_COLUMNS = {"host": "id", "rack": "rack", "address:port": "address", "netns": "netns",
            "cpus": "cpus", "client socket": "socket", "admin socket": "admin_socket"}


def find_tool(env: str, build_rel: str, name: str) -> Optional[str]:
    """$env, else the repository's build tree, else PATH."""
    v = os.environ.get(env)
    if v:
        return v
    p = _REPO / "build" / build_rel
    if p.exists():
        return str(p)
    return shutil.which(name)


class Testbed:
    """`gsync-testbed up --hosts N --racks R [-- daemon args]` in the background."""

    def __init__(self, hosts: int = 2, racks: int = 1, daemon_args: Sequence[str] = (),
                 binary: Optional[str] = None, gsyncd: Optional[str] = None,
                 start_timeout_s: float = 60.0, uplink_mbit: int = 0, etcd: bool = False,
                 etcd_lease_ttl_s: int = 2, etcd_members: int = 1):
        binary = binary or find_tool("GSYNC_TESTBED", "tools/testbed/gsync-testbed",
                                     "gsync-testbed")
        if not binary:
            raise FileNotFoundError("gsync-testbed not found: set $GSYNC_TESTBED or build it")
        cmd = [binary, "up", "--hosts", str(hosts), "--racks", str(racks)]
        if uplink_mbit:
            cmd += ["--uplink-mbit", str(uplink_mbit)]
        if etcd:
            # Membership on a real etcd: hosts join and leave while it runs
            # (add_host, remove_host).
            cmd += ["--etcd", "--etcd-lease-ttl-s", str(etcd_lease_ttl_s), "--etcd-members",
                    str(etcd_members)]
        self.binary = binary
        gsyncd = gsyncd or os.environ.get("GSYNCD")
        if gsyncd:
            cmd += ["--gsyncd", gsyncd]
        if daemon_args:
            cmd += ["--", *daemon_args]
        self.command = cmd
        # Own session: a Ctrl-C in the terminal reaches us, and we stop the
        # bed in order (SIGTERM), rather than the bed being killed midway.
        self._proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True, start_new_session=True)
        self.hosts: List[Host] = []
        self.output: List[str] = []
        self.cluster_file = ""
        self.key_file = ""  # the bed's cluster key, every daemon started with it
        deadline = time.monotonic() + start_timeout_s
        columns = []  # (start, Host field) from the header line
        for line in self._proc.stdout:
            self.output.append(line)
            if line.startswith("host ") and "client socket" in line:
                columns = [(m.start(), _COLUMNS.get(m.group(), ""))
                           for m in re.finditer(r"\S+(?: \S+)*", line)]
            elif columns and re.match(r"^h\d+\s", line):
                bounds = [c[0] for c in columns] + [len(line)]
                cells = {field: line[bounds[i]:bounds[i + 1]].strip()
                         for i, (_, field) in enumerate(columns) if field}
                self.hosts.append(Host(**cells))
            if line.startswith("cluster file:"):
                self.cluster_file = line.split(":", 1)[1].strip()
            if line.startswith("cluster key:"):
                self.key_file = line.split(":", 1)[1].strip()
            if line.startswith("Ctrl-C tears"):
                break
            if time.monotonic() > deadline:
                break
        if len(self.hosts) != hosts:
            self.close()
            raise RuntimeError(f"{' '.join(cmd)} did not come up:\n" + "".join(self.output))

    @property
    def dir(self) -> str:
        """The bed's folder (where its key, cluster file and hosts are)."""
        return str(Path(self.key_file).parent)

    def add_host(self, rack: int = 1) -> Host:
        """An etcd bed: a new host joins (gsync-testbed add-host)."""
        out = subprocess.run([self.binary, "add-host", "--rack", str(rack), "--bed", self.dir],
                             capture_output=True, text=True, timeout=60)
        m = re.search(r"ok: (h\d+) in rack (\S+) at ([^,\s]+), client socket ([^,\s]+), "
                      r"admin socket (\S+)", out.stdout + out.stderr)
        if out.returncode != 0 or not m:
            raise RuntimeError(f"add-host failed:\n{out.stdout}{out.stderr}")
        host = Host(id=m.group(1), rack=m.group(2), address=m.group(3), netns="-",
                    socket=m.group(4), admin_socket=m.group(5))
        self.hosts.append(host)
        return host

    def remove_host(self, host_id: str, kill: bool = False) -> None:
        """An etcd bed: a host leaves (gsync-testbed remove-host [--kill])."""
        cmd = [self.binary, "remove-host", host_id, "--bed", self.dir]
        if kill:
            cmd.append("--kill")
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        if out.returncode != 0:
            raise RuntimeError(f"remove-host failed:\n{out.stdout}{out.stderr}")

    @property
    def sockets(self) -> List[str]:
        return [h.socket for h in self.hosts]

    def daemon_log(self, h: int) -> str:
        path = Path(self.hosts[h].socket).parent / "gsyncd.log"
        try:
            return path.read_text(errors="replace")
        except OSError as e:
            return f"({path}: {e})"

    def close(self) -> None:
        if self._proc.poll() is None:
            self._proc.send_signal(signal.SIGTERM)
            try:
                self._proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        if self._proc.stdout:
            self._proc.stdout.close()

    def __enter__(self) -> "Testbed":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
