# SPDX-License-Identifier: Apache-2.0
"""gsync for Python: libgsync's C API over ctypes, and (in gsync.torch) a
DDP communication hook. gsync.torch is imported on its own so that this
package works without torch installed."""
from gsync._lib import GsyncError, lib
from gsync.comm import Comm, Request

__all__ = ["Comm", "GsyncError", "Request", "lib", "version"]


def version() -> str:
    """libgsync's version string."""
    return lib().gsync_version().decode()
