// SPDX-License-Identifier: Apache-2.0
//
// The codec loops shared by every ISA (the table in codec_kernels.h).
// codec_{scalar,avx2,avx512}.cc each define, in their own namespace, a
// policy `C` and include this file:
//
//   struct C {
//     using Vec;  using IVec;               // kLanes fp32 / int32 lanes
//     static constexpr size_t kLanes;
//     static Vec load(const float*);  static void store(float*, Vec);
//     static Vec load_bytes(const uint8_t*);  static void store_bytes(uint8_t*, Vec);
//     static Vec set1(float);  static Vec add(Vec, Vec), sub(Vec, Vec), mul(Vec, Vec);
//     static Vec finite_or_zero(Vec d, Vec x);   // x where d is finite, else +0
//     static IVec abs_bits(Vec);  static IVec max_bits(IVec, IVec);  // on bits < 2^31
//     static uint32_t hmax_bits(IVec);  static IVec izero();
//     static IVec quantise(Vec t);   // clamp to [-127, 127], round nearest-even
//     static Vec to_float(IVec);  static IVec iadd(IVec, IVec);
//     static IVec load_i8(const uint8_t*);  static void store_i8(uint8_t*, IVec);
//     using F16;  using BF16;   // static Vec load(const uint8_t*), store(uint8_t*, Vec)
//   };
//
// Whole vectors are processed in place; the tail (fewer than kLanes values)
// goes through zero-padded copies on the stack with the same vector code, so
// it rounds exactly like the rest, and only its valid lanes are copied back.
// As in kernels_impl.h, every template takes the ISA's own types, so each TU
// has distinct instantiations the linker cannot merge, nothing here is a
// plain inline function, and the TUs call no std:: templates.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "daemon/reduce/codec_kernels.h"

