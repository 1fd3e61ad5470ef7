# SPDX-License-Identifier: Apache-2.0
"""A DDP communication hook that hands gradient buckets to gsyncd.

Switching a DDP script to gsync is two lines (docs/pytorch.md):

    state = gsync.torch.init(job="my-run")
    model.register_comm_hook(state, gsync.torch.allreduce_hook)

or, faster (no copy of the gradients at all: they live in the arena),
gsync.torch.DataParallel(model, state) in place of DDP (torch_dp.py).

DDP calls the hook once per gradient bucket during backward. The hook copies
the bucket into a buffer of the shared arena that belongs to that bucket,
submits an asynchronous GSYNC_AVG allreduce of it, and returns a
torch.futures.Future at once, so backward goes on computing the next buckets
while gsyncd reduces this one. A background thread (the completer) sleeps on
gsync_completion_fd, collects finished requests and completes their futures
with the reduced arena buffer; DDP copies that into the parameters' .grad as
it would a gloo result. A failed op completes its future with a GsyncError
carrying gsync's text, which DDP re-raises from loss.backward().

CUDA buckets (a model on a GPU) go the same way with GPU memory from
gsync_alloc_device in place of the arena: the hook copies the bucket into
it on the GPU, and the daemon averages it there (docs/gpu.md); the future
is a CUDA future of that tensor.

Ops are matched across ranks by (key, step): key = key_base + bucket.index(),
step = how many times this model has handed that bucket before, i.e. the
model's step counter kept per bucket, so the order in which ranks hand their
buckets cannot shift it.
"""
import atexit
import os
import select
import threading
import time
import ctypes
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple, Union

import torch
import torch.distributed as dist

from gsync import _lib
from gsync._buffers import ArenaBuffer, DeviceBuffer
from gsync._lib import GsyncError
from gsync._torch_common import DTYPES as _DTYPES, pick as _pick
from gsync.comm import Comm, Request
# The parameter server's optimizer (docs/parameter-server.md), data parallel
# training with the gradients in the arena, elastic jobs: modules of their
# own, which import nothing from this one.
from gsync.torch_dp import DataParallel
from gsync.torch_elastic import ElasticDataParallel, elastic
from gsync.torch_ps import LeasedBatchSampler, PSOptimizer

__all__ = ["DataParallel", "ElasticDataParallel", "GsyncError", "GsyncState",
           "LeasedBatchSampler", "PSOptimizer", "allreduce_hook", "elastic", "init"]


# How long the completer sleeps on the doorbell before it looks again
# anyway: the library notices a daemon that died (its socket hung up) only
# when asked, so this bounds how late such a failure surfaces.
_POLL_SLICE_MS = 50


@dataclass
class _Pending:
    req: Request
    fut: torch.futures.Future
    result: torch.Tensor
    submitted: float
    deadline: Optional[float]
    trace: Optional[dict] = None  # the bucket's timestamps, when tracing


