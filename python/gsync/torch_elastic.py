# SPDX-License-Identifier: Apache-2.0
"""Data-parallel training over an elastic gsync job (docs/membership.md,
"Elastic jobs"; docs/pytorch.md, "Elastic training").

    el = gsync.torch.elastic(model, optimizer, job="run", min_hosts=2)
    while el.step < steps:
        loss = loss_fn(model(batch(el.step, el.rank, el.world_size)))
        optimizer.zero_grad()
        loss.backward()
        if el.sync_grads():      # False: the world changed; take the step again
            optimizer.step()

Why not DDP: DistributedDataParallel is bound to a torch.distributed
process group, whose world size is fixed when it is made; a host that
leaves or joins would need a new group, a new rendezvous and a new DDP. This
helper does DDP's part itself over gsync: it averages every gradient over
the world there is now (GSYNC_AVG divides by it), and when the world changes
(a host lost, a host joining) it asks for the new world, lets the ranks
agree on the most advanced of them (the largest step, the lowest rank among
those), and broadcasts that rank's model, optimizer state and step to all,
so a joining rank starts from where the job is and no rank diverges.

What a world change costs the script: the step in flight is not taken
(sync_grads returns False, on every rank: it is taken again, with the new
world's sharding); nothing else.
"""
import ctypes
import inspect
import io
from typing import Optional

import torch

from gsync import _lib
from gsync._lib import GsyncError
from gsync.comm import Comm, World

__all__ = ["ElasticDataParallel", "elastic"]

# Keys of the helper's own ops, far above any gradient key it uses (0).
_KEY_GRADS = 0
_KEY_AGREE = 1 << 40
_KEY_STATE_LEN = _KEY_AGREE + 1
_KEY_STATE = _KEY_AGREE + 2
# An agreement value: step * 2^20 + (2^20 - 1 - rank), exact in a float64
# up to steps of 2^33; the maximum names the most advanced rank, the lowest
# rank breaking ties.
_RANK_SPAN = 1 << 20
# What tells this helper that the world moved under a step.
_WORLD_CODES = (_lib.ERR_WORLD_CHANGED, _lib.ERR_HOST_LOST, _lib.ERR_RANK_DEAD)
# torch.load's default changed in torch 2.6 (weights_only=True; False
# before, and the argument is there from 1.13): said outright, so that ranks
# on different torch versions read the broadcast state alike. False: the
# bytes are the state another rank of this job saved, through daemons that
# share the cluster key (docs/security.md), and an optimizer's state may
# hold what a weights-only unpickler refuses (torch 1.13's refuses floats).
_LOAD_ARGS = ({"weights_only": False}
              if "weights_only" in inspect.signature(torch.load).parameters else {})


class _Block:
    """A block of the shared arena as a flat torch tensor (grown on demand)."""

    def __init__(self, comm: Comm, dtype: torch.dtype):
        self.comm, self.dtype = comm, dtype
        self.addr, self.capacity, self.tensor = 0, 0, None

    def view(self, numel: int) -> torch.Tensor:
        if numel > self.capacity:
            if self.addr:
                self.comm.free(self.addr)
            elem = torch.tensor([], dtype=self.dtype).element_size()
            self.addr = self.comm.alloc(max(numel * elem, 1))
            raw = (ctypes.c_char * max(numel * elem, 1)).from_address(self.addr)
            self.tensor = torch.frombuffer(raw, dtype=self.dtype, count=max(numel, 1))
            self.capacity = numel
        return self.tensor[:numel]


