# SPDX-License-Identifier: Apache-2.0
"""gsync.torch.DataParallel: data-parallel training whose gradients live in
gsync's shared arena (docs/pytorch.md, "DataParallel: gradients in the
arena").

    state = gsync.torch.init(job="run")
    model = gsync.torch.DataParallel(model, state)
    ...
    opt.zero_grad()
    loss_fn(model(x), y).backward()   # gradients averaged over all ranks
    opt.step()

Why beside the DDP hook: DDP keeps each bucket in memory of its own, so a
hook must copy the bucket into the arena before gsyncd can reduce it, and
DDP copies gradients into its buckets and the result out of them again. Here
each parameter's .grad is a view into an arena block (as DDP's
gradient_as_bucket_view does with its own buckets): autograd accumulates
into the arena, a bucket is handed to gsyncd the moment its last gradient is
accumulated, gsyncd reduces it in place, and the result is .grad itself: no
copy anywhere on the rank. Measured in docs/performance.md ("Where a DDP
step goes").

A model on a GPU works the same way with GPU memory from gsync_alloc_device
in place of the arena: .grad are views into it, the daemon averages each
bucket there, in place (docs/gpu.md). Before a bucket is handed over the
rank waits for the kernels queued so far (the daemon reads on a stream of
its own).

What it does as DDP does: parameters and buffers from rank 0 at
construction, buffers from rank 0 before each forward (broadcast_buffers),
buckets in reverse order of the parameters with a small first one (the last
layers' gradients come first), overlap of the allreduce with the rest of
backward, no_sync() for gradient accumulation. What it does not: a
parameter that gets no gradient in a backward is reduced with what its
.grad holds (zero after zero_grad); every rank must construct its
DataParallel models in the same order.
"""
import contextlib
import time
from typing import Dict, List, Optional

import torch

from gsync import _lib
from gsync._buffers import ArenaBuffer, DeviceBuffer
from gsync._lib import GsyncError
from gsync._torch_common import DTYPES as _DTYPES  # the dtypes gsync reduces

__all__ = ["DataParallel"]

# Keys of a DataParallel's ops: above the DDP hook's (key_base + bucket
# index) and the parameter server's, one range of 2^32 per model.
_KEY_SPAN = 1 << 32
_KEY_FIRST = 1 << 44
# Its own broadcasts (parameters at construction, buffers before forward)
# use keys at the top of its range.
_KEY_BROADCAST = _KEY_SPAN - 2


def _block(comm, numel: int, dtype: torch.dtype, device: torch.device):
    """A block for numel elements: in the arena for a CPU model, GPU memory
    the daemon reduces in place for a model on a GPU (gsync.torch's
    ArenaBuffer, DeviceBuffer); or an error that says how to get one."""
    try:
        if device.type == "cuda":
            return DeviceBuffer(comm, numel, dtype, device)
        return ArenaBuffer(comm, numel, dtype)
    except GsyncError as e:
        if device.type == "cuda":
            raise GsyncError(e.code, f"gsync.torch.DataParallel: GPU memory for gradients on "
                                     f"{device}: {e}") from None
        nbytes = max(numel * torch.tensor([], dtype=dtype).element_size(), 1)
        raise GsyncError(e.code, f"gsync.torch.DataParallel: {nbytes} bytes of the arena for "
                                 f"gradients: {e} (gsync.torch.init(arena_bytes=) must hold "
                                 "every gradient once)") from None