class _Completer:
    """Completes the futures of submitted requests from one background thread.

    Why a thread on the completion fd rather than gsync_wait per request:
    buckets may complete in any order (ranks hand them in different orders,
    hosts finish at different times), and one poll() on the doorbell covers
    all of them. ctypes releases the GIL in poll() and in gsync_test, so the
    training thread keeps running while this one sleeps.
    """

    def __init__(self, comm: Comm, grace_s: Optional[float], skip_anomalies: bool = False):
        self._comm = comm
        self._fd = comm.completion_fd()
        self._grace_s = grace_s
        # The anomaly guard's "skip" policy: a bucket the daemons found
        # anomalous completes with zeros and is remembered, so that
        # GsyncState.should_step() says to skip the step (on every rank alike).
        self.skip_anomalies = skip_anomalies
        self.anomalies: List[str] = []
        self.anomalies_seen = 0
        self._cv = threading.Condition()
        self._pending: List[_Pending] = []
        self._finishing = 0  # taken off _pending, futures not yet completed
        self._stopping = False
        self.completed = 0
        self.inflight_s = 0.0  # sum over requests of submit -> future completed
        self._thread = threading.Thread(target=self._run, name="gsync-completer", daemon=True)
        self._thread.start()

    def add(self, req: Request, fut: torch.futures.Future, result: torch.Tensor,
            trace: Optional[dict] = None) -> None:
        now = time.monotonic()
        deadline = now + self._grace_s if self._grace_s is not None else None
        with self._cv:
            self._pending.append(_Pending(req, fut, result, now, deadline, trace))
            self._cv.notify()

    def _run(self) -> None:
        poller = select.poll()
        poller.register(self._fd, select.POLLIN)
        while True:
            with self._cv:
                while not self._pending and not self._stopping:
                    self._cv.wait()
                if self._stopping:
                    batch, self._pending = self._pending, []
                    for p in batch:
                        self._finish(p, _lib.ERR_CLOSED, GsyncError(
                            _lib.ERR_CLOSED, f"gsync: job {self._comm.job} rank "
                            f"{self._comm.rank}: key {p.req.key} step {p.req.step} abandoned: "
                            "the hook state was closed"))
                    return
                batch = list(self._pending)
            done = []
            now = time.monotonic()
            for p in batch:
                # gsync_test clears the doorbell before it looks at the ring,
                # so a completion that lands after this look rings it again
                # and the poll below returns.
                rc = p.req.test()
                if rc != _lib.ERR_AGAIN:
                    done.append((p, rc, None))
                elif p.deadline is not None and now > p.deadline:
                    done.append((p, _lib.ERR_TIMEOUT, GsyncError(
                        _lib.ERR_TIMEOUT,
                        f"gsync: job {self._comm.job} rank {self._comm.rank}: allreduce key "
                        f"{p.req.key} step {p.req.step}: no completion from gsyncd "
                        f"({self._comm.socket or 'default socket'}) within "
                        f"{self._grace_s:.1f} s, well past the op timeout")))
            if done:
                with self._cv:
                    finished = {id(p) for p, _, _ in done}
                    self._pending = [p for p in self._pending if id(p) not in finished]
                    self._finishing += len(done)
                for p, rc, err in done:
                    self._finish(p, rc, err)
                with self._cv:
                    self._finishing -= len(done)
                    self._cv.notify_all()
                continue
            poller.poll(_POLL_SLICE_MS)

    def quiesce(self, timeout_s: float = 10.0) -> bool:
        """Waits until every request handed over is finished: its future
        completed and its trace (if any) written. A future's waiter may wake
        before the thread that completed it has returned; whoever reads the
        traces after the last step must wait for that thread first."""
        deadline = time.monotonic() + timeout_s
        with self._cv:
            while self._pending or self._finishing:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cv.wait(left)
        return True

    def _finish(self, p: _Pending, rc: int, err: Optional[GsyncError]) -> None:
        if p.trace is not None:
            p.trace["completed_ns"] = time.monotonic_ns()  # the completer saw it
        if rc == 0:
            p.req.free()
            self.completed += 1
            self.inflight_s += time.monotonic() - p.submitted
            p.fut.set_result(p.result)
            if p.trace is not None:
                p.trace["future_ns"] = time.monotonic_ns()  # DDP's callbacks ran
            return
        if rc == _lib.ERR_ANOMALY and self.skip_anomalies and err is None:
            text = str(p.req.error(rc))
            p.req.free()
            with self._cv:
                self.anomalies.append(text)
                self.anomalies_seen += 1
            p.result.zero_()
            p.fut.set_result(p.result)
            return
        if err is None:
            # Say which of this rank's ops failed: the daemon's text names the
            # cause (and, for a rank on another host, not always the op).
            text = str(p.req.error(rc)).split(": ", 1)[-1]
            err = GsyncError(rc, f"job {self._comm.job} rank {self._comm.rank}: allreduce of "
                                 f"bucket key {p.req.key} step {p.req.step} failed: {text}")
        # Freeing a pending request abandons it; the library drops its
        # completion when it comes.
        p.req.free()
        p.fut.set_exception(err)

    def stop(self) -> None:
        with self._cv:
            self._stopping = True
            self._cv.notify()
        self._thread.join(timeout=5)


