# SPDX-License-Identifier: Apache-2.0
"""gsync.torch.PSOptimizer: the optimizer step done by gsync's parameter
servers (docs/parameter-server.md), for training without DDP.

    opt = gsync.torch.PSOptimizer(model.parameters(), job="run-7", optimizer="adamw",
                                  lr=1e-3, sync="ssp:3")
    for x, y in data:
        opt.zero_grad()
        loss_fn(model(x), y).backward()   # each bucket pushed as soon as its grads are in
        opt.step()                        # waits for the parameters of the next step

Batch leases (docs/fault-tolerance.md): the daemons can hand out the data,
so that a rank that dies mid-epoch has its batches trained on by the
others, exactly once:

    sampler = gsync.torch.LeasedBatchSampler(opt, len(dataset), batch_size=32)
    loader = DataLoader(dataset, batch_sampler=sampler)   # num_workers=0
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for x, y in loader: ...; opt.step()

The parameters are cut into buckets (about 25 MiB, in the reverse order of
registration, as DDP does), each one key of the parameter server with an
arena buffer of its own. At construction every rank declares them: rank 0's
values become everyone's. During backward a hook on every parameter copies
its gradient into its bucket; once a bucket is complete its push_pull goes
out at once, so the pushes overlap the rest of backward. step() pushes what
is left (a parameter without a gradient pushes zeros), waits for every
bucket's parameters and copies them into the model. The servers apply the
optimizer; the job's sync mode decides how stale what comes back may be.
"""
from __future__ import annotations

import atexit
import os
from typing import Iterable, Iterator, List, Optional

import torch

from gsync import _lib
from gsync._lib import GsyncError
from gsync._torch_common import pick as _pick
from gsync.comm import Comm, Request

_OPTIMIZERS = {"sgd": _lib.OPT_SGD, "adam": _lib.OPT_ADAM, "adamw": _lib.OPT_ADAMW}
_DTYPES = {torch.float32: _lib.FLOAT32, torch.float16: _lib.FLOAT16,
           torch.bfloat16: _lib.BFLOAT16}


class _Bucket:
    def __init__(self, comm: Comm, key: int, params: List[torch.nn.Parameter]):
        import ctypes
        self.key = key
        self.params = params
        self.dtype = params[0].dtype
        self.numel = sum(p.numel() for p in params)
        elem = torch.tensor([], dtype=self.dtype).element_size()
        self.addr = comm.alloc(self.numel * elem)
        raw = (ctypes.c_char * (self.numel * elem)).from_address(self.addr)
        self.flat = torch.frombuffer(raw, dtype=self.dtype, count=self.numel)
        self.views = []
        off = 0
        for p in params:
            self.views.append(self.flat[off:off + p.numel()].view_as(p))
            off += p.numel()
        self.waiting = len(params)  # gradients not in yet this step
        self.req: Optional[Request] = None


