// SPDX-License-Identifier: Apache-2.0
//
// Gradient compression codecs (issue #17): lossy encodings of fp32 gradients
// for the cross-host links, with error feedback, and their decoders. The
// byte layouts are docs/compression.md's "Wire formats"; the hot loops run on
// the ISA the reduction kernels run on (active_isa(), force_isa() in
// reduce.h), and every ISA gives the same bytes and the same decoded values.
//
// Codecs work on fp32 gradients only: the caller refuses other dtypes.
// Throughout, v = x + residual, added in fp32 (residual null: v = x).
//
// Error model (docs/errors.md): the encoders trust their caller (params
// checked once with check_params); the decoders take bytes from a peer and
// trust nothing: they return "" or a message naming what is wrong, never
// read past in + len, never write past dst + count, and on an error leave
// dst as it was.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "protocol/ops.h"

namespace gsync::reduce {

using Codec = proto::Codec;

struct CodecParams {
  Codec codec = Codec::kNone;
  uint32_t block = 1024;        // int8: values per scale block; a multiple of 64, >= 64
  double topk_fraction = 0.01;  // topk: fraction kept, in (0, 1]
};

// A codec's params as the caller gave them: "" when valid, else a message
// naming the field ("block 0 is not a positive multiple of 64",
// "topk_fraction 1.5 is outside (0, 1]"). Only the fields the codec reads
// are checked (block for int8, topk_fraction for topk). encode() given
// params that fail this check encodes kDense32, which is exact.
std::string check_params(const CodecParams& p);

// Wire formats (the first byte of every encoded buffer says which; decode
// accepts any of them, so an encoder may fall back to another format per
// buffer). Layouts: docs/compression.md, "Wire formats".
enum class Format : uint8_t { kDense32 = 1, kF16 = 2, kBF16 = 3, kInt8 = 4, kSparse = 5 };

// Bytes an encoding of `count` values can take at most under p (every format
// p's encoder may emit, fallbacks and flagged blocks included). Receivers
// size their landing areas with it. For topk it is the dense size: the
// encoder falls back to it, and merged sums forwarded with
// encode_exact_sparse() never exceed it either.
size_t max_encoded_bytes(const CodecParams& p, size_t count);

// Per-block absolute maxima of v = x + residual (residual may be null =
// zeros), blocks of p.block values (the last one shorter): out[b] = max |v|
// over the block, NaN if any v is NaN, +Inf if any is infinite (NaN wins
// over Inf). ceil(count / p.block) outputs. A NaN output is the canonical
// quiet NaN (0x7fc00000), so every host writes the same bits.
void block_absmax(const CodecParams& p, const float* x, const float* residual, size_t count,
                  float* out);

// Lossy encode with error feedback. v = x + residual (residual null: no
// error feedback, v = x). Writes the encoding of v to out (at least
// max_encoded_bytes), returns its length. If residual is non-null it becomes
// v - decode(encoding) (what the codec dropped), and 0 where the decoded
// value is NaN or infinite: the non-finite value was sent, and a NaN or
// infinite residual would poison every later step. If write_back, x becomes
// decode(encoding) (the caller keeps the same bits as every receiver).
//  - kF16 / kBF16: round to nearest even (bit-exact with half.h and the
//    vector paths of the kernels); fp16 overflow goes to Inf as in half.h.
//  - kInt8: one scale per block. shared_absmax (may be null: use each
//    block's own absmax) gives the block maxima every host agreed on
//    (ceil(count/block) values, e.g. the max over hosts of block_absmax).
//    Block scale s = absmax / 127 computed in fp32, q = round-nearest-even
//    (v * (127 / absmax)) clamped to [-127, 127]. absmax == 0: an all-zero
//    block, encoded as a zero scale and decoded as exact zeros (its values
//    must be zero, else it is encoded raw). absmax NaN or Inf (or any v in
//    the block non-finite), above 2^126 (where the largest value could
//    decode past FLT_MAX), or below 2^-100 (where 127 / absmax would
//    overflow or the scale lose its precision): the block is flagged and
//    carried raw as fp32 (residual 0 for it), so NaN/Inf are never hidden
//    by a scale. With the same shared_absmax every host flags the same
//    blocks and writes the same scale table.
//  - kTopk: keep the k = max(1, ceil(topk_fraction * count)) values of
//    largest |v|, ties broken by lowest index (deterministic), as kSparse
//    (u32 index + f32 value, indices ascending); if that would not be
//    smaller than dense fp32 (or count > 2^32, past the u32 index), emit
//    kDense32 instead (SparCML's rule). NaN counts as the largest magnitude,
//    every NaN the same. The residual of a kept value is 0, of a dropped
//    one v.
//  - kNone: kDense32.
size_t encode(const CodecParams& p, float* x, float* residual, size_t count,
              const float* shared_absmax, bool write_back, uint8_t* out);

// Exact encoding of x as it is (no loss): kSparse of its nonzero values
// when that is smaller than dense (and count <= 2^32), else kDense32. Zero
// means x == 0.0f: +0.0 and -0.0 are left out (and decode as +0.0), a NaN is
// nonzero and kept. Every kept value keeps its bits. Used to forward merged
// top-k sums without re-selecting. At most max_encoded_bytes({}, count).
size_t encode_exact_sparse(const float* x, size_t count, uint8_t* out);

// Bytes from a peer: untrusted. Each returns "" on success or an error
// naming what is wrong ("int8 block 7 has a negative scale", "sparse index
// 5000 outside 4096 values", "encoded length 100 but the header says 120",
// "count 10 but the op's chunk has 12 values"). count is what the receiver
// expects; decode never reads past in+len nor writes past dst+count, and
// leaves dst unchanged on an error.
std::string decode(const uint8_t* in, size_t len, size_t count, float* dst);      // dst = values
std::string decode_add(const uint8_t* in, size_t len, size_t count, float* dst);  // dst += values

// The shared-grid sum (THC / SwitchML): k int8 encodings of the same count
// made with the same shared_absmax (their scale tables must be identical,
// bit for bit, else an error names the block). Sums the int8 values in
// int32 without decoding and decodes once: dst[i] = float(sum_j q_j[i]) *
// s_b; flagged raw blocks are summed in fp32 in j order. All hosts that run
// it on the same inputs in any order of j get the same bits for quantised
// blocks (integer sum) and, for raw blocks, the same bits given the same j
// order. k is at most 2^24, so that the int32 sums cannot overflow.
std::string int8_sum(const uint8_t* const* in, const size_t* len, size_t k, size_t count,
                     float* dst);

}  // namespace gsync::reduce
