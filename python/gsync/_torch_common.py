# SPDX-License-Identifier: Apache-2.0
"""What gsync.torch and its sibling modules (torch_dp, torch_ps,
torch_elastic) share: the torch dtypes the daemons reduce, and the rank
numbers read from an argument or torchrun's environment. Imports no other
gsync.torch module, so none of them imports another back."""
import os
from typing import Optional

import torch

from gsync import _lib

# The dtypes the daemons' allreduce takes, as libgsync names them.
DTYPES = {
    torch.float32: _lib.FLOAT32,
    torch.float16: _lib.FLOAT16,
    torch.bfloat16: _lib.BFLOAT16,
    torch.float64: _lib.FLOAT64,
}


def env_int(name: str) -> Optional[int]:
    v = os.environ.get(name)
    return int(v) if v not in (None, "") else None


def pick(explicit: Optional[int], env: str, fallback: Optional[int]) -> Optional[int]:
    """explicit, else $env, else fallback (torchrun's RANK, WORLD_SIZE...)."""
    if explicit is not None:
        return explicit
    v = env_int(env)
    return v if v is not None else fallback