namespace gsync::reduce::detail {

// Stack copies of a tail of m < kLanes values; lanes past m are zero.
template <class C>
struct Tail {
  static constexpr size_t kL = C::kLanes;
  alignas(64) float x[kL] = {};
  alignas(64) float r[kL] = {};
  alignas(64) uint8_t out[4 * kL] = {};
};

template <class C, bool kRes>
typename C::Vec value_of(const float* x, const float* r) {
  if constexpr (kRes) {
    return C::add(C::load(x), C::load(r));
  } else {
    (void)r;
    return C::load(x);
  }
}

template <class C, bool kRes>
uint32_t abs_bits_max(const float* x, const float* r, size_t n) {
  constexpr size_t kL = C::kLanes;
  const size_t whole = n / kL * kL;
  typename C::IVec m = C::izero();
  for (size_t i = 0; i < whole; i += kL)
    m = C::max_bits(m, C::abs_bits(value_of<C, kRes>(x + i, r + i)));
  if (whole < n) {
    // Zero lanes have |v| = 0, which changes no maximum.
    Tail<C> t;
    std::memcpy(t.x, x + whole, (n - whole) * sizeof(float));
    if constexpr (kRes) std::memcpy(t.r, r + whole, (n - whole) * sizeof(float));
    m = C::max_bits(m, C::abs_bits(value_of<C, kRes>(t.x, t.r)));
  }
  return C::hmax_bits(m);
}

// Runs step(x, r, out) on every whole vector (out advancing kOutBytes per
// value), then on the tail's padded copies, copying back the m valid values
// of x (if kBack), r (if kRes) and out.
template <class C, bool kRes, bool kBack, size_t kOutBytes, class Step>
void encode_loop(float* x, float* r, size_t n, uint8_t* out, Step step) {
  constexpr size_t kL = C::kLanes;
  const size_t whole = n / kL * kL;
  for (size_t i = 0; i < whole; i += kL) step(x + i, kRes ? r + i : nullptr, out + i * kOutBytes);
  const size_t m = n - whole;
  if (m == 0) return;
  Tail<C> t;
  std::memcpy(t.x, x + whole, m * sizeof(float));
  if constexpr (kRes) std::memcpy(t.r, r + whole, m * sizeof(float));
  step(t.x, t.r, t.out);
  if constexpr (kBack) std::memcpy(x + whole, t.x, m * sizeof(float));
  if constexpr (kRes) std::memcpy(r + whole, t.r, m * sizeof(float));
  std::memcpy(out + whole * kOutBytes, t.out, m * kOutBytes);
}

// Runs step(in, dst) on every whole vector (in advancing kInBytes per
// value), then on padded copies of the tail.
template <class C, size_t kInBytes, class Step>
void decode_loop(const uint8_t* in, size_t n, float* dst, Step step) {
  constexpr size_t kL = C::kLanes;
  const size_t whole = n / kL * kL;
  for (size_t i = 0; i < whole; i += kL) step(in + i * kInBytes, dst + i);
  const size_t m = n - whole;
  if (m == 0) return;
  Tail<C> t;
  std::memcpy(t.out, in + whole * kInBytes, m * kInBytes);
  std::memcpy(t.x, dst + whole, m * sizeof(float));
  step(t.out, t.x);
  std::memcpy(dst + whole, t.x, m * sizeof(float));
}

template <class C, bool kRes, bool kBack>
void dense_encode(float* x, float* r, size_t n, uint8_t* out) {
  encode_loop<C, kRes, kBack, 4>(x, r, n, out, [](float* xp, float* rp, uint8_t* op) {
    const typename C::Vec v = value_of<C, kRes>(xp, rp);
    C::store_bytes(op, v);
    if constexpr (kRes) C::store(rp, C::set1(0.0f));
    if constexpr (kBack) C::store(xp, v);
  });
}

template <class C>
void dense_add(const uint8_t* in, size_t n, float* dst) {
  decode_loop<C, 4>(in, n, dst, [](const uint8_t* ip, float* dp) {
    C::store(dp, C::add(C::load(dp), C::load_bytes(ip)));
  });
}

template <class C, class H, bool kRes, bool kBack>
void half_encode(float* x, float* r, size_t n, uint8_t* out) {
  encode_loop<C, kRes, kBack, 2>(x, r, n, out, [](float* xp, float* rp, uint8_t* op) {
    const typename C::Vec v = value_of<C, kRes>(xp, rp);
    H::store(op, v);
    // Decoded from the bytes just written: exactly what a receiver gets.
    const typename C::Vec d = H::load(op);
    if constexpr (kRes) C::store(rp, C::finite_or_zero(d, C::sub(v, d)));
    if constexpr (kBack) C::store(xp, d);
  });
}

template <class C, class H, bool kAdd>
void half_decode(const uint8_t* in, size_t n, float* dst) {
  decode_loop<C, 2>(in, n, dst, [](const uint8_t* ip, float* dp) {
    const typename C::Vec d = H::load(ip);
    if constexpr (kAdd) {
      C::store(dp, C::add(C::load(dp), d));
    } else {
      C::store(dp, d);
    }
  });
}

template <class C, bool kRes, bool kBack>
void int8_encode(float* x, float* r, size_t n, float inv, float s, uint8_t* q) {
  const typename C::Vec vinv = C::set1(inv);
  const typename C::Vec vs = C::set1(s);
  encode_loop<C, kRes, kBack, 1>(x, r, n, q, [vinv, vs](float* xp, float* rp, uint8_t* qp) {
    const typename C::Vec v = value_of<C, kRes>(xp, rp);
    const typename C::IVec qi = C::quantise(C::mul(v, vinv));
    C::store_i8(qp, qi);
    const typename C::Vec d = C::mul(C::to_float(qi), vs);
    // d is finite but for one case: absmax FLT_MAX, where 127 * (absmax /
    // 127) rounds past it to Inf; codec.h's rule (residual 0 where the
    // decoded value is not finite) keeps the Inf out of the residual.
    if constexpr (kRes) C::store(rp, C::finite_or_zero(d, C::sub(v, d)));
    if constexpr (kBack) C::store(xp, d);
  });
}

template <class C, bool kAdd>
void int8_decode(const uint8_t* q, size_t n, float s, float* dst) {
  const typename C::Vec vs = C::set1(s);
  decode_loop<C, 1>(q, n, dst, [vs](const uint8_t* qp, float* dp) {
    const typename C::Vec d = C::mul(C::to_float(C::load_i8(qp)), vs);
    if constexpr (kAdd) {
      C::store(dp, C::add(C::load(dp), d));
    } else {
      C::store(dp, d);
    }
  });
}

template <class C>
void int8_sum(const uint8_t* const* q, size_t k, size_t offset, size_t n, float s, float* dst) {
  constexpr size_t kL = C::kLanes;
  const typename C::Vec vs = C::set1(s);
  const size_t whole = n / kL * kL;
  for (size_t i = 0; i < whole; i += kL) {
    typename C::IVec acc = C::izero();
    for (size_t j = 0; j < k; ++j) acc = C::iadd(acc, C::load_i8(q[j] + offset + i));
    C::store(dst + i, C::mul(C::to_float(acc), vs));
  }
  const size_t m = n - whole;
  if (m == 0) return;
  Tail<C> t;
  typename C::IVec acc = C::izero();
  for (size_t j = 0; j < k; ++j) {
    std::memcpy(t.out, q[j] + offset + whole, m);
    acc = C::iadd(acc, C::load_i8(t.out));
  }
  C::store(t.x, C::mul(C::to_float(acc), vs));
  std::memcpy(dst + whole, t.x, m * sizeof(float));
}

// The table's entries: the runtime flags become template arguments here, so
// the loops above carry no branches.
template <class C>
struct Entries {
  static uint32_t abs_bits_max(const float* x, const float* r, size_t n) {
    return r ? detail::abs_bits_max<C, true>(x, r, n) : detail::abs_bits_max<C, false>(x, r, n);
  }

