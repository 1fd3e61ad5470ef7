# SPDX-License-Identifier: Apache-2.0
"""GPU memory torch did not allocate (gsync_alloc_device's) as a CUDA tensor.

Two ways, the first that works: the CUDA array interface, which torch reads
with NumPy's help, so it fails where NumPy is missing or was built for
another NumPy ABI than torch's (torch before 2.3 with NumPy 2); and a
DLPack capsule made here with ctypes, which needs neither and which every
torch from 1.10 on takes (torch.utils.dlpack.from_dlpack). Either way the
tensor does not own the memory: gsync.torch gives it back (free()).
"""
import ctypes
from typing import List

import torch
import torch.utils.dlpack

__all__ = ["device_bytes", "dlpack_bytes"]


class _CudaArray:
    """Bytes of GPU memory as the CUDA array interface (version 3) says them."""

    def __init__(self, addr: int, nbytes: int):
        self.__cuda_array_interface__ = {
            "shape": (nbytes,), "typestr": "|u1", "data": (addr, False), "version": 3,
            "strides": None}


# DLPack's C structs (dlpack.h), for the "dltensor" capsule.
class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p)]


_DL_CPU, _DL_CUDA, _DL_UINT = 1, 2, 1
_DL_CAPSULE_NAME = b"dltensor"  # referenced by the capsule: lives as long as the module
_PyCapsule_New = ctypes.pythonapi.PyCapsule_New
_PyCapsule_New.restype = ctypes.py_object
_PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
# torch reads a capsule's struct once more when the tensor is freed (to find
# its deleter, NULL here: the memory is gsync's), so each struct is kept for
# the life of the process: a few dozen bytes per block allocated.
_dlpack_kept: List[tuple] = []


def dlpack_bytes(addr: int, nbytes: int, device: torch.device) -> torch.Tensor:
    """nbytes at addr on device as a flat uint8 tensor, through DLPack."""
    m = _DLManagedTensor()
    m.dl_tensor.data = addr
    cuda = device.type == "cuda"
    index = device.index if device.index is not None else (
        torch.cuda.current_device() if cuda else 0)
    m.dl_tensor.device = _DLDevice(_DL_CUDA if cuda else _DL_CPU, index)
    m.dl_tensor.ndim = 1
    m.dl_tensor.dtype = _DLDataType(_DL_UINT, 8, 1)
    shape = (ctypes.c_int64 * 1)(nbytes)
    m.dl_tensor.shape = ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64))
    _dlpack_kept.append((m, shape))
    capsule = _PyCapsule_New(ctypes.addressof(m), _DL_CAPSULE_NAME, None)
    return torch.utils.dlpack.from_dlpack(capsule)


def device_bytes(addr: int, nbytes: int, device: torch.device) -> torch.Tensor:
    """nbytes of GPU memory at addr as a flat uint8 CUDA tensor on device:
    through the CUDA array interface, else through DLPack."""
    try:
        return torch.as_tensor(_CudaArray(addr, nbytes), device=device)
    except (RuntimeError, TypeError, ValueError):
        return dlpack_bytes(addr, nbytes, device)
