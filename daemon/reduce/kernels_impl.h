// SPDX-License-Identifier: Apache-2.0
//
// The block loop shared by every ISA. kernels_{scalar,avx2,avx512}.cc each
// define, in their own namespace, a `Target` policy and include this file:
//
//   struct Target {
//     using F32 = ...; F16, BF16, F64, I32, U8   // one "kind" per dtype, below
//     static void copy(void* dst, const void* src, size_t bytes, bool stream);
//     static void fence();                   // after streaming stores
//   };
//
//   struct Kind {
//     using Elem;    // storage type (uint16_t for fp16/bf16)
//     using Scalar;  // accumulator lane type (float, double, int32_t, uint8_t)
//     using Vec;     // kLanes accumulator lanes
//     static constexpr size_t kLanes;
//     static Vec load(const Elem*);   static void store(Elem*, Vec);   // unaligned
//     static Vec load_acc(const Scalar*); static void store_acc(Scalar*, Vec);
//     static Vec set1(Scalar);
//     static Vec add(Vec, Vec), min(Vec acc, Vec x), max(Vec acc, Vec x);
//     static Vec mul(Vec, Vec);              // kWeightedAvg, floats only
//     static Vec divide(Vec acc, size_t n);  // kAvg
//   };
//
// Every template here takes the ISA's own types as parameters, so each TU
// gets distinct instantiations (distinct symbols): the linker can never merge
// an AVX-512 copy into the scalar path. For the same reason nothing here is a
// plain inline function, and the TUs call no std:: templates.
#pragma once

#include <cstddef>
#include <cstring>
#include <type_traits>

#include "daemon/reduce/reduce.h"

namespace gsync::reduce::detail {

// Accumulator bytes per block. 4 KiB of accumulator plus up to 4 input
// streams per pass stays in the 32 KiB L1d, and a block is large enough that
// the per-block overhead (pointer setup, the pack and copy passes) is noise.
inline constexpr size_t kAccBytes = 4096;
// Inputs folded per pass over the accumulator: fewer passes means fewer L1
// round trips of the accumulator and more memory streams in flight.
inline constexpr size_t kInputsPerPass = 4;

template <class K, Op kOp>
struct Fold {
  using Vec = typename K::Vec;
  using Scalar = typename K::Scalar;

  // The first input of the fold (acc = in[0], or in[0] * w0).
  static Vec first(Vec x, Scalar w) {
    if constexpr (kOp == Op::kWeightedAvg) {
      return K::mul(x, K::set1(w));
    } else {
      (void)w;
      return x;
    }
  }

  // acc = op(acc, x), in this operand order (it decides ties and NaNs).
  static Vec step(Vec acc, Vec x, Scalar w) {
    if constexpr (kOp == Op::kSum || kOp == Op::kAvg) {
      (void)w;
      return K::add(acc, x);
    } else if constexpr (kOp == Op::kWeightedAvg) {
      return K::add(acc, K::mul(x, K::set1(w)));
    } else if constexpr (kOp == Op::kMin) {
      (void)w;
      return K::min(acc, x);
    } else {
      (void)w;
      return K::max(acc, x);
    }
  }
};

// One pass over an n-element block: folds kN inputs into acc (or, for the
// first pass, starts acc from in[0]). The tail past the last whole vector is
// loaded through a zero-padded copy; the padded lanes of acc are never
// stored to an output.
template <class K, Op kOp, bool kFirst, size_t kN>
struct Pass {
  using Elem = typename K::Elem;
  using Scalar = typename K::Scalar;
  using Vec = typename K::Vec;
  static constexpr size_t kL = K::kLanes;

  static Vec fold_one(const Scalar* acc, const Scalar* w, size_t i, const Vec* x) {
    Vec a;
    size_t j = 0;
    if constexpr (kFirst) {
      a = Fold<K, kOp>::first(x[0], w[0]);
      j = 1;
    } else {
      a = K::load_acc(acc + i);
    }
    for (; j < kN; ++j) a = Fold<K, kOp>::step(a, x[j], w[j]);
    return a;
  }

