// SPDX-License-Identifier: Apache-2.0
//
// int8 with one fp32 scale per block (codec.h, docs/compression.md): the
// block maxima, the encoder, the checks and decoder of a peer's bytes, and
// the shared-grid sum of several hosts' encodings (THC, SwitchML: sum the
// integers, scale once). The loops are the ISA table's; what is decided per
// block (its scale, or that it goes raw) is decided here, once for every ISA.
#include <cstring>
#include <string>
#include <vector>

#include "daemon/reduce/codec.h"
#include "daemon/reduce/codec_kernels.h"
#include "daemon/reduce/codec_wire.h"

namespace gsync::reduce {
namespace {

using wire::bits_of;
using wire::float_of;
using wire::Header;
using wire::kHeaderBytes;

constexpr uint32_t kAbsMask = 0x7fffffffu;
constexpr uint32_t kInfBits = 0x7f800000u;
constexpr uint32_t kQuietNan = 0x7fc00000u;
// int8_sum's k limit: 2^24 * 127 < 2^31, so no int32 sum overflows.
constexpr size_t kMaxSumInputs = size_t{1} << 24;

enum class BlockKind { kQuantised, kZero, kRaw };

// A block's max |v| as abs_bits_max gives it, as a float: NaN canonical.
float absmax_of(uint32_t abs_bits) { return float_of(abs_bits > kInfBits ? kQuietNan : abs_bits); }

// eff is the absmax the block is scaled by (the hosts' shared one, or its
// own); local_bits its own, from abs_bits_max. Everything that is not a
// finite block with a usable scale, or a block of zeros under a zero scale,
// goes raw. Given a correct shared absmax (the max over hosts), local
// values cannot make a block raw that the shared absmax does not, so every
// host decides alike.
BlockKind classify(float eff, uint32_t local_bits) {
  if (local_bits >= kInfBits) return BlockKind::kRaw;  // a NaN or Inf in the block
  const uint32_t eff_bits = bits_of(eff) & kAbsMask;
  if (eff_bits >= kInfBits) return BlockKind::kRaw;
  if (eff == 0.0f) return local_bits == 0 ? BlockKind::kZero : BlockKind::kRaw;
  return eff >= wire::kMinAbsmax && eff <= wire::kMaxAbsmax ? BlockKind::kQuantised
                                                              : BlockKind::kRaw;
}

size_t block_length(size_t b, size_t block, size_t count) {
  const size_t off = b * block;
  return count - off < block ? count - off : block;
}

uint32_t scale_bits(const uint8_t* in, size_t b) {
  uint32_t bits;
  std::memcpy(&bits, in + kHeaderBytes + 4 * b, sizeof bits);
  return bits;
}

bool all_zero(const uint8_t* p, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (p[i] != 0) return false;
  }
  return true;
}

// What a checked int8 encoding holds beyond its header.
struct Int8Check {
  wire::Int8Layout layout;
  size_t raw_values = 0;
};

std::string check_scales(const Header& h, const uint8_t* in, size_t count, Int8Check* c) {
  const wire::Int8Layout& l = c->layout;
  uint64_t raw_blocks = 0;
  for (size_t b = 0; b < l.blocks; ++b) {
    const uint32_t bits = scale_bits(in, b);
    if (bits == wire::kRawScaleBits) {
      raw_blocks++;
      c->raw_values += block_length(b, h.block, count);
    } else if ((bits & kAbsMask) > kInfBits) {
      return "int8 block " + std::to_string(b) + " has a NaN scale";
    } else if ((bits & ~kAbsMask) != 0) {
      return "int8 block " + std::to_string(b) + " has a negative scale";
    }
  }
  if (raw_blocks != h.n) {
    return "int8 header says " + std::to_string(h.n) + " raw blocks but the scale table marks " +
           std::to_string(raw_blocks);
  }
  return "";
}

// Everything about a peer's int8 bytes, before any of dst is touched: the
// scales, the length they imply, zero padding, and zero int8 values where
// the scale carries none (a zero or raw block).
std::string check_int8(const Header& h, const uint8_t* in, size_t count, Int8Check* c) {
  *c = Int8Check{};
  c->layout = wire::int8_layout(count, h.block);
  const wire::Int8Layout& l = c->layout;
  if (h.length < l.q_offset + count) {
    return "int8 encoding of " + std::to_string(count) + " values needs at least " +
           std::to_string(l.q_offset + count) + " bytes, the header says " +
           std::to_string(h.length);
  }
  if (std::string why = check_scales(h, in, count, c); !why.empty()) return why;
  const size_t want = wire::int8_length(l, count, c->raw_values);
  if (h.length != want) {
    return "int8 encoding of " + std::to_string(count) + " values with " + std::to_string(h.n) +
           " raw blocks is " + std::to_string(want) + " bytes, the header says " +
           std::to_string(h.length);
  }
  const size_t table_end = kHeaderBytes + 4 * l.blocks;
  const size_t q_end = l.q_offset + count;
  if (!all_zero(in + table_end, l.q_offset - table_end) ||
      (c->raw_values > 0 && !all_zero(in + q_end, l.raw_offset - q_end))) {
    return "int8 padding bytes are not zero";
  }
  for (size_t b = 0; b < l.blocks; ++b) {
    const uint32_t bits = scale_bits(in, b);
    if (bits != 0 && bits != wire::kRawScaleBits) continue;
    if (!all_zero(in + l.q_offset + b * h.block, block_length(b, h.block, count))) {
      return "int8 block " + std::to_string(b) + (bits == 0 ? " has scale 0" : " is raw") +
             " but nonzero int8 values";
    }
  }
  return "";
}

// Asks for the next block's lines while this one is quantised. Each block
// is two passes, the maxima (from memory) and the quantiser (from L1); the
// hardware prefetcher sees no misses during the second and stops running
// ahead, so without this the memory sits idle for half of every block.
// Measured on 64 MiB: encode 7.0 -> 8.7 GB/s, with a residual 4.5 -> 5.3
// (medians of A/B runs; one block ahead beat two).
void prefetch_block(const float* p, size_t n) {
  const char* c = reinterpret_cast<const char*>(p);
  for (size_t o = 0; o < n * sizeof(float); o += 64) __builtin_prefetch(c + o);
}

}  // namespace

