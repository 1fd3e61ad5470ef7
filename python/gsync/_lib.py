# SPDX-License-Identifier: Apache-2.0
"""ctypes bindings for libgsync's C API (include/gsync/gsync.h).

Only what the Python layer uses is declared. Every declared function is
called through ctypes.CDLL, which releases the GIL for the duration of the
call, so a thread blocked in gsync_wait or gsync_test does not stop the
training thread.
"""
from __future__ import annotations

import ctypes
import os
from pathlib import Path
from typing import List, Optional

# enum gsync_error (stable values, gsync.h).
OK = 0
ERR_INVALID = -1
ERR_CONNECT = -2
ERR_REFUSED = -3
ERR_VERSION = -4
ERR_NOMEM = -5
ERR_TIMEOUT = -6
ERR_RANK_DEAD = -7
ERR_MISMATCH = -8
ERR_PROTOCOL = -9
ERR_CLOSED = -10
ERR_AGAIN = -11
ERR_BUSY = -12
ERR_UNSUPPORTED = -13
ERR_PERMISSION = -14
ERR_INTERNAL = -15
ERR_HOST_LOST = -16
ERR_ANOMALY = -17
ERR_WORLD_CHANGED = -18

# enum gsync_dtype
FLOAT32, FLOAT16, BFLOAT16, FLOAT64, INT32, UINT8 = 0, 1, 2, 3, 4, 5
# enum gsync_redop
SUM, AVG, WEIGHTED_AVG, MIN, MAX = 0, 1, 2, 3, 4


class GsyncCompression(ctypes.Structure):
    """struct gsync_compression (docs/compression.md)."""

    _fields_ = [
        ("codec", ctypes.c_int32),
        ("hops", ctypes.c_int32),
        ("block", ctypes.c_uint32),
        ("topk_fraction", ctypes.c_float),
        ("error_feedback", ctypes.c_int32),
    ]


# enum gsync_sync_mode, enum gsync_optimizer
SYNC_BSP, SYNC_ASP, SYNC_SSP = 0, 1, 2
OPT_SGD, OPT_ADAM, OPT_ADAMW = 0, 1, 2
# A lease's answers (gsync.h): no batch now (take a step without data), and
# the epoch is over.
LEASE_WAIT, LEASE_END = 0xfffffffe, 0xffffffff


class GsyncPsOpts(ctypes.Structure):
    """struct gsync_ps_opts; filled by gsync_ps_opts_init."""

    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("optimizer", ctypes.c_int32),
        ("lr", ctypes.c_float),
        ("momentum", ctypes.c_float),
        ("weight_decay", ctypes.c_float),
        ("beta1", ctypes.c_float),
        ("beta2", ctypes.c_float),
        ("eps", ctypes.c_float),
        ("checkpoint_clocks", ctypes.c_uint32),
        ("checkpoint_ms", ctypes.c_uint32),
        ("resume", ctypes.c_int32),
    ]


class GsyncPushOpts(ctypes.Structure):
    """struct gsync_push_opts; filled by gsync_push_opts_init."""

    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("timeout_ms", ctypes.c_uint32),
        ("weight", ctypes.c_double),
        ("lr", ctypes.c_float),
    ]


class GsyncConfig(ctypes.Structure):
    """struct gsync_config (0.8); filled by gsync_config_init (sets struct_size)."""

    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("socket_path", ctypes.c_char_p),
        ("job_id", ctypes.c_char_p),
        ("world_size", ctypes.c_int32),
        ("rank", ctypes.c_int32),
        ("local_rank", ctypes.c_int32),
        ("local_size", ctypes.c_int32),
        ("arena_bytes", ctypes.c_uint64),
        ("timeout_ms", ctypes.c_uint32),
        ("compression", GsyncCompression),
        ("sync_mode", ctypes.c_int32),
        ("staleness", ctypes.c_uint32),
        ("anomaly_guard", ctypes.c_int32),
        ("anomaly_sigmas", ctypes.c_uint32),
        ("anomaly_window", ctypes.c_uint32),
        ("algorithm", ctypes.c_char_p),
        ("chunk_bytes", ctypes.c_uint64),
        ("min_hosts", ctypes.c_int32),
        ("max_hosts", ctypes.c_int32),
        ("reproducible", ctypes.c_int32),
    ]


class GsyncWorld(ctypes.Structure):
    """struct gsync_world: an elastic job's world as this rank is in it."""

    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("epoch", ctypes.c_uint64),
        ("world_size", ctypes.c_int32),
        ("rank", ctypes.c_int32),
        ("local_rank", ctypes.c_int32),
        ("local_size", ctypes.c_int32),
        ("hosts", ctypes.c_int32),
    ]


CODE_NAMES = {v: "GSYNC_" + k for k, v in list(globals().items())
              if k.startswith("ERR_") and isinstance(v, int)}


class GsyncError(RuntimeError):
    """A gsync failure: `code` is the GSYNC_ERR_* value, str() is gsync's text."""

    def __init__(self, code: int, message: str):
        # The code's name first, so that a message that travelled through
        # torch (which keeps only the text) still says what kind of failure.
        name = CODE_NAMES.get(code, f"gsync error {code}")
        super().__init__(message if message.startswith(name) else f"{name}: {message}")
        self.code = code


