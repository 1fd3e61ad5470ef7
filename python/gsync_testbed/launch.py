# SPDX-License-Identifier: Apache-2.0
"""Starts the ranks of a job on this machine the way torchrun would (RANK,
WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT), and
spreads them over gsync hosts: with H sockets and N ranks, host h gets ranks
h*N/H .. (h+1)*N/H-1 and GSYNC_SOCKET points at its daemon."""
from __future__ import annotations

import os
import socket as pysocket
import subprocess
from typing import Dict, List, Optional, Sequence


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (for MASTER_PORT)."""
    with pysocket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_env(rank: int, nproc: int, sockets: Sequence[str], master_port: int,
             master_addr: str = "127.0.0.1") -> Dict[str, str]:
    env = {"RANK": str(rank), "WORLD_SIZE": str(nproc), "MASTER_ADDR": master_addr,
           "MASTER_PORT": str(master_port)}
    hosts = max(1, len(sockets))
    if nproc % hosts:
        raise ValueError(f"{nproc} ranks do not spread evenly over {hosts} hosts")
    per_host = nproc // hosts
    env["LOCAL_RANK"] = str(rank % per_host)
    env["LOCAL_WORLD_SIZE"] = str(per_host)
    if sockets:
        env["GSYNC_SOCKET"] = sockets[rank // per_host]
    return env


def spawn_ranks(cmd: Sequence[str], nproc: int, sockets: Sequence[str] = (),
                master_port: Optional[int] = None, extra_env: Optional[Dict[str, str]] = None,
                capture: bool = False) -> List[subprocess.Popen]:
    """One process per rank running cmd; stdout/stderr piped when capture."""
    port = master_port or free_port()
    procs = []
    for r in range(nproc):
        env = dict(os.environ)
        env.update(extra_env or {})
        env.update(rank_env(r, nproc, sockets, port))
        out = subprocess.PIPE if capture else None
        procs.append(subprocess.Popen(list(cmd), env=env, stdout=out, stderr=out, text=True))
    return procs
