// SPDX-License-Identifier: Apache-2.0
//
// The byte layout of an encoded buffer (docs/compression.md, "Wire
// formats"), shared by codec.cc, codec_int8.cc and codec_topk.cc: the
// 32-byte header every format starts with, the int8 section offsets, and
// the checks a decoder makes before it touches dst. Little-endian, read and
// written with memcpy: the bytes come from a network buffer with no
// alignment.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <string>

#include "daemon/reduce/codec.h"
#include "daemon/reduce/codec_kernels.h"

namespace gsync::reduce::wire {

inline constexpr size_t kHeaderBytes = 32;
inline constexpr uint8_t kVersion = 1;
// Blocks whose absmax is below this are carried raw: 127 / absmax would
// overflow near 2^-121, and the scale absmax / 127 turns subnormal (and
// loses bits) near 2^-119; 2^-100 leaves room on both sides.
inline constexpr float kMinAbsmax = 0x1p-100f;
// And above this: the largest value, 127 * (absmax / 127) rounded in fp32,
// could decode past FLT_MAX to Inf when absmax nears it (2^128); at 2^126
// and below it cannot.
inline constexpr float kMaxAbsmax = 0x1p126f;
// The scale-table entry of a block carried raw as fp32.
inline constexpr uint32_t kRawScaleBits = 0x7f800000u;  // +Inf

//  offset  size  field
//       0     1  format (Format)
//       1     1  version (kVersion)
//       2     2  zero
//       4     4  block: int8 values per scale block; 0 in other formats
//       8     8  count: values encoded
//      16     8  n: int8 raw blocks; sparse entries; 0 in other formats
//      24     8  length: bytes of the whole encoding, header included
struct Header {
  Format format = Format::kDense32;
  uint32_t block = 0;
  uint64_t count = 0;
  uint64_t n = 0;
  uint64_t length = 0;
};

void put_header(uint8_t* out, const Header& h);

// Reads and checks the header of in[0, len) against the count the receiver
// expects: "" or what is wrong. Checks the fields every format shares and
// that the length the format implies is len; the per-format contents are the
// decoder's to check.
std::string read_header(const uint8_t* in, size_t len, size_t count, Header* h);

// Where the int8 sections start: the scale table right after the header,
// the int8 values and the raw fp32 values each on a 64-byte boundary of the
// buffer (so a 64-byte aligned landing area gives aligned vector loads).
struct Int8Layout {
  size_t blocks = 0;      // ceil(count / block)
  size_t q_offset = 0;    // count int8 values
  size_t raw_offset = 0;  // the raw fp32 values of flagged blocks, in block order
};
Int8Layout int8_layout(size_t count, size_t block);
// Bytes of an int8 encoding carrying raw_values fp32 values raw (no raw
// section, and no padding before it, when there are none).
size_t int8_length(const Int8Layout& l, size_t count, size_t raw_values);

// The table for active_isa().
const impl::CodecKernels& kernels();

// Inline: topk runs them on every value. Only the codec TUs without -m
// flags include this file, so no ISA's copy can stand in for another's.
inline uint32_t bits_of(float f) { return std::bit_cast<uint32_t>(f); }
inline float float_of(uint32_t bits) { return std::bit_cast<float>(bits); }

// Encoders and decoders of codec_int8.cc and codec_topk.cc, called by
// codec.cc once params and the header have been checked.
size_t encode_int8(const CodecParams& p, float* x, float* r, size_t count,
                   const float* shared_absmax, bool write_back, uint8_t* out);
size_t encode_topk(const CodecParams& p, float* x, float* r, size_t count, bool write_back,
                   uint8_t* out);
size_t encode_dense(float* x, float* r, size_t count, bool write_back, uint8_t* out);
std::string decode_int8(const Header& h, const uint8_t* in, size_t count, bool add, float* dst);

}  // namespace gsync::reduce::wire
