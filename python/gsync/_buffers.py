# SPDX-License-Identifier: Apache-2.0
"""A bucket's memory that the daemon reduces in place: a block of the
session's shared arena (host memory) or of GPU memory shared with the
daemon, each seen as a flat torch tensor. Used by gsync.torch's DDP hook and
by gsync.torch_dp's DataParallel; imports neither."""
import ctypes

import torch

from gsync._cuda_memory import device_bytes
from gsync.comm import Comm


class ArenaBuffer:
    """One bucket's block of the shared arena, seen as a flat torch tensor."""

    def __init__(self, comm: Comm, numel: int, dtype: torch.dtype):
        elem = torch.tensor([], dtype=dtype).element_size()
        self.nbytes = numel * elem
        self.addr = comm.alloc(max(self.nbytes, 1))
        self.comm, self.numel, self.dtype = comm, numel, dtype
        raw = (ctypes.c_char * max(self.nbytes, 1)).from_address(self.addr)
        # frombuffer keeps `raw` referenced; the memory itself lives as long
        # as the session's mapping (see Comm).
        self.tensor = torch.frombuffer(raw, dtype=dtype, count=numel)

    def free(self) -> None:
        """Gives the block back to the arena (the tensor must not be used
        after)."""
        if self.addr:
            self.comm.free(self.addr)
            self.addr = 0


class DeviceBuffer:
    """One bucket's block of GPU memory shared with the daemon
    (gsync_alloc_device), seen as a flat CUDA tensor on `device`."""

    def __init__(self, comm: Comm, numel: int, dtype: torch.dtype, device: torch.device):
        elem = torch.tensor([], dtype=dtype).element_size()
        self.nbytes = numel * elem
        with torch.cuda.device(device):
            self.addr = comm.alloc_device(max(self.nbytes, 1))
        self.comm, self.numel, self.dtype = comm, numel, dtype
        # Bytes first, then the dtype: the array interface has no bfloat16.
        # The memory lives until free() and the daemon's last op.
        raw = device_bytes(self.addr, max(self.nbytes, 1), device)
        self.tensor = raw[:self.nbytes].view(dtype)

    def free(self) -> None:
        """Gives the memory back (the tensor must not be used after)."""
        if self.addr:
            # DDP's copy of the last result out of it may still be queued.
            torch.cuda.current_stream(self.tensor.device).synchronize()
            self.comm.free_device(self.addr)
            self.addr = 0
