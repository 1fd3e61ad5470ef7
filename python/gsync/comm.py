# SPDX-License-Identifier: Apache-2.0
"""A Python view of one libgsync session: connect, arena memory, allreduce."""
from __future__ import annotations

import ctypes
from typing import NamedTuple, Optional

from gsync import _lib
from gsync._lib import GsyncError


def parse_sync(text: str) -> tuple:
    """'bsp', 'asp', 'ssp:3' -> (gsync_sync_mode, staleness)."""
    if text == "bsp":
        return _lib.SYNC_BSP, 0
    if text == "asp":
        return _lib.SYNC_ASP, 0
    if text.startswith("ssp:") and text[4:].isdigit():
        return _lib.SYNC_SSP, int(text[4:])
    raise GsyncError(_lib.ERR_INVALID, f"sync mode '{text}' is not bsp, asp or ssp:N")


class Request:
    """One asynchronous operation (gsync_request_t). Free it exactly once."""

    __slots__ = ("_ptr", "key", "step")

    def __init__(self, ptr: int, key: int, step: int):
        self._ptr = ptr
        self.key = key
        self.step = step

    def test(self) -> int:
        """0 when done, ERR_AGAIN while pending, another negative code on failure."""
        return _lib.lib().gsync_test(self._ptr)

    def wait(self, timeout_ms: int = -1) -> int:
        return _lib.lib().gsync_wait(self._ptr, timeout_ms)

    def error(self, code: int) -> GsyncError:
        """The exception for a failed request, carrying gsync's own text."""
        text = _lib.lib().gsync_request_error(self._ptr).decode(errors="replace")
        if not text:
            text = _lib.lib().gsync_strerror(code).decode(errors="replace")
        return GsyncError(code, text)

    def resume_clock(self) -> int:
        """A completed declaration's resume clock: 0 for a fresh start, c when
        its buffer holds the parameters of step c from a checkpoint."""
        c = ctypes.c_uint64()
        _lib.check(_lib.lib().gsync_ps_resume_clock(self._ptr, ctypes.byref(c)))
        return c.value

    def rolled_back(self) -> Optional[str]:
        """A completed push or push_pull: None when its clock was applied, or
        the anomaly guard's text (job, key, clock, norm, whose gradient held
        the first NaN or Inf) when every server rolled the clock back."""
        why = ctypes.c_char_p()
        rc = _lib.lib().gsync_ps_rolled_back(self._ptr, ctypes.byref(why))
        _lib.check(rc)
        return (why.value or b"").decode(errors="replace") if rc == 1 else None

    def lease_batch(self) -> int:
        """A completed lease's batch id, or _lib.LEASE_WAIT / _lib.LEASE_END."""
        c = ctypes.c_uint64()
        _lib.check(_lib.lib().gsync_lease_batch(self._ptr, ctypes.byref(c)))
        return c.value

    def free(self) -> None:
        if self._ptr:
            _lib.lib().gsync_request_free(self._ptr)
            self._ptr = None


class World(NamedTuple):
    """An elastic job's world as this rank is in it (gsync_world_t)."""
    epoch: int
    world_size: int
    rank: int
    local_rank: int
    local_size: int
    hosts: int


