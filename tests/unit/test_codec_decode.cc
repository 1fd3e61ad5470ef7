// SPDX-License-Identifier: Apache-2.0
//
// A peer's bytes are untrusted (daemon/reduce/codec.h): decode and
// decode_add refuse every malformed encoding with a message naming what is
// wrong, read nothing past the bytes they were given (each case decodes from
// a heap copy of exactly its length) and leave dst as it was, guard floats
// included. Header offsets: docs/compression.md, "Wire formats".
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "daemon/reduce/codec.h"
#include "daemon/reduce/reduce.h"
#include "tests/util/codec_testing.h"

namespace gsync::reduce {
namespace {

using namespace codec_testing;  // NOLINT: the helpers, shared by the codec tests
using MalformedDecode = CodecTest;

// Header field offsets.
constexpr size_t kFormatAt = 0, kVersionAt = 1, kZeroAt = 2, kBlockAt = 4, kCountAt = 8, kNAt = 16,
                 kLengthAt = 24;

template <class T>
void put(std::vector<uint8_t>* b, size_t at, T v) {
  std::memcpy(b->data() + at, &v, sizeof v);
}

template <class T>
T get(const std::vector<uint8_t>& b, size_t at) {
  T v;
  std::memcpy(&v, b.data() + at, sizeof v);
  return v;
}

// dst filled with distinct values, so that any write shows.
Landing filled(size_t count) {
  Landing dst(count);
  for (size_t i = 0; i < count; ++i) dst.data()[i] = 0.25f * static_cast<float>(i) - 3.0f;
  return dst;
}

// Decodes bytes with both entry points; returns decode's message (decode_add
// must say the same). On an error, dst must be exactly as it was.
std::string try_decode(const std::vector<uint8_t>& bytes, size_t count) {
  std::string first;
  for (bool add : {false, true}) {
    std::vector<uint8_t> exact(bytes);  // an over-read runs off the allocation
    Landing dst = filled(count);
    const std::vector<float> before = dst.buf;
    const std::string why = add ? decode_add(exact.data(), exact.size(), count, dst.data())
                                : decode(exact.data(), exact.size(), count, dst.data());
    EXPECT_TRUE(dst.guards_intact());
    if (!why.empty()) {
      EXPECT_EQ(std::memcmp(dst.buf.data(), before.data(), before.size() * sizeof(float)), 0)
          << "dst changed on the error: " << why;
    }
    if (add) {
      EXPECT_EQ(why, first) << "decode_add and decode disagree";
    } else {
      first = why;
    }
  }
  return first;
}

void expect_refused(const std::vector<uint8_t>& bytes, size_t count, const std::string& words) {
  const std::string why = try_decode(bytes, count);
  EXPECT_NE(why, "") << "accepted; wanted an error naming \"" << words << "\"";
  EXPECT_NE(why.find(words), std::string::npos)
      << "\"" << why << "\" does not name \"" << words << "\"";
}

struct Sample {
  const char* name;
  std::vector<uint8_t> bytes;
  size_t count;
};

// One valid encoding of every format, int8 with zero, raw and quantised
// blocks.
std::vector<Sample> samples() {
  std::mt19937_64 rng(50);
  std::vector<Sample> out;
  auto add = [&](const char* name, CodecParams p, std::vector<float> x) {
    const size_t n = x.size();
    out.push_back({name, run_encode(p, &x, nullptr).bytes, n});
  };
  add("dense", CodecParams{Codec::kNone}, gaussian(100, rng));
  add("fp16", CodecParams{Codec::kF16}, gaussian(101, rng));
  add("bf16", CodecParams{Codec::kBF16}, gaussian(99, rng));
  std::vector<float> q = gaussian(64 * 5 + 7, rng);
  for (size_t i = 64; i < 128; ++i) q[i] = 0.0f;
  q[2 * 64 + 5] = kNan;
  q[4 * 64 + 1] = kInf;
  add("int8", CodecParams{Codec::kInt8, 64}, q);
  add("int8-clean", CodecParams{Codec::kInt8, 64}, gaussian(64 * 3 + 1, rng));
  add("sparse", CodecParams{Codec::kTopk, 1024, 0.01}, gaussian(1000, rng));
  return out;
}

const Sample& sample(const std::vector<Sample>& all, const std::string& name) {
  for (const Sample& s : all) {
    if (name == s.name) return s;
  }
  ADD_FAILURE() << "no sample " << name;
  return all[0];
}

TEST_F(MalformedDecode, ValidSamplesDecode) {
  for (const Sample& s : samples()) EXPECT_EQ(try_decode(s.bytes, s.count), "") << s.name;
}

TEST_F(MalformedDecode, TruncatedOrExtended) {
  for (Isa isa : isas()) {
    force_isa(isa);
    for (const Sample& s : samples()) {
      for (size_t len = 0; len < s.bytes.size(); ++len) {
        const std::vector<uint8_t> cut(s.bytes.begin(),
                                       s.bytes.begin() + static_cast<ptrdiff_t>(len));
        expect_refused(cut, s.count,
                       len < kHeader ? "shorter than the 32-byte header" : "header says");
      }
      std::vector<uint8_t> longer = s.bytes;
      longer.push_back(0);
      expect_refused(longer, s.count, "encoded length " + std::to_string(longer.size()));
    }
  }
}

TEST_F(MalformedDecode, HeaderFields) {
  for (const Sample& s : samples()) {
    SCOPED_TRACE(s.name);
    for (uint8_t f : {0, 6, 255}) {
      std::vector<uint8_t> b = s.bytes;
      b[kFormatAt] = f;
      expect_refused(b, s.count, "format byte " + std::to_string(f) + " names no codec format");
    }
    for (uint8_t f = 1; f <= 5; ++f) {
      const bool halves = (f == 2 || f == 3) && (s.bytes[0] == 2 || s.bytes[0] == 3);
      if (f == s.bytes[0] || halves) continue;  // fp16 and bf16 share a layout
      std::vector<uint8_t> b = s.bytes;
      b[kFormatAt] = f;
      EXPECT_NE(try_decode(b, s.count), "") << "read as format " << int{f};
    }
    std::vector<uint8_t> b = s.bytes;
    b[kVersionAt] = 2;
    expect_refused(b, s.count, "codec version 2");
    b = s.bytes;
    b[kZeroAt + 1] = 1;
    expect_refused(b, s.count, "header bytes 2-3 are not zero");
    expect_refused(s.bytes, s.count + 1, "but the op's chunk has " + std::to_string(s.count + 1));
    expect_refused(s.bytes, s.count - 1, "count " + std::to_string(s.count));
    b = s.bytes;
    put<uint64_t>(&b, kCountAt, s.count + 1);
    expect_refused(b, s.count, "count " + std::to_string(s.count + 1));
    b = s.bytes;
    put<uint64_t>(&b, kLengthAt, s.bytes.size() - 1);
    expect_refused(b, s.count, "but the header says " + std::to_string(s.bytes.size() - 1));
    b = s.bytes;
    put<uint64_t>(&b, kNAt, get<uint64_t>(b, kNAt) + 1);
    EXPECT_NE(try_decode(b, s.count), "") << "n + 1";
    if (s.bytes[0] != static_cast<uint8_t>(Format::kInt8)) {
      b = s.bytes;
      put<uint32_t>(&b, kBlockAt, 64);
      expect_refused(b, s.count, "header has block 64, not 0");
    }
  }
}

TEST_F(MalformedDecode, SparseEntries) {
  const std::vector<Sample> all = samples();
  const Sample& s = sample(all, "sparse");
  const size_t e0 = kHeader, e1 = kHeader + 8, last = s.bytes.size() - 8;
  std::vector<uint8_t> b = s.bytes;
  put<uint32_t>(&b, last, static_cast<uint32_t>(s.count));
  expect_refused(b, s.count, "sparse index 1000 outside 1000 values");
  b = s.bytes;
  put<uint32_t>(&b, e0, 0xffffffffu);
  expect_refused(b, s.count, "sparse index 4294967295 outside 1000 values");
  b = s.bytes;
  put<uint32_t>(&b, e1, get<uint32_t>(b, e0));
  expect_refused(b, s.count, "indices must ascend");
  b = s.bytes;
  std::memcpy(b.data() + e0, s.bytes.data() + e1, 8);
  std::memcpy(b.data() + e1, s.bytes.data() + e0, 8);
  expect_refused(b, s.count, "sparse entry 1 has index");
  // More entries than values, with a length that matches them.
  std::vector<float> all_kept(4, 1.0f);
  std::vector<uint8_t> many(kHeader + 8 * 5, 0);
  many[kFormatAt] = static_cast<uint8_t>(Format::kSparse);
  many[kVersionAt] = 1;
  put<uint64_t>(&many, kCountAt, 4);
  put<uint64_t>(&many, kNAt, 5);
  put<uint64_t>(&many, kLengthAt, many.size());
  for (uint32_t i = 0; i < 5; ++i) put<uint32_t>(&many, kHeader + 8 * i, i);
  expect_refused(many, 4, "sparse header has 5 entries for 4 values");
}

TEST_F(MalformedDecode, Int8Tables) {
  const std::vector<Sample> all = samples();
  const Sample& s = sample(all, "int8");
  const Int8View l = int8_view(s.count, 64);
  auto scale = [](size_t b) { return kHeader + 4 * b; };
  ASSERT_EQ(get<uint32_t>(s.bytes, scale(1)), 0u);           // the zero block
  ASSERT_EQ(get<uint32_t>(s.bytes, scale(2)), 0x7f800000u);  // raw blocks
  ASSERT_EQ(get<uint32_t>(s.bytes, scale(4)), 0x7f800000u);
  std::vector<uint8_t> b = s.bytes;
  b[scale(3) + 3] |= 0x80;
  expect_refused(b, s.count, "int8 block 3 has a negative scale");
  b = s.bytes;
  put<uint32_t>(&b, scale(1), 0x80000000u);  // -0
  expect_refused(b, s.count, "int8 block 1 has a negative scale");
  b = s.bytes;
  put<uint32_t>(&b, scale(0), 0xff800000u);  // -Inf
  expect_refused(b, s.count, "int8 block 0 has a negative scale");
  for (uint32_t nan : {0x7fc00000u, 0x7f800001u, 0xffc00000u}) {
    b = s.bytes;
    put<uint32_t>(&b, scale(3), nan);
    expect_refused(b, s.count, "int8 block 3 has a NaN scale");
  }
  // A quantised block marked raw: the table and the header disagree.
  b = s.bytes;
  put<uint32_t>(&b, scale(0), 0x7f800000u);
  expect_refused(b, s.count, "int8 header says 2 raw blocks but the scale table marks 3");
  b = s.bytes;
  put<uint64_t>(&b, kNAt, 1);
  expect_refused(b, s.count, "int8 header says 1 raw blocks");
  // Both, with a length to match: the block's int8 values must be zero.
  b = s.bytes;
  put<uint32_t>(&b, scale(0), 0x7f800000u);
  put<uint64_t>(&b, kNAt, 3);
  b.resize(b.size() + 4 * 64, 0);
  put<uint64_t>(&b, kLengthAt, b.size());
  expect_refused(b, s.count, "int8 block 0 is raw but nonzero int8 values");
  for (uint32_t block : {0u, 32u, 100u}) {
    b = s.bytes;
    put<uint32_t>(&b, kBlockAt, block);
    expect_refused(b, s.count,
                   "int8 block " + std::to_string(block) + " is not a positive multiple of 64");
  }
  b = s.bytes;
  put<uint32_t>(&b, kBlockAt, 128);  // valid, but not this layout
  EXPECT_NE(try_decode(b, s.count), "");
  b = s.bytes;
  b[l.q_offset + 64 + 7] = 1;  // in the zero block
  expect_refused(b, s.count, "int8 block 1 has scale 0 but nonzero int8 values");
  b = s.bytes;
  b[l.q_offset + 2 * 64] = 0xff;  // in a raw block
  expect_refused(b, s.count, "int8 block 2 is raw but nonzero int8 values");
  b = s.bytes;
  b[kHeader + 4 * l.blocks] = 1;  // after the table
  expect_refused(b, s.count, "int8 padding bytes are not zero");
  b = s.bytes;
  b[l.q_offset + s.count] = 1;  // after the int8 values
  expect_refused(b, s.count, "int8 padding bytes are not zero");
  // Short of even the int8 values, with a header that agrees.
  b = s.bytes;
  b.resize(l.q_offset + s.count - 1);
  put<uint64_t>(&b, kLengthAt, b.size());
  expect_refused(b, s.count, "needs at least");
}

// Random damage to valid encodings: whatever it does, decoding stays inside
// the bytes and dst, and an error leaves dst alone (try_decode's checks).
TEST_F(MalformedDecode, RandomDamageStaysInBounds) {
  std::mt19937_64 rng(51);
  for (Isa isa : isas()) {
    force_isa(isa);
    for (const Sample& s : samples()) {
      for (int round = 0; round < 300; ++round) {
        std::vector<uint8_t> b = s.bytes;
        const int flips = 1 + static_cast<int>(rng() % 4);
        for (int f = 0; f < flips; ++f) {
          // Mostly the header and the int8 table, where the structure is.
          const size_t span = rng() % 2 ? std::min<size_t>(b.size(), 96) : b.size();
          b[rng() % span] ^= static_cast<uint8_t>(1u << (rng() % 8));
        }
        if (rng() % 4 == 0) b.resize(rng() % (b.size() + 1));
        try_decode(b, s.count);
      }
    }
  }
}

}  // namespace
}  // namespace gsync::reduce