class DataParallel(torch.nn.Module):
    """Wraps `module`; see the module's text. state: gsync.torch.init()'s."""

    _models_per_state: Dict[int, int] = {}

    def __init__(self, module: torch.nn.Module, state, *, bucket_cap_mb: float = 25.0,
                 first_bucket_mb: float = 1.0, broadcast_buffers: bool = True,
                 key_base: Optional[int] = None):
        super().__init__()
        self.module = module
        self._state = state
        self._comm = state.comm
        self._dtypes = _DTYPES
        if key_base is None:
            n = DataParallel._models_per_state.get(id(state), 0)
            DataParallel._models_per_state[id(state)] = n + 1
            key_base = state.key_base + _KEY_FIRST + n * _KEY_SPAN
        self._key_base = key_base
        self._broadcast_buffers = broadcast_buffers
        self._sync = True
        self._broadcasts = 0
        params = [p for p in module.parameters() if p.requires_grad]
        # One device for the model: the CPU (gradients in the arena) or one
        # GPU (gradients in GPU memory the daemon reduces there).
        self._device = params[0].device if params else torch.device("cpu")
        for p in params:
            if (p.dtype not in _DTYPES or p.device != self._device
                    or p.device.type not in ("cpu", "cuda")
                    or (p.device.type == "cuda" and p.dtype == torch.float64)):
                raise GsyncError(_lib.ERR_UNSUPPORTED,
                                 f"gsync.torch.DataParallel: a parameter of {tuple(p.shape)} is "
                                 f"{p.dtype} on {p.device}; gsync reduces the tensors of a model "
                                 f"on one device ({self._device} here): float32, float16, "
                                 "bfloat16, and float64 on the CPU")
        self._buckets = self._plan_buckets(params, bucket_cap_mb, first_bucket_mb)
        self._blocks: list = []
        self._views: Dict[torch.nn.Parameter, torch.Tensor] = {}
        self._bucket_of: Dict[torch.nn.Parameter, int] = {}
        for b, ps in enumerate(self._buckets):
            block = _block(self._comm, sum(p.numel() for p in ps), ps[0].dtype, self._device)
            block.tensor.zero_()
            at = 0
            for p in ps:
                self._views[p] = block.tensor[at:at + p.numel()].view_as(p)
                self._bucket_of[p] = b
                at += p.numel()
            self._blocks.append(block)
        self._steps = [0] * len(self._buckets)
        self._pending: List[int] = []
        self._reqs: list = []
        self._queued = False
        # Hooks on each parameter's gradient accumulator (as DDP's reducer
        # has): they run once its gradient is in .grad. The accumulators
        # are kept: a node nobody holds is freed with its hooks.
        self._accumulators = []
        for p in params:
            acc = p.expand_as(p).grad_fn.next_functions[0][0]
            acc.register_hook(self._hook_for(p))
            self._accumulators.append(acc)
        self._broadcast(list(module.parameters()) + list(module.buffers()))
        self._install_grads()
        self._new_backward()

    # --- what a training script sees

    def forward(self, *args, **kwargs):
        if self._broadcast_buffers:
            buffers = list(self.module.buffers())
            if buffers:
                self._broadcast(buffers)
        self._install_grads()
        self._new_backward()
        return self.module(*args, **kwargs)

    @contextlib.contextmanager
    def no_sync(self):
        """Backward passes inside only accumulate into .grad; the first one
        outside reduces what accumulated."""
        old, self._sync = self._sync, False
        try:
            yield
        finally:
            self._sync = old

    def bucket_sizes(self) -> List[int]:
        """Elements of each bucket, in the order they are reduced."""
        return [b.numel for b in self._blocks]

    def close(self) -> None:
        """Gives the gradients' arena blocks back; .grad become plain tensors."""
        for p, v in self._views.items():
            if p.grad is not None and p.grad.data_ptr() == v.data_ptr():
                p.grad = v.clone()
        for b in self._blocks:
            b.free()
        self._blocks, self._views = [], {}

    # --- buckets

    @staticmethod
    def _plan_buckets(params, cap_mb: float, first_mb: float) -> List[list]:
        # Reverse order of registration: backward produces the last layers'
        # gradients first. One dtype per bucket.
        buckets: Dict[torch.dtype, list] = {}
        out: List[list] = []
        sizes: Dict[torch.dtype, int] = {}
        for p in reversed(params):
            cur = buckets.setdefault(p.dtype, [])
            cur.append(p)
            sizes[p.dtype] = sizes.get(p.dtype, 0) + p.numel() * p.element_size()
            cap = (first_mb if not out else cap_mb) * (1 << 20)
            if sizes[p.dtype] >= cap:
                out.append(cur)
                buckets[p.dtype], sizes[p.dtype] = [], 0
        out.extend(b for b in buckets.values() if b)
        return out

    def _install_grads(self) -> None:
        """Every parameter's .grad is its arena view (zero_grad(set_to_none)
        or the user may have replaced it: what it held is kept)."""
        for p, v in self._views.items():
            g = p.grad
            if g is None:
                v.zero_()
                p.grad = v
            elif g.data_ptr() != v.data_ptr():
                v.copy_(g)
                p.grad = v

    def _new_backward(self) -> None:
        self._pending = [len(ps) for ps in self._buckets]
        self._reqs = [None] * len(self._buckets)
        self._queued = False

    def _hook_for(self, p):
        def hook(*_):
            if not self._sync:
                return
            if not self._queued:
                self._queued = True
                torch.autograd.Variable._execution_engine.queue_callback(self._finish_backward)
            b = self._bucket_of[p]
            self._pending[b] -= 1
            if self._pending[b] == 0:
                self._submit(b)
        return hook

    def _sync_device(self) -> None:
        """On a GPU: the kernels queued so far (the gradients, a copy into a
        block) have run, so the daemon, on a stream of its own, reads what
        they wrote."""
        if self._device.type == "cuda":
            torch.cuda.current_stream(self._device).synchronize()

    def _submit(self, b: int) -> None:
        block = self._blocks[b]
        self._sync_device()
        step = self._steps[b]
        self._steps[b] += 1
        self._state.stats.buckets += 1
        t_ready = time.monotonic_ns()
        try:
            req = self._comm.allreduce(self._key_base + b, step, block.addr, block.numel,
                                       self._dtypes[block.dtype], _lib.AVG)
        except GsyncError as e:
            req = e
        trace = None
        if self._state.trace is not None:
            trace = {"key": self._key_base + b, "step": step, "bytes": block.nbytes,
                     "hook_ns": t_ready, "copied_ns": t_ready,
                     "submitted_ns": time.monotonic_ns()}
            self._state.trace.append(trace)
        self._reqs[b] = (req, trace)

    def _finish_backward(self) -> None:
        """At the end of backward: the buckets not yet handed over (a
        parameter without a gradient this time) go now; then every result
        is waited for, in place in .grad."""
        for b in range(len(self._buckets)):
            if self._reqs[b] is None:
                self._submit(b)
        first: Optional[GsyncError] = None
        anomalies = []
        for b, (req, trace) in enumerate(self._reqs):
            if isinstance(req, GsyncError):
                first = first or req
                continue
            rc = req.wait(-1)
            if trace is not None:
                trace["completed_ns"] = trace["future_ns"] = time.monotonic_ns()
            if rc == 0:
                req.free()
                continue
            err = req.error(rc)
            req.free()
            if rc == _lib.ERR_ANOMALY and self._state.completer.skip_anomalies:
                self._blocks[b].tensor.zero_()
                anomalies.append(str(err))
                continue
            first = first or GsyncError(rc, f"gsync.torch.DataParallel: job {self._comm.job} "
                                            f"rank {self._comm.rank}: bucket {b} (key "
                                            f"{self._key_base + b} step {self._steps[b] - 1}) "
                                            f"failed: {str(err).split(': ', 1)[-1]}")
        self._new_backward()
        if anomalies:
            c = self._state.completer
            with c._cv:
                c.anomalies.extend(anomalies)
                c.anomalies_seen += len(anomalies)
        if first is not None:
            raise first

    # --- broadcasts from rank 0

    def _broadcast(self, tensors: List[torch.Tensor]) -> None:
        """Rank 0's values of `tensors` on every rank, one block per dtype
        and device (in the arena, or GPU memory; given back at once).
        float64 on a GPU has no GPU kernel, but a broadcast needs none."""
        by_kind: Dict[tuple, List[torch.Tensor]] = {}
        for t in tensors:
            if t.dtype in self._dtypes and t.device.type in ("cpu", "cuda"):
                by_kind.setdefault((t.dtype, t.device), []).append(t)
        for (dtype, _), ts in by_kind.items():
            n = sum(t.numel() for t in ts)
            if n == 0:
                continue
            block = _block(self._comm, n, dtype, ts[0].device)
            try:
                at = 0
                with torch.no_grad():
                    for t in ts:
                        block.tensor[at:at + t.numel()].copy_(t.reshape(-1))
                        at += t.numel()
                if ts[0].device.type == "cuda":
                    torch.cuda.current_stream(ts[0].device).synchronize()
                step = self._broadcasts
                self._broadcasts += 1
                req = self._comm.broadcast(self._key_base + _KEY_BROADCAST, step, block.addr, n,
                                           self._dtypes[dtype], 0)
                rc = req.wait(-1)
                if rc != 0:
                    err = req.error(rc)
                    req.free()
                    raise err
                req.free()
                at = 0
                with torch.no_grad():
                    for t in ts:
                        t.copy_(block.tensor[at:at + t.numel()].view_as(t))
                        at += t.numel()
            finally:
                block.free()
