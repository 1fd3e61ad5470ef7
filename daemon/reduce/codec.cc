// SPDX-License-Identifier: Apache-2.0
//
// The codecs' entry points (codec.h): params, sizes, the header, the dense,
// fp16 / bf16 and sparse formats, and the routing to the ISA loops
// (codec_kernels.h) and to the int8 and top-k encoders (codec_int8.cc,
// codec_topk.cc). Compiled without -m flags, like dispatch.cc: it decides
// which ISA's code may run.
#include <cstdio>
#include <cstring>
#include <string>

#include "daemon/reduce/codec.h"
#include "daemon/reduce/codec_kernels.h"
#include "daemon/reduce/codec_wire.h"
#include "daemon/reduce/reduce.h"

namespace gsync::reduce {
namespace {

using wire::Header;
using wire::kHeaderBytes;

// Counts past this would overflow the byte arithmetic below (8 bytes per
// sparse entry, 5 per int8 value with its raw copy); no chunk comes near.
constexpr uint64_t kMaxCount = uint64_t{1} << 58;
// A sparse index is a u32.
constexpr uint64_t kMaxSparseCount = uint64_t{1} << 32;

const char* format_name(Format f) {
  switch (f) {
    case Format::kDense32:
      return "dense32";
    case Format::kF16:
      return "fp16";
    case Format::kBF16:
      return "bf16";
    case Format::kInt8:
      return "int8";
    case Format::kSparse:
      return "sparse";
  }
  return "unknown-format";
}

template <class T>
T read_le(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);  // x86-64 is little-endian, as the wire
  return v;
}

template <class T>
void write_le(uint8_t* p, T v) {
  std::memcpy(p, &v, sizeof v);
}

std::string block_error(uint32_t block) {
  if (block == 0 || block % 64 != 0) {
    return "block " + std::to_string(block) + " is not a positive multiple of 64";
  }
  return "";
}

size_t dense_bytes(size_t count) { return kHeaderBytes + 4 * count; }

size_t sparse_bytes(size_t entries) { return kHeaderBytes + 8 * entries; }

size_t encode_half(Format f, float* x, float* r, size_t count, bool write_back, uint8_t* out) {
  const impl::Half h = f == Format::kF16 ? impl::Half::kF16 : impl::Half::kBF16;
  wire::kernels().half_encode(h, x, r, count, write_back, out + kHeaderBytes);
  const size_t length = kHeaderBytes + 2 * count;
  wire::put_header(out, {f, 0, count, 0, length});
  return length;
}

// The per-format fields of a header that read_header can check alone; the
// int8 table is decode_int8's.
std::string check_format_fields(const Header& h, size_t count) {
  const std::string fmt = format_name(h.format);
  if (h.format == Format::kInt8) {
    if (std::string why = block_error(h.block); !why.empty()) return "int8 " + why;
    return "";
  }
  if (h.block != 0) return fmt + " header has block " + std::to_string(h.block) + ", not 0";
  uint64_t want = 0;
  switch (h.format) {
    case Format::kDense32:
      want = dense_bytes(count);
      break;
    case Format::kF16:
    case Format::kBF16:
      want = kHeaderBytes + 2 * count;
      break;
    case Format::kSparse:
      if (h.n > count) {
        return "sparse header has " + std::to_string(h.n) + " entries for " +
               std::to_string(count) + " values";
      }
      want = sparse_bytes(h.n);
      break;
    case Format::kInt8:
      break;
  }
  if (h.format != Format::kSparse && h.n != 0) {
    return fmt + " header has n " + std::to_string(h.n) + ", not 0";
  }
  if (h.length != want) {
    return fmt + " encoding of " + std::to_string(count) + " values is " + std::to_string(want) +
           " bytes, the header says " + std::to_string(h.length);
  }
  return "";
}

// Sparse entries: indices below count and strictly ascending, so each value
// lands once. Checked before dst is touched.
std::string check_sparse(const uint8_t* in, const Header& h, size_t count) {
  const uint8_t* e = in + kHeaderBytes;
  uint64_t prev = 0;
  for (uint64_t i = 0; i < h.n; ++i, e += 8) {
    const uint32_t index = read_le<uint32_t>(e);
    if (index >= count) {
      return "sparse index " + std::to_string(index) + " outside " + std::to_string(count) +
             " values";
    }
    if (i > 0 && index <= prev) {
      return "sparse entry " + std::to_string(i) + " has index " + std::to_string(index) +
             " after index " + std::to_string(prev) + ": indices must ascend";
    }
    prev = index;
  }
  return "";
}

void apply_sparse(const uint8_t* in, const Header& h, size_t count, bool add, float* dst) {
  if (!add && count > 0) std::memset(dst, 0, count * sizeof(float));
  const uint8_t* e = in + kHeaderBytes;
  for (uint64_t i = 0; i < h.n; ++i, e += 8) {
    const uint32_t index = read_le<uint32_t>(e);
    if (add) {
      dst[index] += read_le<float>(e + 4);
    } else {
      std::memcpy(dst + index, e + 4, sizeof(float));  // the bits as sent
    }
  }
}

std::string decode_into(const uint8_t* in, size_t len, size_t count, bool add, float* dst) {
  Header h;
  if (std::string why = wire::read_header(in, len, count, &h); !why.empty()) return why;
  const impl::CodecKernels& k = wire::kernels();
  switch (h.format) {
    case Format::kDense32:
      if (add) {
        k.dense_add(in + kHeaderBytes, count, dst);
      } else if (count > 0) {
        std::memcpy(dst, in + kHeaderBytes, count * sizeof(float));
      }
      return "";
    case Format::kF16:
      k.half_decode(impl::Half::kF16, in + kHeaderBytes, count, add, dst);
      return "";
    case Format::kBF16:
      k.half_decode(impl::Half::kBF16, in + kHeaderBytes, count, add, dst);
      return "";
    case Format::kSparse:
      if (std::string why = check_sparse(in, h, count); !why.empty()) return why;
      apply_sparse(in, h, count, add, dst);
      return "";
    case Format::kInt8:
      return wire::decode_int8(h, in, count, add, dst);
  }
  return "format byte names no codec format";
}

}  // namespace