void block_absmax(const CodecParams& p, const float* x, const float* residual, size_t count,
                  float* out) {
  if (p.block == 0 || p.block % 64 != 0) return;  // check_params refuses it
  const impl::CodecKernels& k = wire::kernels();
  for (size_t off = 0, b = 0; off < count; off += p.block, ++b) {
    const size_t n = block_length(b, p.block, count);
    out[b] = absmax_of(k.abs_bits_max(x + off, residual ? residual + off : nullptr, n));
  }
}

namespace wire {

size_t encode_int8(const CodecParams& p, float* x, float* r, size_t count,
                   const float* shared_absmax, bool write_back, uint8_t* out) {
  const impl::CodecKernels& k = kernels();
  const Int8Layout l = int8_layout(count, p.block);
  uint8_t* q = out + l.q_offset;
  uint8_t* raw = out + l.raw_offset;
  const size_t table_end = kHeaderBytes + 4 * l.blocks;
  std::memset(out + table_end, 0, l.q_offset - table_end);
  size_t raw_values = 0;
  uint64_t raw_blocks = 0;
  for (size_t b = 0; b < l.blocks; ++b) {
    const size_t off = b * p.block;
    const size_t n = block_length(b, p.block, count);
    float* xb = x + off;
    float* rb = r ? r + off : nullptr;
    // The block's own maximum, from the same v as the quantiser's; its
    // lines stay in L1 for the pass that follows.
    const uint32_t local = k.abs_bits_max(xb, rb, n);
    if (b + 1 < l.blocks) {
      const size_t next = block_length(b + 1, p.block, count);
      prefetch_block(xb + p.block, next);
      if (rb) prefetch_block(rb + p.block, next);
    }
    const float eff = shared_absmax ? shared_absmax[b] : absmax_of(local);
    uint32_t scale = 0;
    switch (classify(eff, local)) {
      case BlockKind::kQuantised: {
        const float s = eff / 127.0f;
        scale = bits_of(s);
        k.int8_encode(xb, rb, n, 127.0f / eff, s, write_back, q + off);
        break;
      }
      case BlockKind::kZero:
        // A multiply by zero: q = 0 and the decoded values are +0.
        k.int8_encode(xb, rb, n, 0.0f, 0.0f, write_back, q + off);
        break;
      case BlockKind::kRaw:
        scale = kRawScaleBits;
        std::memset(q + off, 0, n);
        k.dense_encode(xb, rb, n, write_back, raw + 4 * raw_values);
        raw_values += n;
        raw_blocks++;
        break;
    }
    std::memcpy(out + kHeaderBytes + 4 * b, &scale, sizeof scale);
  }
  if (raw_values > 0) std::memset(q + count, 0, l.raw_offset - (l.q_offset + count));
  const size_t length = int8_length(l, count, raw_values);
  put_header(out, {Format::kInt8, p.block, count, raw_blocks, length});
  return length;
}

std::string decode_int8(const Header& h, const uint8_t* in, size_t count, bool add, float* dst) {
  Int8Check c;
  if (std::string why = check_int8(h, in, count, &c); !why.empty()) return why;
  const impl::CodecKernels& k = kernels();
  const uint8_t* raw = in + c.layout.raw_offset;
  for (size_t b = 0, rv = 0; b < c.layout.blocks; ++b) {
    const size_t off = b * h.block;
    const size_t n = block_length(b, h.block, count);
    const uint32_t bits = scale_bits(in, b);
    if (bits == kRawScaleBits) {
      if (add) {
        k.dense_add(raw + 4 * rv, n, dst + off);
      } else {
        std::memcpy(dst + off, raw + 4 * rv, n * sizeof(float));
      }
      rv += n;
    } else {
      k.int8_decode(in + c.layout.q_offset + off, n, float_of(bits), add, dst + off);
    }
  }
  return "";
}

}  // namespace wire

