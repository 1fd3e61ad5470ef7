# SPDX-License-Identifier: Apache-2.0
"""The installed Python binding against an installed gsyncd
(test_packages.sh): run with no PYTHONPATH, two ranks of one job on this
host (the second a child process) sum 1024 floats each; every element
checked. Exits 0 when both ranks saw the right sum."""
import ctypes
import os
import sys

import gsync
from gsync import _lib

COUNT = 1024


def rank_main(rank: int) -> int:
    comm = gsync.Comm("packaged-py", world_size=2, rank=rank, local_rank=rank, local_size=2)
    addr = comm.alloc(COUNT * 4)
    x = (ctypes.c_float * COUNT).from_address(addr)
    for i in range(COUNT):
        x[i] = float(i % 31) * (rank + 1)
    req = comm.allreduce(1, 0, addr, COUNT, _lib.FLOAT32, _lib.SUM)
    if req.wait(30000) != 0:
        print(f"rank {rank}: allreduce failed", file=sys.stderr)
        return 1
    req.free()
    bad = [i for i in range(COUNT) if x[i] != float(i % 31) * 3]
    if bad:
        print(f"rank {rank}: element {bad[0]} is {x[bad[0]]}", file=sys.stderr)
        return 1
    return 0


def main() -> int:
    if "PYTHONPATH" in os.environ:
        print("allreduce.py: PYTHONPATH is set; this checks the installed package", file=sys.stderr)
        return 1
    pid = os.fork()
    if pid == 0:
        os._exit(rank_main(1))
    rc = rank_main(0)
    _, status = os.waitpid(pid, 0)
    if not os.WIFEXITED(status) or os.WEXITSTATUS(status) != 0:
        rc = 1
    if rc == 0:
        print(f"allreduce.py: 2 ranks summed right; gsync from {gsync.__file__}, "
              f"libgsync {gsync.version()}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
