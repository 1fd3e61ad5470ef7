// SPDX-License-Identifier: Apache-2.0
//
// What one launch of the GPU reduce kernel is given, worked out on the host
// (launch.cc, no CUDA in it, so it is tested on machines without a GPU):
// the checks, the host's arithmetic for weights, divisor and scale, and
// how the elements are cut between the vector loop and the tail.
#pragma once

#include <cstddef>
#include <cstdint>

#include "daemon/core/status.h"
#include "daemon/reduce/reduce.h"

namespace gsync::gpu {

// The most inputs and outputs one reduce takes: they travel in the kernel's
// parameters (4 KiB at most), so a launch needs no copy to the device.
inline constexpr size_t kMaxTensors = 32;
inline constexpr unsigned kThreadsPerBlock = 256;

// Passed to the kernel by value.
struct Launch {
  const void* in[kMaxTensors];
  void* out[kMaxTensors];
  float w[kMaxTensors];  // kWeightedAvg: each input's share, cast as the host casts it
  int n_in;
  int n_out;
  float divisor;  // kAvg
  float scale;
  bool scaled;
  uint64_t n_vec;  // 16-byte groups the vector loop covers (0: all one by one)
  uint64_t count;  // elements
  unsigned blocks;
};

// Whether the device kernels reduce dtype t with op: fp32, fp16 and bf16
// with every op (fp64 and int32 stay on the host).
bool supported(reduce::DType t, reduce::Op op);

// The launch for args on a device with sm_count multiprocessors. An
// unsupported dtype or op, no input, or more than kMaxTensors inputs or
// outputs is an error naming it. blocks == 0: nothing to do (no elements
// or no output).
Status plan_launch(const reduce::ReduceArgs& args, int sm_count, Launch* out);

}  // namespace gsync::gpu