class PSOptimizer:
    """See the module's text. lr, momentum, weight_decay, betas, eps: the
    servers' optimizer (declared once); lr may change between steps (the
    attribute `lr`: pushes carry it). checkpoint_clocks, checkpoint_ms: the
    servers checkpoint their state that often (docs/fault-tolerance.md); with
    resume, a job started again under the same id resumes from the newest
    checkpoint every host holds, and `clock` says the step it resumed at.
    weight: the samples a rank's gradient
    stands for (its batch size when they differ). With the job's anomaly
    guard on (bsp), a bucket whose clock the servers rolled back (a NaN, an
    Inf or a norm spike in the step's gradient) loads the parameters as they
    were: after step(), `rolled_back` lists the guard's text for each such
    bucket of that step (empty when every update was applied), and
    `rollbacks` counts them over the run. anomaly_guard turns the guard on
    (every rank the same), judging each step's norm against anomaly_sigmas
    deviations above its mean over anomaly_window steps. sync: the job's mode,
    "bsp", "asp" or "ssp:S" (every rank the same). The rank's identity comes
    from the arguments, else WORLD_SIZE, RANK, LOCAL_RANK, LOCAL_WORLD_SIZE.
    """

    def __init__(self, params: Iterable[torch.nn.Parameter], *, job: Optional[str] = None,
                 socket: Optional[str] = None, world_size: Optional[int] = None,
                 rank: Optional[int] = None, local_rank: Optional[int] = None,
                 local_world_size: Optional[int] = None, optimizer: str = "sgd",
                 lr: float = 0.01, momentum: float = 0.0, weight_decay: float = 0.0,
                 betas: tuple = (0.9, 0.999), eps: float = 1e-8, sync: str = "bsp",
                 weight: float = 1.0, bucket_cap_mb: float = 25.0, key_base: int = 0,
                 timeout_ms: int = 0, checkpoint_clocks: int = 0, checkpoint_ms: int = 0,
                 resume: bool = True, anomaly_guard: bool = False, anomaly_sigmas: int = 6,
                 anomaly_window: int = 128):
        job = job or os.environ.get("GSYNC_JOB")
        if not job:
            raise ValueError("PSOptimizer: job is required (argument or $GSYNC_JOB)")
        if optimizer not in _OPTIMIZERS:
            raise ValueError(f"PSOptimizer: optimizer '{optimizer}' is not sgd, adam or adamw")
        world_size = _pick(world_size, "WORLD_SIZE", 1)
        rank = _pick(rank, "RANK", 0)
        local_rank = _pick(local_rank, "LOCAL_RANK", rank)
        local_world_size = _pick(local_world_size, "LOCAL_WORLD_SIZE", world_size)
        self.params = [p for p in params if p.requires_grad]
        for p in self.params:
            if p.dtype not in _DTYPES:
                raise GsyncError(_lib.ERR_INVALID, f"PSOptimizer: a {p.dtype} parameter (the "
                                 "parameter server keeps float32, float16 and bfloat16)")
        total = sum(p.numel() * p.element_size() for p in self.params)
        self.comm = Comm(job, world_size, rank, local_rank, local_world_size, socket=socket,
                         timeout_ms=timeout_ms, sync=sync,
                         guard=(anomaly_sigmas, anomaly_window) if anomaly_guard else None,
                         arena_bytes=max(2 * total + (64 << 20), 256 << 20))
        self.lr, self.weight, self.clock = lr, weight, 0
        self.rolled_back: List[str] = []
        self.rollbacks = 0
        self.buckets = self._make_buckets(bucket_cap_mb, key_base)
        # Rank 0's values are everyone's: declared, then copied into the model.
        reqs = []
        for b in self.buckets:
            with torch.no_grad():
                for p, v in zip(b.params, b.views):
                    v.copy_(p)
            reqs.append(self.comm.ps_declare(b.key, b.addr, b.numel, _DTYPES[b.dtype],
                                             optimizer=_OPTIMIZERS[optimizer], lr=lr,
                                             momentum=momentum, weight_decay=weight_decay,
                                             betas=betas, eps=eps,
                                             checkpoint_clocks=checkpoint_clocks,
                                             checkpoint_ms=checkpoint_ms, resume=resume))
        # A job that resumed from a checkpoint (docs/fault-tolerance.md): the
        # buffers hold that clock's parameters, and the step goes on from it
        # (`clock`: the caller's loop starts there).
        clocks = self._wait_all(reqs, resume_clock=True)
        if len(set(clocks)) > 1:
            raise GsyncError(_lib.ERR_INTERNAL, f"PSOptimizer: buckets resumed from clocks {clocks}")
        self.clock = clocks[0] if clocks else 0
        self._load()
        for b in self.buckets:
            b.flat.zero_()
        self._hooks = []
        for b in self.buckets:
            for p, v in zip(b.params, b.views):
                self._hooks.append(p.register_hook(self._hook_for(b, v)))
        atexit.register(self.close)

    def _make_buckets(self, cap_mb: float, key_base: int) -> List[_Bucket]:
        cap = int(cap_mb * (1 << 20))
        groups: List[List[torch.nn.Parameter]] = [[]]
        size = 0
        for p in reversed(self.params):  # the order backward produces them in
            nbytes = p.numel() * p.element_size()
            if groups[-1] and (size + nbytes > cap or p.dtype != groups[-1][0].dtype):
                groups.append([])
                size = 0
            groups[-1].append(p)
            size += nbytes
        return [_Bucket(self.comm, key_base + i, g) for i, g in enumerate(groups) if g]

    def _hook_for(self, b: _Bucket, view: torch.Tensor):
        def hook(grad: torch.Tensor):
            with torch.no_grad():
                view.copy_(grad)
            b.waiting -= 1
            if b.waiting == 0:
                self._push(b)
            return grad
        return hook

    def _push(self, b: _Bucket) -> None:
        b.req = self.comm.ps_push_pull(b.key, self.clock, b.addr, b.numel, _DTYPES[b.dtype],
                                       weight=self.weight, lr=self.lr)

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad.zero_()

    def step(self) -> None:
        """Pushes what backward did not, waits for the next step's parameters
        and puts them into the model."""
        for b in self.buckets:
            if b.req is None:
                self._push(b)  # a parameter without a gradient pushes zeros (below)
        self.rolled_back = []
        self._wait_all([b.req for b in self.buckets], rolled_back=self.rolled_back)
        self.rollbacks += len(self.rolled_back)
        self._load()
        for b in self.buckets:
            b.req = None
            b.waiting = len(b.params)
            b.flat.zero_()  # the next step's gradients start from zero
        self.clock += 1

    def empty_step(self) -> None:
        """A step without data: pushes zeros weighing nothing at this clock
        (the job's other ranks go on; the servers' update is theirs alone)
        and loads the parameters of the next step."""
        saved = self.weight
        self.weight = 0.0
        try:
            self.step()
        finally:
            self.weight = saved

    def leased_batches(self, epoch: int, batches: int) -> Iterator[int]:
        """The batch ids of epoch `epoch` (0 .. batches-1, the same number on
        every rank) that the daemons lease to this rank, each for the step
        at `clock`: train on it and call step() before asking for the next.
        A lease is settled once that step's pushes are applied; a rank that
        dies has its unsettled leases handed to the others, so every batch
        is trained on exactly once per epoch. While no batch is free but
        others still hold some, the iterator takes steps without data
        itself (empty_step); it ends once every batch is settled."""
        while True:
            req = self.comm.lease(epoch, batches, self.clock)
            try:
                rc = req.wait(-1)
                if rc != 0:
                    raise req.error(rc)
                batch = req.lease_batch()
            finally:
                req.free()
            if batch == _lib.LEASE_END:
                return
            if batch == _lib.LEASE_WAIT:
                self.empty_step()
                continue
            yield batch

    def _wait_all(self, reqs: List[Request], resume_clock: bool = False,
                  rolled_back: Optional[List[str]] = None) -> List[int]:
        error, clocks = None, []
        for r in reqs:
            rc = r.wait(-1)
            if rc != 0 and error is None:
                error = r.error(rc)
            if rc == 0 and resume_clock:
                clocks.append(r.resume_clock())
            if rc == 0 and rolled_back is not None:
                why = r.rolled_back()
                if why is not None:
                    rolled_back.append(why)
            r.free()
        if error is not None:
            raise error
        return clocks

    def _load(self) -> None:
        with torch.no_grad():
            for b in self.buckets:
                for p, v in zip(b.params, b.views):
                    p.copy_(v)

    def close(self) -> None:
        for h in getattr(self, "_hooks", []):
            h.remove()
        self._hooks = []
        if getattr(self, "comm", None) is not None:
            self.comm.close()
            self.comm = None