namespace wire {

const impl::CodecKernels& kernels() {
  switch (active_isa()) {
    case Isa::kAvx512:
      return impl::codec_kernels_avx512;
    case Isa::kAvx2:
      return impl::codec_kernels_avx2;
    case Isa::kScalar:
      break;
  }
  return impl::codec_kernels_scalar;
}

void put_header(uint8_t* out, const Header& h) {
  out[0] = static_cast<uint8_t>(h.format);
  out[1] = kVersion;
  write_le<uint16_t>(out + 2, 0);
  write_le<uint32_t>(out + 4, h.block);
  write_le<uint64_t>(out + 8, h.count);
  write_le<uint64_t>(out + 16, h.n);
  write_le<uint64_t>(out + 24, h.length);
}

std::string read_header(const uint8_t* in, size_t len, size_t count, Header* h) {
  if (len < kHeaderBytes || in == nullptr) {
    return "encoded length " + std::to_string(len) + " is shorter than the " +
           std::to_string(kHeaderBytes) + "-byte header";
  }
  if (in[0] < static_cast<uint8_t>(Format::kDense32) ||
      in[0] > static_cast<uint8_t>(Format::kSparse)) {
    return "format byte " + std::to_string(in[0]) + " names no codec format";
  }
  if (in[1] != kVersion) {
    return "codec version " + std::to_string(in[1]) + ", this build reads version " +
           std::to_string(kVersion);
  }
  if (read_le<uint16_t>(in + 2) != 0) return "header bytes 2-3 are not zero";
  h->format = static_cast<Format>(in[0]);
  h->block = read_le<uint32_t>(in + 4);
  h->count = read_le<uint64_t>(in + 8);
  h->n = read_le<uint64_t>(in + 16);
  h->length = read_le<uint64_t>(in + 24);
  if (h->length != len) {
    return "encoded length " + std::to_string(len) + " but the header says " +
           std::to_string(h->length);
  }
  if (h->count != count) {
    return "count " + std::to_string(h->count) + " but the op's chunk has " +
           std::to_string(count) + " values";
  }
  if (count > kMaxCount) return "count " + std::to_string(count) + " is past what a codec carries";
  return check_format_fields(*h, count);
}

Int8Layout int8_layout(size_t count, size_t block) {
  Int8Layout l;
  l.blocks = (count + block - 1) / block;
  l.q_offset = (kHeaderBytes + 4 * l.blocks + 63) / 64 * 64;
  l.raw_offset = (l.q_offset + count + 63) / 64 * 64;
  return l;
}

size_t int8_length(const Int8Layout& l, size_t count, size_t raw_values) {
  return raw_values == 0 ? l.q_offset + count : l.raw_offset + 4 * raw_values;
}

size_t encode_dense(float* x, float* r, size_t count, bool write_back, uint8_t* out) {
  kernels().dense_encode(x, r, count, write_back, out + kHeaderBytes);
  const size_t length = dense_bytes(count);
  put_header(out, {Format::kDense32, 0, count, 0, length});
  return length;
}

}  // namespace wire