class Comm:
    """A session with the host's gsyncd (gsync_comm_t).

    Buffers from alloc() live in the shared arena and are reduced in place by
    the daemon; they stay valid until close(), which unmaps them once the last
    request is freed, so nothing may keep a view of them past close().
    """

    def __init__(self, job: str, world_size: int, rank: int, local_rank: int,
                 local_size: int, socket: Optional[str] = None, arena_bytes: int = 0,
                 timeout_ms: int = 0, compression: Optional[str] = None,
                 sync: str = "bsp", guard: Optional[tuple] = None,
                 algorithm: Optional[str] = None, chunk_bytes: int = 0,
                 min_hosts: int = 0, max_hosts: int = 0, reproducible: bool = False):
        """compression: the job's codec between hosts, as text ("int8",
        "topk:0.01@cross_host", "bf16,noef"; docs/compression.md); None
        leaves it to $GSYNC_COMPRESSION, else none. sync: the job's mode for
        its parameter-server ops, "bsp", "asp" or "ssp:S"
        (docs/parameter-server.md). guard: (sigmas, window) turns the job's
        anomaly guard on (docs/fault-tolerance.md); None leaves it off.
        algorithm, chunk_bytes: the job's cross-host plan ("ring", "hier",
        "direct", "tree", "doubling"; None: the daemon chooses; 0: chunks per
        tensor; docs/algorithms.md, "Choosing per job"). min_hosts > 0: an
        elastic job (docs/membership.md, "Elastic jobs"): world_size and rank
        are 0, and world() tells them once the daemons formed a world.
        reproducible: every float sum and average this rank submits gives
        the same bits on any layout (docs/reproducibility.md); every rank
        of the job says the same. $GSYNC_REPRODUCIBLE overrides it."""
        L = _lib.lib()
        # gsync_config_init writes the library's whole struct: into room for
        # any size first, so that a newer library cannot write past ours.
        room = (ctypes.c_uint8 * 4096)()
        L.gsync_config_init(ctypes.cast(room, ctypes.POINTER(_lib.GsyncConfig)))
        cfg = _lib.GsyncConfig.from_buffer_copy(room)
        if cfg.struct_size != ctypes.sizeof(cfg):
            raise RuntimeError(f"libgsync's gsync_config_t is {cfg.struct_size} bytes but this "
                               f"binding's is {ctypes.sizeof(cfg)}: python/gsync and libgsync "
                               f"are of different versions")
        # Keep the encoded strings alive for the call: ctypes stores only the pointer.
        self._socket_b = socket.encode() if socket else None
        self._job_b = job.encode()
        cfg.socket_path = self._socket_b
        cfg.job_id = self._job_b
        cfg.world_size = world_size
        cfg.rank = rank
        cfg.local_rank = local_rank
        cfg.local_size = local_size
        cfg.arena_bytes = arena_bytes
        cfg.timeout_ms = timeout_ms
        cfg.sync_mode, cfg.staleness = parse_sync(sync)
        if guard is not None:
            cfg.anomaly_guard, cfg.anomaly_sigmas, cfg.anomaly_window = 1, guard[0], guard[1]
        self._algorithm_b = algorithm.encode() if algorithm else None
        cfg.algorithm = self._algorithm_b
        cfg.chunk_bytes = chunk_bytes
        cfg.min_hosts, cfg.max_hosts = min_hosts, max_hosts
        cfg.reproducible = 1 if reproducible else 0
        if compression is not None:
            _lib.check(L.gsync_compression_parse(compression.encode(),
                                                 ctypes.byref(cfg.compression)))
        handle = ctypes.c_void_p()
        _lib.check(L.gsync_connect(ctypes.byref(cfg), ctypes.byref(handle)))
        self._ptr: Optional[int] = handle.value
        self.job, self.world_size, self.rank = job, world_size, rank
        self.local_rank, self.local_size = local_rank, local_size
        self.socket = socket
        self.compression = compression

    @property
    def handle(self) -> int:
        if not self._ptr:
            raise GsyncError(_lib.ERR_CLOSED, f"job {self.job} rank {self.rank}: comm is closed")
        return self._ptr

    def alloc(self, nbytes: int) -> int:
        """An arena block of nbytes; returns its address."""
        out = ctypes.c_void_p()
        _lib.check(_lib.lib().gsync_alloc(self.handle, nbytes, ctypes.byref(out)))
        return out.value

    def free(self, addr: int) -> None:
        _lib.check(_lib.lib().gsync_free(self.handle, addr))

    def alloc_device(self, nbytes: int) -> int:
        """GPU memory on the current CUDA device that the daemon reduces in
        place (docs/gpu.md); returns its device address."""
        out = ctypes.c_void_p()
        _lib.check(_lib.lib().gsync_alloc_device(self.handle, nbytes, ctypes.byref(out)))
        return out.value

    def free_device(self, addr: int) -> None:
        _lib.check(_lib.lib().gsync_free_device(self.handle, addr))

    def arena_info(self) -> tuple:
        cap, free = ctypes.c_size_t(), ctypes.c_size_t()
        _lib.check(_lib.lib().gsync_arena_info(self.handle, ctypes.byref(cap), ctypes.byref(free)))
        return cap.value, free.value

    def allreduce(self, key: int, step: int, addr: int, count: int, dtype: int,
                  op: int = _lib.AVG, weight: float = 0.0) -> Request:
        """Submits an allreduce of `count` elements at `addr`; raises GsyncError."""
        req = ctypes.c_void_p()
        _lib.check(_lib.lib().gsync_allreduce(self.handle, key, step, addr, count, dtype, op,
                                              weight, ctypes.byref(req)))
        return Request(req.value, key, step)

    def broadcast(self, key: int, step: int, addr: int, count: int, dtype: int,
                  root: int) -> Request:
        """Submits a broadcast of `count` elements at `addr` from rank `root`."""
        req = ctypes.c_void_p()
        _lib.check(_lib.lib().gsync_broadcast(self.handle, key, step, addr, count, dtype, root,
                                              ctypes.byref(req)))
        return Request(req.value, key, step)

    def world(self, timeout_ms: int = -1) -> World:
        """The job's world now (gsync_world); for an elastic job it waits
        until one is formed with this host in it, and updates rank and
        world_size. Raises GsyncError (ERR_TIMEOUT while too few hosts are
        there, ERR_HOST_LOST once the job ended below min_hosts)."""
        w = _lib.GsyncWorld()
        w.struct_size = ctypes.sizeof(w)
        _lib.check(_lib.lib().gsync_world(self.handle, ctypes.byref(w), timeout_ms))
        self.world_size, self.rank = w.world_size, w.rank
        return World(w.epoch, w.world_size, w.rank, w.local_rank, w.local_size, w.hosts)

    # --- parameter server (docs/parameter-server.md)

    def ps_declare(self, key: int, addr: int, count: int, dtype: int, optimizer: int = _lib.OPT_SGD,
                   lr: float = 0.01, momentum: float = 0.0, weight_decay: float = 0.0,
                   betas: tuple = (0.9, 0.999), eps: float = 1e-8, checkpoint_clocks: int = 0,
                   checkpoint_ms: int = 0, resume: bool = True) -> Request:
        """Declares parameter `key` (every rank; rank 0's values at addr are the
        initial ones, and every rank's addr holds them once it completes).
        checkpoint_clocks / checkpoint_ms: the servers checkpoint it that often
        (docs/fault-tolerance.md); with resume, a declaration resumes from the
        newest checkpoint every host holds (Request.resume_clock)."""
        L = _lib.lib()
        o = _lib.GsyncPsOpts()
        L.gsync_ps_opts_init(ctypes.byref(o))
        o.optimizer, o.lr, o.momentum, o.weight_decay = optimizer, lr, momentum, weight_decay
        o.beta1, o.beta2, o.eps = betas[0], betas[1], eps
        o.checkpoint_clocks, o.checkpoint_ms, o.resume = checkpoint_clocks, checkpoint_ms, int(resume)
        req = ctypes.c_void_p()
        _lib.check(L.gsync_ps_declare(self.handle, key, addr, count, dtype, ctypes.byref(o),
                                      ctypes.byref(req)))
        return Request(req.value, key, (1 << 64) - 2)

    def _push_opts(self, weight: float, lr: float) -> "_lib.GsyncPushOpts":
        o = _lib.GsyncPushOpts()
        _lib.lib().gsync_push_opts_init(ctypes.byref(o))
        o.weight, o.lr = weight, lr
        return o

    def ps_push_pull(self, key: int, clock: int, addr: int, count: int, dtype: int,
                     weight: float = 1.0, lr: float = 0.0) -> Request:
        """The gradient of step `clock` at addr in; the parameters of step
        clock + 1 there when it completes."""
        o = self._push_opts(weight, lr)
        req = ctypes.c_void_p()
        _lib.check(_lib.lib().gsync_ps_push_pull(self.handle, key, clock, addr, count, dtype,
                                                 ctypes.byref(o), ctypes.byref(req)))
        return Request(req.value, key, clock)

    def ps_push(self, key: int, clock: int, addr: int, count: int, dtype: int,
                weight: float = 1.0, lr: float = 0.0) -> Request:
        o = self._push_opts(weight, lr)
        req = ctypes.c_void_p()
        _lib.check(_lib.lib().gsync_ps_push(self.handle, key, clock, addr, count, dtype,
                                            ctypes.byref(o), ctypes.byref(req)))
        return Request(req.value, key, clock)

    def ps_pull(self, key: int, clock: int, addr: int, count: int, dtype: int) -> Request:
        req = ctypes.c_void_p()
        _lib.check(_lib.lib().gsync_ps_pull(self.handle, key, clock, addr, count, dtype,
                                            ctypes.byref(req)))
        return Request(req.value, key, clock)

    def lease(self, epoch: int, batches: int, clock: int) -> Request:
        """The next batch of epoch `epoch` (of `batches`) for step `clock`
        (docs/fault-tolerance.md, "Batch leases"): Request.lease_batch."""
        req = ctypes.c_void_p()
        _lib.check(_lib.lib().gsync_lease(self.handle, epoch, batches, clock, ctypes.byref(req)))
        return Request(req.value, epoch, clock)

    def barrier(self, step: int, timeout_ms: int = -1) -> None:
        _lib.check(_lib.lib().gsync_barrier(self.handle, step, timeout_ms))

    def completion_fd(self) -> int:
        return _lib.check(_lib.lib().gsync_completion_fd(self.handle))

    def close(self) -> None:
        if self._ptr:
            ptr, self._ptr = self._ptr, None
            _lib.check(_lib.lib().gsync_close(ptr))

    def __enter__(self) -> "Comm":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