@dataclass
class _Stats:
    buckets: int = 0
    copy_in_s: float = 0.0
    copy_in_bytes: int = 0
    submit_s: float = 0.0


class GsyncState:
    """What allreduce_hook needs: the session, the completer, per-bucket
    arena buffers and step counters. One per DDP model (models sharing a comm
    take different key_base values, see for_model)."""

    def __init__(self, comm: Comm, completer: _Completer, key_base: int = 0,
                 zero_copy: bool = True):
        self.comm = comm
        self.completer = completer
        self.key_base = key_base
        self.zero_copy = zero_copy
        self.stats = _Stats()
        # Set to a list to trace: one dict per bucket handed over, with
        # CLOCK_MONOTONIC ns (the daemon's clock, gsyncctl ops) of the hook
        # call, the copy into the arena, the submit, the completion seen by
        # the completer and the future completed (docs/performance.md,
        # "Where a DDP step goes").
        self.trace: Optional[List[dict]] = None
        self._steps: Dict[int, int] = {}
        self._buffers: Dict[int, Union[ArenaBuffer, DeviceBuffer]] = {}
        self._children: List["GsyncState"] = []
        self._closed = False

    def should_step(self) -> bool:
        """After loss.backward(): False when the daemons found a bucket of this
        backward anomalous (the anomaly guard, policy "skip"): skip
        optimizer.step(), as every other rank does. Clears what it saw."""
        with self.completer._cv:
            seen, self.completer.anomalies = self.completer.anomalies, []
        return not seen

    @property
    def world_size(self) -> int:
        return self.comm.world_size

    @property
    def rank(self) -> int:
        return self.comm.rank

    def for_model(self, key_base: int) -> "GsyncState":
        """A state for another DDP model over the same session; its bucket
        keys start at key_base (pick ranges that do not overlap, e.g. 1 << 32)."""
        child = GsyncState(self.comm, self.completer, key_base, self.zero_copy)
        self._children.append(child)
        return child

    def _buffer(self, index: int, tensor: torch.Tensor) -> Union[ArenaBuffer, DeviceBuffer]:
        cuda = tensor.device.type == "cuda"
        buf = self._buffers.get(index)
        if (buf is not None and buf.numel == tensor.numel() and buf.dtype == tensor.dtype
                and isinstance(buf, DeviceBuffer) == cuda):
            return buf
        # DDP rebuilds its buckets after the first step (in the order the
        # gradients became ready), so sizes change once. The old block's
        # result has been copied out by DDP before the next backward starts.
        if buf is not None:
            buf.free()
            del self._buffers[index]
        if cuda:
            buf = DeviceBuffer(self.comm, tensor.numel(), tensor.dtype, tensor.device)
        else:
            buf = ArenaBuffer(self.comm, tensor.numel(), tensor.dtype)
        self._buffers[index] = buf
        return buf

    def submit(self, tensor: torch.Tensor, index: int) -> torch.futures.Future:
        """Averages `tensor` over all ranks as bucket `index`; returns a Future
        of the result. Failures, at submit or later, complete the Future with
        a GsyncError instead of raising here."""
        cuda = tensor.device.type == "cuda"
        # A future of CUDA tensors says their device (torch records the
        # completing thread's stream and the consumer waits on it).
        fut: torch.futures.Future = (torch.futures.Future(devices=[tensor.device]) if cuda
                                     else torch.futures.Future())
        t_hook = time.monotonic_ns()
        step = self._steps.get(index, 0)
        self._steps[index] = step + 1
        key = self.key_base + index
        try:
            dtype = _DTYPES.get(tensor.dtype)
            if (dtype is None or tensor.device.type not in ("cpu", "cuda")
                    or not tensor.is_contiguous()
                    or (cuda and tensor.dtype == torch.float64)):
                raise GsyncError(_lib.ERR_UNSUPPORTED,
                                 f"gsync: bucket {index}: need a contiguous tensor of "
                                 f"float32/float16/bfloat16 (or float64 on the CPU), got "
                                 f"{tensor.dtype} on {tensor.device}")
            t0 = time.perf_counter()
            if cuda:
                # Bucket -> gsync's GPU memory on the GPU, then wait for the
                # copy: the daemon reads the memory on a stream of its own.
                # The daemon reduces it there, in place, and DDP copies the
                # result into .grad on the GPU.
                buf = self._buffer(index, tensor)
                buf.tensor.copy_(tensor)
                torch.cuda.current_stream(tensor.device).synchronize()
                t1 = time.perf_counter()
                t_copied = time.monotonic_ns()
                req = self.comm.allreduce(key, step, buf.addr, tensor.numel(), dtype, _lib.AVG)
                result = buf.tensor
            elif self.zero_copy:
                buf = self._buffer(index, tensor)
                # The one copy gsync adds to DDP's path: bucket -> arena. The
                # daemon reduces the arena block in place and DDP copies the
                # result into .grad as it does with any backend's result.
                buf.tensor.copy_(tensor)
                t1 = time.perf_counter()
                t_copied = time.monotonic_ns()
                req = self.comm.allreduce(key, step, buf.addr, tensor.numel(), dtype, _lib.AVG)
                result = buf.tensor
            else:
                # Staged: libgsync copies the bucket into the arena at submit
                # and the result back out in gsync_test, on the completer.
                t1 = t0
                t_copied = time.monotonic_ns()
                req = self.comm.allreduce(key, step, tensor.data_ptr(), tensor.numel(), dtype,
                                          _lib.AVG)
                result = tensor
            t2 = time.perf_counter()
        except GsyncError as e:
            fut.set_exception(e)
            return fut
        self.stats.buckets += 1
        self.stats.copy_in_s += t1 - t0
        self.stats.copy_in_bytes += tensor.numel() * tensor.element_size() if self.zero_copy else 0
        self.stats.submit_s += t2 - t1
        trace = None
        if self.trace is not None:
            t_end = time.monotonic_ns()
            trace = {"key": key, "step": step, "bytes": tensor.numel() * tensor.element_size(),
                     "hook_ns": t_hook, "copied_ns": t_copied,
                     "submitted_ns": t_end}
            self.trace.append(trace)
        self.completer.add(req, fut, result, trace)
        return fut

    def close(self) -> None:
        """Stops the completer (pending futures fail with GsyncError) and closes
        the session. Arena tensors handed out before must not be used after."""
        if self._closed:
            return
        self._closed = True
        self.completer.stop()
        for state in (self, *self._children):
            # GPU blocks go back to the driver (the daemon's mappings go
            # with the session); arena blocks go with the mapping.
            for buf in state._buffers.values():
                if isinstance(buf, DeviceBuffer):
                    buf.free()
            state._buffers.clear()
            state._closed = True
        self.comm.close()