std::string check_params(const CodecParams& p) {
  Codec known{};
  if (!proto::codec_from_wire(static_cast<int>(p.codec), &known)) {
    return "codec " + std::to_string(static_cast<int>(p.codec)) + " names no codec";
  }
  if (p.codec == Codec::kInt8) return block_error(p.block);
  if (p.codec == Codec::kTopk && !(p.topk_fraction > 0.0 && p.topk_fraction <= 1.0)) {
    char text[32];
    std::snprintf(text, sizeof text, "%g", p.topk_fraction);
    return std::string("topk_fraction ") + text + " is outside (0, 1]";
  }
  return "";
}

size_t max_encoded_bytes(const CodecParams& p, size_t count) {
  const size_t dense = dense_bytes(count);
  if (!check_params(p).empty()) return dense;  // encode() falls back to dense
  switch (p.codec) {
    case Codec::kF16:
    case Codec::kBF16:
      return kHeaderBytes + 2 * count;
    case Codec::kInt8: {
      // Every block flagged: all values raw, beside the zeroed int8 section.
      const wire::Int8Layout l = wire::int8_layout(count, p.block);
      return wire::int8_length(l, count, count);
    }
    case Codec::kNone:
    case Codec::kTopk:
      break;
  }
  return dense;
}

size_t encode(const CodecParams& p, float* x, float* residual, size_t count,
              const float* shared_absmax, bool write_back, uint8_t* out) {
  if (!check_params(p).empty()) return wire::encode_dense(x, residual, count, write_back, out);
  switch (p.codec) {
    case Codec::kF16:
      return encode_half(Format::kF16, x, residual, count, write_back, out);
    case Codec::kBF16:
      return encode_half(Format::kBF16, x, residual, count, write_back, out);
    case Codec::kInt8:
      return wire::encode_int8(p, x, residual, count, shared_absmax, write_back, out);
    case Codec::kTopk:
      return wire::encode_topk(p, x, residual, count, write_back, out);
    case Codec::kNone:
      break;
  }
  return wire::encode_dense(x, residual, count, write_back, out);
}

size_t encode_exact_sparse(const float* x, size_t count, uint8_t* out) {
  size_t nonzero = 0;
  for (size_t i = 0; i < count; ++i) nonzero += x[i] != 0.0f;  // NaN != 0, -0.0 == 0
  if (count > kMaxSparseCount || sparse_bytes(nonzero) >= dense_bytes(count)) {
    if (count > 0) std::memcpy(out + kHeaderBytes, x, count * sizeof(float));
    const size_t length = dense_bytes(count);
    wire::put_header(out, {Format::kDense32, 0, count, 0, length});
    return length;
  }
  uint8_t* e = out + kHeaderBytes;
  for (size_t i = 0; i < count; ++i) {
    if (x[i] == 0.0f) continue;
    write_le<uint32_t>(e, static_cast<uint32_t>(i));
    std::memcpy(e + 4, x + i, sizeof(float));
    e += 8;
  }
  const size_t length = sparse_bytes(nonzero);
  wire::put_header(out, {Format::kSparse, 0, count, nonzero, length});
  return length;
}

std::string decode(const uint8_t* in, size_t len, size_t count, float* dst) {
  return decode_into(in, len, count, false, dst);
}

std::string decode_add(const uint8_t* in, size_t len, size_t count, float* dst) {
  return decode_into(in, len, count, true, dst);
}

}  // namespace gsync::reduce
