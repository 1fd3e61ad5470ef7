// SPDX-License-Identifier: Apache-2.0
//
// Element-wise reduction kernels: n input tensors folded into one result that
// is stored to m output tensors (outputs may alias inputs: in-place allreduce
// over every rank's buffer). One pass over memory: each block of elements is
// read from every input, folded in a cache-resident accumulator, and stored to
// every output before the next block is touched.
//
// Semantics (fixed, so every ISA gives bit-identical results):
//  - fp16 and bf16 accumulate in fp32 and round once (nearest-even) on store;
//    fp32 accumulates in fp32, fp64 in fp64, int32 in int32 (wrapping),
//    uint8 in uint8 (wrapping; sum, min and max only).
//  - Inputs are folded in index order: acc = in[0]; acc = op(acc, in[r]).
//  - kAvg: acc / n (int32: truncating division).
//  - kWeightedAvg: acc = sum_r in[r] * w_r, w_r = weights[r] / sum(weights)
//    computed in double and cast to the accumulator type; floats only.
//  - kMin/kMax propagate NaN: a NaN in any input gives NaN. On ties (including
//    -0 vs +0) the value folded first is kept.
//  - No FMA contraction, so results do not depend on the ISA.
#pragma once

#include <cstddef>
#include <cstdint>

#include "protocol/ops.h"

namespace gsync::reduce {

// The element types and reduction ops of the wire vocabulary
// (protocol/ops.h): a kernel's op is the reduction it computes.
using DType = proto::DType;
using Op = proto::RedOp;
using proto::dtype_size;
enum class Isa : uint8_t { kScalar = 0, kAvx2 = 1, kAvx512 = 2 };

struct ReduceArgs {
  const void* const* inputs = nullptr;
  size_t n_inputs = 0;
  void* const* outputs = nullptr;
  size_t n_outputs = 0;
  const double* weights = nullptr;  // n_inputs of them; kWeightedAvg only
  size_t count = 0;                 // elements per tensor
  DType dtype = DType::kF32;
  Op op = Op::kSum;
  // For the multi-host path (docs/algorithms.md): the host's local fold and
  // the final store after the cross-host sum.
  uint32_t divisor = 0;           // kAvg: divide by this, not n_inputs (0: n_inputs)
  bool normalize_weights = true;  // kWeightedAvg: false folds sum_r in[r] * weights[r]
  double scale = 1.0;             // float dtypes: the result times this, before the store
};

// False for combinations that have no meaning (kWeightedAvg on kI32).
bool supported(DType t, Op op);

// Reduce elements [begin, end). Callers split large tensors into ranges and
// run them on several threads; ranges must not overlap.
void reduce_range(const ReduceArgs& args, size_t begin, size_t end);
inline void reduce(const ReduceArgs& args) { reduce_range(args, 0, args.count); }

// The ISA picked at start from the CPU (AVX-512, AVX2, scalar), or the one
// force_isa() set.
Isa active_isa();
const char* isa_name(Isa isa);
// Whether this CPU can run isa; tests use it with force_isa.
bool isa_available(Isa isa);
// For tests and benchmarks: route reduce_range to one ISA (must be available;
// one this CPU lacks routes to the best it has instead).
void force_isa(Isa isa);

// Outputs of a tensor whose stored bytes (count * dtype_size * n_outputs) reach
// this many are written with non-temporal stores, which skip the cache (the
// data will not be read again soon, and out-of-place outputs need no
// read-for-ownership). An output that is also an input is never streamed: its
// lines are already cached. Process-wide; the benchmark and tests change it.
size_t streaming_threshold();
void set_streaming_threshold(size_t bytes);

// The per-ISA entry points (one translation unit each, compiled with its own
// -m flags so that no dependency's -march can override them).
namespace impl {
void reduce_range_scalar(const ReduceArgs& args, size_t begin, size_t end);
void reduce_range_avx2(const ReduceArgs& args, size_t begin, size_t end);
void reduce_range_avx512(const ReduceArgs& args, size_t begin, size_t end);
}  // namespace impl

}  // namespace gsync::reduce