  static void run(Scalar* acc, const Elem* const* in, const Scalar* w, size_t n) {
    const size_t whole = n / kL * kL;
    for (size_t i = 0; i < whole; i += kL) {
      Vec x[kN];
      for (size_t j = 0; j < kN; ++j) x[j] = K::load(in[j] + i);
      K::store_acc(acc + i, fold_one(acc, w, i, x));
    }
    if (whole < n) {
      alignas(64) Elem tmp[kN][kL] = {};
      Vec x[kN];
      for (size_t j = 0; j < kN; ++j) {
        std::memcpy(tmp[j], in[j] + whole, (n - whole) * sizeof(Elem));
        x[j] = K::load(tmp[j]);
      }
      K::store_acc(acc + whole, fold_one(acc, w, whole, x));
    }
  }
};

template <class K, Op kOp, bool kFirst>
void fold_pass(typename K::Scalar* acc, const typename K::Elem* const* in,
               const typename K::Scalar* w, size_t n_in, size_t n) {
  static_assert(kInputsPerPass == 4);
  switch (n_in) {
    case 1:
      Pass<K, kOp, kFirst, 1>::run(acc, in, w, n);
      break;
    case 2:
      Pass<K, kOp, kFirst, 2>::run(acc, in, w, n);
      break;
    case 3:
      Pass<K, kOp, kFirst, 3>::run(acc, in, w, n);
      break;
    default:
      Pass<K, kOp, kFirst, 4>::run(acc, in, w, n);
      break;
  }
}

// An output that is also an input (in-place allreduce) was just read, so its
// lines are in the cache: plain stores there cost no read-for-ownership, and
// streaming stores would only add the invalidation of those lines (measured:
// in place, streaming is 30% slower; out of place, twice as fast).
// (Templated on the ISA only to keep one instantiation per TU; see the top.)
template <class I>
bool is_input(const ReduceArgs& args, const void* out) {
  for (size_t r = 0; r < args.n_inputs; ++r) {
    if (args.inputs[r] == out) return true;
  }
  return false;
}

template <class I, class K, Op kOp>
void run_kernel(const ReduceArgs& args, size_t begin, size_t end, bool stream) {
  using Elem = typename K::Elem;
  using Scalar = typename K::Scalar;
  using Vec = typename K::Vec;
  constexpr size_t kL = K::kLanes;
  constexpr size_t kBlock = kAccBytes / sizeof(Scalar);
  static_assert(kBlock % kL == 0);
  // Elem == Scalar (fp32, fp64, int32): the accumulator is already the output
  // format. fp16/bf16 are packed once per block, then copied to each output.
  constexpr bool kPack = sizeof(Elem) != sizeof(Scalar);
  constexpr bool kDivide = kOp == Op::kAvg;

  alignas(64) Scalar acc[kBlock];
  alignas(64) Elem packed[kPack ? kBlock : 1];

  const size_t n_in = args.n_inputs;
  const size_t n_div = args.divisor ? args.divisor : n_in;
  double weight_sum = 1.0;
  if constexpr (kOp == Op::kWeightedAvg) {
    if (args.normalize_weights) {
      weight_sum = 0.0;
      for (size_t r = 0; r < n_in; ++r) weight_sum += args.weights[r];
    }
  }
  // A scale on an integer tensor has no meaning; reduce_range's callers
  // only set it on floats.
  const bool scaled = !std::is_integral_v<Scalar> && args.scale != 1.0;
  const Vec scale = K::set1(static_cast<Scalar>(args.scale));
  auto finish = [&](Vec v) {
    if constexpr (kDivide) v = K::divide(v, n_div);
    if constexpr (!std::is_integral_v<Scalar>) {
      if (scaled) v = K::mul(v, scale);
    }
    return v;
  };

  for (size_t off = begin; off < end; off += kBlock) {
    const size_t n = end - off < kBlock ? end - off : kBlock;

    // Read phase: every input of the block, before any output is written
    // (outputs may alias inputs).
    for (size_t r = 0; r < n_in; r += kInputsPerPass) {
      const size_t k = n_in - r < kInputsPerPass ? n_in - r : kInputsPerPass;
      const Elem* in[kInputsPerPass] = {};
      Scalar w[kInputsPerPass] = {};
      for (size_t j = 0; j < k; ++j) {
        in[j] = static_cast<const Elem*>(args.inputs[r + j]) + off;
        if constexpr (kOp == Op::kWeightedAvg) {
          w[j] = static_cast<Scalar>(args.weights[r + j] / weight_sum);
        }
      }
      if (r == 0) {
        fold_pass<K, kOp, true>(acc, in, w, k, n);
      } else {
        fold_pass<K, kOp, false>(acc, in, w, k, n);
      }
    }

    // Finish in the cache: divide (kAvg) and narrow (fp16/bf16) once.
    const size_t padded = (n + kL - 1) / kL * kL;
    const void* src = acc;
    if constexpr (kPack) {
      for (size_t i = 0; i < padded; i += kL) K::store(packed + i, finish(K::load_acc(acc + i)));
      src = packed;
    } else if (kDivide || scaled) {
      for (size_t i = 0; i < padded; i += kL) K::store_acc(acc + i, finish(K::load_acc(acc + i)));
    }

    // Write phase.
    for (size_t o = 0; o < args.n_outputs; ++o) {
      I::copy(static_cast<Elem*>(args.outputs[o]) + off, src, n * sizeof(Elem),
              stream && !is_input<I>(args, args.outputs[o]));
    }
  }
  if (stream) I::fence();
}

template <class I, class K>
void run_op(const ReduceArgs& args, size_t begin, size_t end, bool stream) {
  switch (args.op) {
    case Op::kSum:
      run_kernel<I, K, Op::kSum>(args, begin, end, stream);
      break;
    case Op::kAvg:
      run_kernel<I, K, Op::kAvg>(args, begin, end, stream);
      break;
    case Op::kWeightedAvg:
      // The dispatcher rejects int32 (supported() is false), but the template
      // must still compile for it.
      if constexpr (!std::is_integral_v<typename K::Scalar>) {
        run_kernel<I, K, Op::kWeightedAvg>(args, begin, end, stream);
      }
      break;
    case Op::kMin:
      run_kernel<I, K, Op::kMin>(args, begin, end, stream);
      break;
    case Op::kMax:
      run_kernel<I, K, Op::kMax>(args, begin, end, stream);
      break;
  }
}

// The per-ISA entry point's body. Arguments are checked by reduce_range().
template <class I>
void reduce_range_impl(const ReduceArgs& args, size_t begin, size_t end) {
  if (begin >= end || args.n_inputs == 0) return;
  // Decided on the whole tensor, not the range, so that every thread working
  // on one tensor makes the same choice.
  const bool stream = args.count * dtype_size(args.dtype) * args.n_outputs >= streaming_threshold();
  switch (args.dtype) {
    case DType::kF32:
      run_op<I, typename I::F32>(args, begin, end, stream);
      break;
    case DType::kF16:
      run_op<I, typename I::F16>(args, begin, end, stream);
      break;
    case DType::kBF16:
      run_op<I, typename I::BF16>(args, begin, end, stream);
      break;
    case DType::kF64:
      run_op<I, typename I::F64>(args, begin, end, stream);
      break;
    case DType::kI32:
      run_op<I, typename I::I32>(args, begin, end, stream);
      break;
    case DType::kU8:
      run_op<I, typename I::U8>(args, begin, end, stream);
      break;
  }
}

}  // namespace gsync::reduce::detail