  static void dense_encode(float* x, float* r, size_t n, bool back, uint8_t* out) {
    if (r) {
      back ? detail::dense_encode<C, true, true>(x, r, n, out)
           : detail::dense_encode<C, true, false>(x, r, n, out);
    } else {
      // Without a residual, v = x: writing it back changes nothing.
      detail::dense_encode<C, false, false>(x, r, n, out);
    }
  }

  static void dense_add(const uint8_t* in, size_t n, float* dst) {
    detail::dense_add<C>(in, n, dst);
  }

  template <class H>
  static void half_encode_as(float* x, float* r, size_t n, bool back, uint8_t* out) {
    if (r) {
      back ? detail::half_encode<C, H, true, true>(x, r, n, out)
           : detail::half_encode<C, H, true, false>(x, r, n, out);
    } else {
      back ? detail::half_encode<C, H, false, true>(x, r, n, out)
           : detail::half_encode<C, H, false, false>(x, r, n, out);
    }
  }

  static void half_encode(impl::Half h, float* x, float* r, size_t n, bool back, uint8_t* out) {
    h == impl::Half::kF16 ? half_encode_as<typename C::F16>(x, r, n, back, out)
                          : half_encode_as<typename C::BF16>(x, r, n, back, out);
  }

  template <class H>
  static void half_decode_as(const uint8_t* in, size_t n, bool add, float* dst) {
    add ? detail::half_decode<C, H, true>(in, n, dst)
        : detail::half_decode<C, H, false>(in, n, dst);
  }

  static void half_decode(impl::Half h, const uint8_t* in, size_t n, bool add, float* dst) {
    h == impl::Half::kF16 ? half_decode_as<typename C::F16>(in, n, add, dst)
                          : half_decode_as<typename C::BF16>(in, n, add, dst);
  }

  static void int8_encode(float* x, float* r, size_t n, float inv, float s, bool back, uint8_t* q) {
    if (r) {
      back ? detail::int8_encode<C, true, true>(x, r, n, inv, s, q)
           : detail::int8_encode<C, true, false>(x, r, n, inv, s, q);
    } else {
      back ? detail::int8_encode<C, false, true>(x, r, n, inv, s, q)
           : detail::int8_encode<C, false, false>(x, r, n, inv, s, q);
    }
  }

  static void int8_decode(const uint8_t* q, size_t n, float s, bool add, float* dst) {
    add ? detail::int8_decode<C, true>(q, n, s, dst) : detail::int8_decode<C, false>(q, n, s, dst);
  }

  static void int8_sum(const uint8_t* const* q, size_t k, size_t offset, size_t n, float s,
                       float* dst) {
    detail::int8_sum<C>(q, k, offset, n, s, dst);
  }

  static constexpr impl::CodecKernels table() {
    return {&Entries::abs_bits_max, &Entries::dense_encode, &Entries::dense_add,
            &Entries::half_encode,  &Entries::half_decode,  &Entries::int8_encode,
            &Entries::int8_decode,  &Entries::int8_sum};
  }
};

}  // namespace gsync::reduce::detail
