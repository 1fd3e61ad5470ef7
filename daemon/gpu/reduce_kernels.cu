// SPDX-License-Identifier: Apache-2.0
//
// The reduce kernels on the GPU: Stream::reduce (device.h). One pass over
// memory, like the host kernels: each thread reads its 16 bytes of every
// input, folds them in fp32 registers, rounds once and writes the 16 bytes
// to every output. Outputs may be inputs: a thread reads all of its
// elements before it writes any, and no two threads share an element.
//
// Bit-for-bit the host's results (daemon/reduce/reduce.h), NaNs included:
// the adds, multiplies and divides are the _rn intrinsics, which the
// compiler never fuses into an FMA, each NaN result mended to the bits x86
// gives (nan_rules.h); fp16 and bf16 NaNs are widened and narrowed by hand,
// keeping their payloads as the host does; min and max are written as the
// host writes them (simd_scalar.h) so NaNs and ties come out the same.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "daemon/gpu/cuda_status.h"
#include "daemon/gpu/device.h"
#include "daemon/gpu/launch.h"
#include "daemon/gpu/nan_rules.h"

namespace gsync::gpu {

using reduce::DType;
using reduce::Op;

namespace {

namespace nr = nan_rules;

template <class E>
struct Elem;
template <>
struct Elem<float> {
  __device__ static float load(float x) { return x; }
  __device__ static float store(float v) { return v; }
};
template <>
struct Elem<__half> {
  __device__ static float load(__half x) {
    const uint16_t h = __half_as_ushort(x);
    return nr::is_f16_nan(h) ? nr::f16_nan_to_f32(h) : __half2float(x);
  }
  __device__ static __half store(float v) {
    return nr::is_nan(v) ? __ushort_as_half(nr::f32_nan_to_f16(v)) : __float2half_rn(v);
  }
};
template <>
struct Elem<__nv_bfloat16> {
  __device__ static float load(__nv_bfloat16 x) { return nr::bf16_to_f32(__bfloat16_as_ushort(x)); }
  __device__ static __nv_bfloat16 store(float v) {
    return nr::is_nan(v) ? __ushort_as_bfloat16(nr::f32_nan_to_bf16(v)) : __float2bfloat16_rn(v);
  }
};

// The arithmetic, operands in the host's order (src1, src2 of its vaddps,
// vmulps, vdivps), NaN results as the host gives them.
__device__ float add(float a, float b) { return nr::arith(__fadd_rn(a, b), a, b); }
__device__ float mul(float a, float b) { return nr::arith(__fmul_rn(a, b), a, b); }
__device__ float div(float a, float b) { return nr::arith(__fdiv_rn(a, b), a, b); }

template <Op kOp>
__device__ float first(float x, float w) {
  if constexpr (kOp == Op::kWeightedAvg) return mul(x, w);
  return x;
}

template <Op kOp>
__device__ float step(float acc, float x, float w) {
  if constexpr (kOp == Op::kSum || kOp == Op::kAvg) {
    return add(acc, x);
  } else if constexpr (kOp == Op::kWeightedAvg) {
    return add(acc, mul(x, w));
  } else if constexpr (kOp == Op::kMin) {
    return x != x ? x : (x < acc ? x : acc);
  } else {
    return x != x ? x : (x > acc ? x : acc);
  }
}

template <Op kOp>
__device__ float finish(float v, const Launch& a) {
  if constexpr (kOp == Op::kAvg) v = div(v, a.divisor);
  if (a.scaled) v = mul(v, a.scale);
  return v;
}

// kN elements loaded and stored as one access (16 bytes for the vector
// loop, one element for the tail): the alignment makes the compiler emit
// one 128-bit load or store, and the elements are read as what they are.
template <class E, int kN>
struct alignas(sizeof(E) * kN) Pack {
  E e[kN];
};

// kN elements at index i of every input, folded and stored to every output.
template <class E, Op kOp, int kN>
__device__ void fold(const Launch& a, uint64_t i) {
  using P = Pack<E, kN>;
  static_assert(sizeof(P) == kN * sizeof(E));
  float acc[kN];
  {
    const P x = static_cast<const P*>(a.in[0])[i];
#pragma unroll
    for (int k = 0; k < kN; ++k) acc[k] = first<kOp>(Elem<E>::load(x.e[k]), a.w[0]);
  }
  for (int r = 1; r < a.n_in; ++r) {
    const P x = static_cast<const P*>(a.in[r])[i];
#pragma unroll
    for (int k = 0; k < kN; ++k) acc[k] = step<kOp>(acc[k], Elem<E>::load(x.e[k]), a.w[r]);
  }
  P out;
#pragma unroll
  for (int k = 0; k < kN; ++k) out.e[k] = Elem<E>::store(finish<kOp>(acc[k], a));
  for (int o = 0; o < a.n_out; ++o) static_cast<P*>(a.out[o])[i] = out;
}

template <class E, Op kOp>
__global__ void reduce_kernel(Launch a) {
  constexpr int kVec = 16 / sizeof(E);
  const uint64_t stride = uint64_t(gridDim.x) * blockDim.x;
  const uint64_t tid = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (uint64_t i = tid; i < a.n_vec; i += stride) fold<E, kOp, kVec>(a, i);
  // The tail past the last whole 16 bytes (or everything, when a pointer
  // is not 16-byte aligned), one element a thread.
  for (uint64_t i = a.n_vec * kVec + tid; i < a.count; i += stride) fold<E, kOp, 1>(a, i);
}

template <class E>
void* kernel_for(Op op) {
  switch (op) {
    case Op::kSum:
      return reinterpret_cast<void*>(&reduce_kernel<E, Op::kSum>);
    case Op::kAvg:
      return reinterpret_cast<void*>(&reduce_kernel<E, Op::kAvg>);
    case Op::kWeightedAvg:
      return reinterpret_cast<void*>(&reduce_kernel<E, Op::kWeightedAvg>);
    case Op::kMin:
      return reinterpret_cast<void*>(&reduce_kernel<E, Op::kMin>);
    case Op::kMax:
      return reinterpret_cast<void*>(&reduce_kernel<E, Op::kMax>);
  }
  return nullptr;
}

void* kernel_for(DType t, Op op) {
  switch (t) {
    case DType::kF32:
      return kernel_for<float>(op);
    case DType::kF16:
      return kernel_for<__half>(op);
    case DType::kBF16:
      return kernel_for<__nv_bfloat16>(op);
    default:
      return nullptr;
  }
}

}  // namespace

Status Stream::reduce(const reduce::ReduceArgs& args) {
  Launch k;
  if (Status s = plan_launch(args, sm_count_, &k); !s) return s;
  if (k.blocks == 0) return Status::ok();
  if (Status s = cuda_status(cudaSetDevice(device_), "cudaSetDevice", device_); !s) return s;
  void* params[] = {&k};
  return cuda_status(
      cudaLaunchKernel(kernel_for(args.dtype, args.op), dim3(k.blocks), dim3(kThreadsPerBlock),
                       params, 0, static_cast<cudaStream_t>(stream_)),
      "the reduce kernel's launch", device_);
}

}  // namespace gsync::gpu