std::string int8_sum(const uint8_t* const* in, const size_t* len, size_t k, size_t count,
                     float* dst) {
  if (k == 0) return "int8_sum of no inputs";
  if (k > kMaxSumInputs) return "int8_sum of " + std::to_string(k) + " inputs, more than 2^24";
  Header first;
  Int8Check c;
  for (size_t j = 0; j < k; ++j) {
    const std::string input = "input " + std::to_string(j);
    Header h;
    if (std::string why = wire::read_header(in[j], len[j], count, &h); !why.empty()) {
      return input + ": " + why;
    }
    if (h.format != Format::kInt8) return input + " is not int8";
    if (std::string why = check_int8(h, in[j], count, &c); !why.empty()) return input + ": " + why;
    if (j == 0) {
      first = h;
      continue;
    }
    if (h.block != first.block) {
      return input + " has blocks of " + std::to_string(h.block) + " values, input 0 of " +
             std::to_string(first.block);
    }
    // Same block size and count: the same table length. The same table
    // means the same raw blocks, so the sections line up too.
    for (size_t b = 0; b < c.layout.blocks; ++b) {
      if (scale_bits(in[j], b) != scale_bits(in[0], b)) {
        return input + "'s scale of block " + std::to_string(b) + " differs from input 0's";
      }
    }
  }
  std::vector<const uint8_t*> q(k);
  for (size_t j = 0; j < k; ++j) q[j] = in[j] + c.layout.q_offset;
  const impl::CodecKernels& kern = wire::kernels();
  for (size_t b = 0, rv = 0; b < c.layout.blocks; ++b) {
    const size_t off = b * first.block;
    const size_t n = block_length(b, first.block, count);
    const uint32_t bits = scale_bits(in[0], b);
    if (bits != wire::kRawScaleBits) {
      kern.int8_sum(q.data(), k, off, n, float_of(bits), dst + off);
      continue;
    }
    // Raw blocks: an fp32 sum in input order.
    std::memcpy(dst + off, in[0] + c.layout.raw_offset + 4 * rv, n * sizeof(float));
    for (size_t j = 1; j < k; ++j)
      kern.dense_add(in[j] + c.layout.raw_offset + 4 * rv, n, dst + off);
    rv += n;
  }
  return "";
}

}  // namespace gsync::reduce
