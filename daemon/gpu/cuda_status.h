// SPDX-License-Identifier: Apache-2.0
//
// A CUDA runtime error as the daemon's Status: the call, the device and the
// runtime's own words. Included by the .cu files only (it needs
// cuda_runtime.h).
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "daemon/core/status.h"

namespace gsync::gpu {

inline Status cuda_status(cudaError_t err, const char* what, int device) {
  if (err == cudaSuccess) return Status::ok();
  std::string msg = std::string(what);
  if (device >= 0) msg += " on GPU " + std::to_string(device);
  msg += ": ";
  msg += cudaGetErrorName(err);
  msg += " (";
  msg += cudaGetErrorString(err);
  msg += ")";
  const int code = err == cudaErrorMemoryAllocation ? GSYNC_ERR_NOMEM : GSYNC_ERR_INTERNAL;
  return Status(code, msg);
}

}  // namespace gsync::gpu