# DDP checks these annotations by identity (DistributedDataParallel.
# _check_comm_hook): they must be real objects, not strings, so this module
# does not use `from __future__ import annotations`.
def allreduce_hook(state: GsyncState,
                   bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP communication hook: the average of this bucket over all ranks, by gsyncd.

    Use: model.register_comm_hook(state, allreduce_hook). DDP hands buckets
    not divided by the world size when a hook is registered; GSYNC_AVG does
    the division in the daemon.
    """
    # The reducer reads the future from C++. torch 1.13's Future.set_exception
    # stores the exception as the future's *value* (raised only by a Python
    # .wait()/.value()), so C++ would fail to cast it to a Tensor ("Unable to
    # cast ... to Tensor"). Unwrapping it in a then() callback puts the future
    # DDP sees into a real error state: loss.backward() raises with gsync's text.
    return state.submit(bucket.buffer(), bucket.index()).then(_unwrap)


def _unwrap(fut: torch.futures.Future) -> torch.Tensor:
    return fut.value()


def init(job: Optional[str] = None, socket: Optional[str] = None, *,
         world_size: Optional[int] = None, rank: Optional[int] = None,
         local_rank: Optional[int] = None, local_world_size: Optional[int] = None,
         timeout_ms: int = 0, arena_bytes: int = 0, key_base: int = 0,
         zero_copy: bool = True, compression: Optional[str] = None,
         anomaly_guard: Optional[str] = None, anomaly_sigmas: int = 6,
         anomaly_window: int = 128, reproducible: bool = False) -> GsyncState:
    """Connects this rank to its host's gsyncd and returns the hook state.

    job: the job name shared by all ranks (default $GSYNC_JOB).
    socket: the daemon's client socket (default $GSYNC_SOCKET, then
        /run/gsync/gsyncd.sock).
    world_size, rank, local_rank, local_world_size: default to WORLD_SIZE,
        RANK, LOCAL_RANK, LOCAL_WORLD_SIZE (as torchrun sets them), then to
        torch.distributed's rank and world size when it is initialized; the
        local ones then default to a single host (local = global).
    timeout_ms: per-op timeout (0: the daemon's). A rank that dies is
        reported at once; a rank that hangs, after this long.
    arena_bytes: the shared arena (0: the daemon's default, 1 GiB); it must
        hold one copy of all gradient buckets.
    zero_copy: True: per-bucket arena buffers (one copy in, no copy out);
        False: hand DDP's bucket to libgsync to stage (one copy each way).
    compression: how fp32 gradients cross between hosts: "int8", "fp16",
        "bf16", "topk:0.01", optionally "@cross_host" and ",noef"
        (docs/compression.md); default $GSYNC_COMPRESSION, else none. The
        daemons keep the error feedback, so the hook needs nothing more.
    anomaly_guard: "skip" or "fail" (docs/fault-tolerance.md): the daemons
        check every reduced bucket for NaN/Inf and for a norm anomaly_sigmas
        deviations above its mean over anomaly_window steps. "skip": such a
        bucket completes with zeros and state.should_step() returns False on
        every rank; "fail": loss.backward() raises GsyncError (ERR_ANOMALY).
    reproducible: every bucket's average has the same bits whatever the
        layout - hosts, ranks per host, algorithm, chunk size - so a run
        replays exactly on another cluster shape (docs/reproducibility.md);
        every rank says the same. Costs a second op per large bucket, and
        buckets are then not compressed.
    """
    if anomaly_guard not in (None, "skip", "fail"):
        raise ValueError(f"gsync.torch.init: anomaly_guard '{anomaly_guard}' is not skip or fail")
    job = job or os.environ.get("GSYNC_JOB")
    if not job:
        raise ValueError("gsync.torch.init: job is required (argument or $GSYNC_JOB)")
    pg = dist.is_available() and dist.is_initialized()
    world_size = _pick(world_size, "WORLD_SIZE", dist.get_world_size() if pg else 1)
    rank = _pick(rank, "RANK", dist.get_rank() if pg else 0)
    local_rank = _pick(local_rank, "LOCAL_RANK", rank)
    local_world_size = _pick(local_world_size, "LOCAL_WORLD_SIZE", world_size)
    comm = Comm(job, world_size, rank, local_rank, local_world_size, socket=socket,
                arena_bytes=arena_bytes, timeout_ms=timeout_ms, compression=compression,
                guard=(anomaly_sigmas, anomaly_window) if anomaly_guard else None,
                reproducible=reproducible)
    # Our own bound on a request, past the daemon's: only when a timeout is
    # known, and generously, since the daemon's own error text says more.
    grace = (2 * timeout_ms / 1000.0 + 10.0) if timeout_ms > 0 else None
    state = GsyncState(comm, _Completer(comm, grace, skip_anomalies=anomaly_guard == "skip"),
                       key_base=key_base, zero_copy=zero_copy)
    atexit.register(state.close)
    return state


def bucket_layout(state: GsyncState) -> List[Tuple[int, int]]:
    """(bucket index, elements) of the arena buffers held, for reports."""
    return sorted((i, b.numel) for i, b in state._buffers.items())