def _candidates() -> List[str]:
    """Where libgsync.so is looked for, in order (see docs/pytorch.md)."""
    out = []
    env = os.environ.get("GSYNC_LIB")
    if env:
        out.append(env)
    # python/gsync/_lib.py -> the repository root is two folders up.
    repo = Path(__file__).resolve().parent.parent.parent
    out.append(str(repo / "build" / "libclient" / "libgsync.so"))
    out.append("libgsync.so.0")  # the ldconfig name of an installed library
    return out


def _declare(lib: ctypes.CDLL) -> None:
    c_int, c_char_p, c_void_p = ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p
    comm_pp = ctypes.POINTER(c_void_p)
    sigs = {
        "gsync_version": (c_char_p, []),
        "gsync_strerror": (c_char_p, [c_int]),
        "gsync_last_error": (c_char_p, []),
        "gsync_config_init": (None, [ctypes.POINTER(GsyncConfig)]),
        "gsync_connect": (c_int, [ctypes.POINTER(GsyncConfig), comm_pp]),
        "gsync_close": (c_int, [c_void_p]),
        "gsync_alloc": (c_int, [c_void_p, ctypes.c_size_t, ctypes.POINTER(c_void_p)]),
        "gsync_free": (c_int, [c_void_p, c_void_p]),
        "gsync_alloc_device": (c_int, [c_void_p, ctypes.c_size_t, ctypes.POINTER(c_void_p)]),
        "gsync_free_device": (c_int, [c_void_p, c_void_p]),
        "gsync_arena_info": (c_int, [c_void_p, ctypes.POINTER(ctypes.c_size_t),
                                     ctypes.POINTER(ctypes.c_size_t)]),
        "gsync_allreduce": (c_int, [c_void_p, ctypes.c_uint64, ctypes.c_uint64, c_void_p,
                                    ctypes.c_size_t, c_int, c_int, ctypes.c_double, comm_pp]),
        "gsync_compression_parse": (c_int, [c_char_p, ctypes.POINTER(GsyncCompression)]),
        "gsync_ps_opts_init": (None, [ctypes.POINTER(GsyncPsOpts)]),
        "gsync_ps_resume_clock": (c_int, [c_void_p, ctypes.POINTER(ctypes.c_uint64)]),
        "gsync_ps_rolled_back": (c_int, [c_void_p, ctypes.POINTER(c_char_p)]),
        "gsync_push_opts_init": (None, [ctypes.POINTER(GsyncPushOpts)]),
        "gsync_ps_declare": (c_int, [c_void_p, ctypes.c_uint64, c_void_p, ctypes.c_size_t, c_int,
                                     ctypes.POINTER(GsyncPsOpts), comm_pp]),
        "gsync_ps_push": (c_int, [c_void_p, ctypes.c_uint64, ctypes.c_uint64, c_void_p,
                                  ctypes.c_size_t, c_int, ctypes.POINTER(GsyncPushOpts), comm_pp]),
        "gsync_ps_pull": (c_int, [c_void_p, ctypes.c_uint64, ctypes.c_uint64, c_void_p,
                                  ctypes.c_size_t, c_int, comm_pp]),
        "gsync_ps_push_pull": (c_int, [c_void_p, ctypes.c_uint64, ctypes.c_uint64, c_void_p,
                                       ctypes.c_size_t, c_int, ctypes.POINTER(GsyncPushOpts),
                                       comm_pp]),
        "gsync_lease": (c_int, [c_void_p, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint64,
                                comm_pp]),
        "gsync_lease_batch": (c_int, [c_void_p, ctypes.POINTER(ctypes.c_uint64)]),
        "gsync_barrier": (c_int, [c_void_p, ctypes.c_uint64, c_int]),
        "gsync_broadcast": (c_int, [c_void_p, ctypes.c_uint64, ctypes.c_uint64, c_void_p,
                                    ctypes.c_size_t, c_int, c_int, comm_pp]),
        "gsync_world": (c_int, [c_void_p, ctypes.POINTER(GsyncWorld), c_int]),
        "gsync_test": (c_int, [c_void_p]),
        "gsync_wait": (c_int, [c_void_p, c_int]),
        "gsync_request_error": (c_char_p, [c_void_p]),
        "gsync_request_free": (None, [c_void_p]),
        "gsync_completion_fd": (c_int, [c_void_p]),
    }
    for name, (restype, argtypes) in sigs.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes


_lib: Optional[ctypes.CDLL] = None


def lib() -> ctypes.CDLL:
    """libgsync, loaded once: $GSYNC_LIB, else the build tree, else libgsync.so.0."""
    global _lib
    if _lib is not None:
        return _lib
    tried = []
    for cand in _candidates():
        # A path that does not exist would make dlopen search LD_LIBRARY_PATH
        # for its basename; only the bare soname should be searched for.
        if "/" in cand and not os.path.exists(cand):
            tried.append(f"{cand} (no such file)")
            continue
        try:
            handle = ctypes.CDLL(cand)
        except OSError as e:
            tried.append(f"{cand} ({e})")
            continue
        _declare(handle)
        _lib = handle
        return handle
    raise GsyncError(ERR_INVALID, "cannot load libgsync; tried: " + "; ".join(tried) +
                     ". Set GSYNC_LIB to the path of libgsync.so.")


def last_error(code: int) -> GsyncError:
    """The exception for a call that just returned `code` on this thread."""
    text = lib().gsync_last_error().decode(errors="replace")
    if not text:
        text = lib().gsync_strerror(code).decode(errors="replace")
    return GsyncError(code, text)


def check(code: int) -> int:
    if code < 0:
        raise last_error(code)
    return code
