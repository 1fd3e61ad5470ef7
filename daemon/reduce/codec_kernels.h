// SPDX-License-Identifier: Apache-2.0
//
// The codecs' hot loops, one table per ISA (codec_{scalar,avx2,avx512}.cc,
// each in its ISA's library with its -m flags). codec.cc, codec_int8.cc and
// codec_topk.cc (no -m flags) check arguments and bytes, lay out the
// buffers, and call the table of active_isa(). Every loop gives the same
// bits on every ISA: the same fp32 operations in the same order, no FMA
// (-ffp-contract=off), and roundings that are IEEE's or the MXCSR default.
//
// Throughout, v = x + r added in fp32, or v = x when r is null. Byte
// pointers have no alignment; float pointers are float-aligned.
#pragma once

#include <cstddef>
#include <cstdint>

namespace gsync::reduce::impl {

enum class Half : uint8_t { kF16 = 0, kBF16 = 1 };

struct CodecKernels {
  // max over n values of (bits(v) & 0x7fffffff): |v| ordered as unsigned
  // integers, every NaN above +Inf. 0 when n is 0.
  uint32_t (*abs_bits_max)(const float* x, const float* r, size_t n);
  // out = v as fp32 bytes; r = 0; x = v if write_back.
  void (*dense_encode)(float* x, float* r, size_t n, bool write_back, uint8_t* out);
  // dst += the n fp32 values at in.
  void (*dense_add)(const uint8_t* in, size_t n, float* dst);
  // out = v rounded to fp16 / bf16 (2 bytes each); with d the decoded
  // value, r = v - d (0 where d is not finite), x = d if write_back.
  void (*half_encode)(Half h, float* x, float* r, size_t n, bool write_back, uint8_t* out);
  // dst = (or, if add, dst +=) the n fp16 / bf16 values at in.
  void (*half_decode)(Half h, const uint8_t* in, size_t n, bool add, float* dst);
  // One quantised block: q = clamp(v * inv, -127, 127) rounded to nearest
  // even (cvtps2dq, MXCSR default), as int8 bytes at q; with d = float(q) *
  // s, r = v - d (0 where d is not finite) and x = d if write_back. v must be finite (the caller
  // carries blocks with NaN or Inf raw).
  void (*int8_encode)(float* x, float* r, size_t n, float inv, float s, bool write_back,
                      uint8_t* q);
  // dst = (or, if add, dst +=) float(q) * s for the n int8 values at q.
  void (*int8_decode)(const uint8_t* q, size_t n, float s, bool add, float* dst);
  // dst[i] = float(sum over j < k of q[j][offset + i]) * s for i < n, the
  // sum in int32.
  void (*int8_sum)(const uint8_t* const* q, size_t k, size_t offset, size_t n, float s, float* dst);
};

extern const CodecKernels codec_kernels_scalar;
extern const CodecKernels codec_kernels_avx2;
extern const CodecKernels codec_kernels_avx512;

}  // namespace gsync::reduce::impl