class ElasticDataParallel:
    """One rank of data-parallel training over an elastic job: see the
    module's text. The model and optimizer are the script's own; this
    object averages the gradients and keeps the ranks in agreement."""

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, job: str,
                 min_hosts: int, max_hosts: int = 0, socket: Optional[str] = None,
                 local_rank: int = 0, local_world_size: int = 1, timeout_ms: int = 0,
                 world_timeout_ms: int = -1):
        self.model, self.optimizer = model, optimizer
        self.comm = Comm(job, 0, 0, local_rank, local_world_size, socket=socket,
                         timeout_ms=timeout_ms, min_hosts=min_hosts, max_hosts=max_hosts)
        self.world_timeout_ms = world_timeout_ms
        self.step = 0  # optimizer steps the job has taken
        self.resizes = 0  # world changes this rank went through
        self.world: Optional[World] = None
        self._params = [p for p in model.parameters() if p.requires_grad]
        self._numel = sum(p.numel() for p in self._params)
        self._grads = _Block(self.comm, torch.float32)
        self._scalar = _Block(self.comm, torch.float64)
        self._state = _Block(self.comm, torch.int32)
        self._join()

    @property
    def rank(self) -> int:
        return self.world.rank

    @property
    def world_size(self) -> int:
        return self.world.world_size

    def sync_grads(self) -> bool:
        """After loss.backward(): every parameter's .grad becomes its average
        over the world. True: call optimizer.step(). False: the world changed
        during this step; the model, the optimizer and self.step now match
        the new world's most advanced rank, and the step is to be taken
        again. Raises GsyncError for any other failure."""
        flat = self._grads.view(self._numel)
        at = 0
        for p in self._params:
            n = p.numel()
            if p.grad is None:
                flat[at:at + n].zero_()
            else:
                flat[at:at + n].copy_(p.grad.reshape(-1))
            at += n
        try:
            self._run(self.comm.allreduce(_KEY_GRADS, self.step, self._grads.addr, self._numel,
                                          _lib.FLOAT32, _lib.AVG))
        except GsyncError as e:
            if e.code not in _WORLD_CODES:
                raise
            self.resizes += 1
            self._join()
            return False
        at = 0
        for p in self._params:
            n = p.numel()
            if p.grad is None:
                p.grad = torch.empty_like(p)
            p.grad.copy_(flat[at:at + n].view_as(p))
            at += n
        self.step += 1
        return True

    def close(self) -> None:
        self.comm.close()

    # --- the world and the agreement

    def _run(self, req) -> None:
        """Waits for req and frees it; raises its failure as GsyncError."""
        try:
            rc = req.wait(-1)
            if rc != 0:
                raise req.error(rc)
        finally:
            req.free()

    def _join(self) -> None:
        """Asks for the world until the agreement in it went through."""
        while True:
            self.world = self.comm.world(self.world_timeout_ms)
            try:
                self._agree()
                return
            except GsyncError as e:
                if e.code not in _WORLD_CODES:
                    raise

    def _agree(self) -> None:
        w = self.world
        # The world's epoch is a step every rank of it can name.
        v = self._scalar.view(1)
        v[0] = float(self.step * _RANK_SPAN + (_RANK_SPAN - 1 - w.rank))
        self._run(self.comm.allreduce(_KEY_AGREE, w.epoch, self._scalar.addr, 1, _lib.FLOAT64,
                                      _lib.MAX))
        best = int(v[0].item())
        root = _RANK_SPAN - 1 - best % _RANK_SPAN
        payload = b""
        if w.rank == root:
            buf = io.BytesIO()
            torch.save({"model": self.model.state_dict(),
                        "optimizer": self.optimizer.state_dict(),
                        "step": self.step}, buf)
            payload = buf.getvalue()
        v[0] = float(len(payload))
        self._run(self.comm.broadcast(_KEY_STATE_LEN, w.epoch, self._scalar.addr, 1,
                                      _lib.FLOAT64, root))
        length = int(v[0].item())
        words = (length + 3) // 4
        block = self._state.view(words)
        if w.rank == root:
            raw = (ctypes.c_char * length).from_address(self._state.addr)
            raw[:] = payload
        self._run(self.comm.broadcast(_KEY_STATE, w.epoch, self._state.addr, words, _lib.INT32,
                                      root))
        if w.rank != root:
            data = ctypes.string_at(self._state.addr, length)
            state = torch.load(io.BytesIO(data), **_LOAD_ARGS)
            self.model.load_state_dict(state["model"])
            self.optimizer.load_state_dict(state["optimizer"])
            self.step = state["step"]
        del block


def elastic(model: torch.nn.Module, optimizer: torch.optim.Optimizer, job: str,
            min_hosts: int, **kwargs) -> ElasticDataParallel:
    """gsync.torch.elastic: an ElasticDataParallel (see the module's text)."""
    return ElasticDataParallel(model, optimizer, job, min_hosts, **kwargs)