class LeasedBatchSampler:
    """A DataLoader batch_sampler whose batches the daemons lease
    (PSOptimizer.leased_batches): batch b of epoch e is the b-th slice of
    the dataset's indices, shuffled by a generator seeded with seed + e (the
    same on every rank). Leases are taken as the loop asks for batches, each
    for the optimizer's next step: use num_workers=0, or a loader that does
    not fetch ahead of the step it trains."""

    def __init__(self, opt: PSOptimizer, dataset_size: int, batch_size: int, *,
                 shuffle: bool = True, seed: int = 0, drop_last: bool = False):
        if dataset_size <= 0 or batch_size <= 0:
            raise ValueError("LeasedBatchSampler: dataset_size and batch_size must be > 0")
        self.opt, self.size, self.batch_size = opt, dataset_size, batch_size
        self.shuffle, self.seed, self.epoch = shuffle, seed, 0
        self.batches = (dataset_size // batch_size if drop_last
                        else -(-dataset_size // batch_size))
        if self.batches == 0:
            raise ValueError("LeasedBatchSampler: no whole batch (drop_last)")

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return self.batches  # the epoch's; this rank trains on its share

    def _order(self) -> torch.Tensor:
        if not self.shuffle:
            return torch.arange(self.size)
        return torch.randperm(self.size, generator=torch.Generator().manual_seed(self.seed + self.epoch))

    def batch(self, b: int) -> List[int]:
        """The dataset indices of batch b of the current epoch."""
        return self._order()[b * self.batch_size:(b + 1) * self.batch_size].tolist()

    def __iter__(self):
        order = self._order()
        for b in self.opt.leased_batches(self.epoch, self.batches):
            yield order[b * self.batch_size:(b + 1) * self.batch_size].tolist()
