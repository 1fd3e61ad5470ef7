// SPDX-License-Identifier: Apache-2.0
//
// An allreduce's compression options, written once for both sides: what
// they are, the rules they must follow, how they travel in a submission
// entry, and how a person writes them ("int8", "topk:0.01@cross_host,noef").
// libgsync checks them before it submits (a bad option is the caller's
// GSYNC_ERR_INVALID and nothing is sent); the daemon checks the same rules
// again on what it copies out of shared memory, which it cannot trust.
// docs/compression.md, "Asking for a codec".
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include "protocol/ops.h"

namespace gsync::proto {

constexpr uint32_t kDefaultInt8Block = 1024;
constexpr float kDefaultTopkFraction = 0.01f;
// A block's values share one scale; more than this many values behind one
// scale loses the point of scaling per block.
constexpr uint32_t kMaxInt8Block = 1u << 20;
// int8 blocks are a whole number of the widest vector pass (64 bytes of
// int8 values: docs/compression.md, "Wire formats").
constexpr uint32_t kInt8BlockMultiple = 64;

namespace compression_detail {
inline std::string num(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%g", v);
  return b;
}
}  // namespace compression_detail

// "int8 (blocks of 1024, cross_rack)", "topk 0.01 (cross_host, no error
// feedback)", "none".
inline std::string describe(const Compression& c) {
  if (!c.on()) return "none";
  // Appends, not "lit" + std::string: GCC 12 warns on those (bug 105329).
  std::string s = name(c.codec);
  if (c.codec == Codec::kTopk) s.append(" ").append(compression_detail::num(c.topk_fraction));
  s.append(" (");
  if (c.codec == Codec::kInt8) s.append("blocks of ").append(std::to_string(c.block)).append(", ");
  s.append(name(c.hops));
  if (!c.error_feedback) s.append(", no error feedback");
  return s.append(")");
}

// Fills the defaults a zero field stands for (block 1024, fraction 0.01)
// and clears the parameters the codec does not have.
inline Compression with_defaults(Compression c) {
  if (c.codec == Codec::kInt8 && c.block == 0) c.block = kDefaultInt8Block;
  if (c.codec == Codec::kTopk && c.topk_fraction == 0) c.topk_fraction = kDefaultTopkFraction;
  if (c.codec != Codec::kInt8) c.block = 0;
  if (c.codec != Codec::kTopk) c.topk_fraction = 0;
  if (!c.on()) c = Compression{};
  return c;
}

// The parameters' own rules (after with_defaults); "" or what is wrong,
// naming the field and its value.
inline std::string check_params(const Compression& c) {
  using compression_detail::num;
  if (c.codec == Codec::kInt8 &&
      (c.block == 0 || c.block % kInt8BlockMultiple != 0 || c.block > kMaxInt8Block))
    return "int8 block " + std::to_string(c.block) + " is not a positive multiple of " +
           std::to_string(kInt8BlockMultiple) + " up to " + std::to_string(kMaxInt8Block);
  if (c.codec == Codec::kTopk && !(c.topk_fraction > 0 && c.topk_fraction <= 1))
    return "topk fraction " + num(c.topk_fraction) + " is outside (0, 1]";
  return "";
}

// Whether an op may be compressed this way: codecs encode fp32 sums.
inline std::string check_use(const Compression& c, Opcode op, DType dtype, RedOp redop) {
  if (!c.on()) return "";
  std::string codec = name(c.codec);
  if (op != Opcode::kAllreduce) return "codec " + codec + " on a " + name(op) + " (allreduce only)";
  if (dtype != DType::kF32)
    return "codec " + codec + " on " + name(dtype) + " data (it encodes float32 only)";
  if (redop == RedOp::kMin || redop == RedOp::kMax)
    return "codec " + codec + " with op " + name(redop) + " (sum, avg and weighted_avg only)";
  return check_params(c);
}

// In a SubmitEntry (protocol/wire.h): the `compress` byte holds the codec
// (bits 0-2), the hops (bits 3-4) and "no error feedback" (bit 5); the
// 32-bit `compress_arg` the codec's parameter (int8: the block; topk: the
// fraction's fp32 bits; 0 otherwise). All zero: no compression.
constexpr uint8_t kCompressNoFeedback = 1u << 5;
constexpr uint8_t kCompressReservedBits = 0xc0;

inline void to_entry(const Compression& c, uint8_t* compress, uint32_t* arg) {
  *compress = 0;
  *arg = 0;
  if (!c.on()) return;
  *compress = static_cast<uint8_t>(wire(c.codec) | (wire(c.hops) << 3) |
                                   (c.error_feedback ? 0 : kCompressNoFeedback));
  if (c.codec == Codec::kInt8) *arg = c.block;
  if (c.codec == Codec::kTopk) std::memcpy(arg, &c.topk_fraction, 4);
}

// The options an entry carries; "" or what is wrong with its bits.
inline std::string from_entry(uint8_t compress, uint32_t arg, Compression* out) {
  Compression c;
  if (compress & kCompressReservedBits)
    return "compression byte " + std::to_string(compress) + " has reserved bits set";
  if (!codec_from_wire(compress & 7, &c.codec))
    return "unknown codec " + std::to_string(compress & 7);
  if (!hops_from_wire((compress >> 3) & 3, &c.hops))
    return "unknown hops " + std::to_string((compress >> 3) & 3);
  c.error_feedback = !(compress & kCompressNoFeedback);
  if (c.codec == Codec::kInt8) c.block = arg;
  if (c.codec == Codec::kTopk) std::memcpy(&c.topk_fraction, &arg, 4);
  if (!c.on() && (compress != 0 || arg != 0))
    return "codec none with compression byte " + std::to_string(compress) + " and argument " +
           std::to_string(arg);
  if (c.on() && c.codec != Codec::kInt8 && c.codec != Codec::kTopk && arg != 0)
    return std::string("codec ") + name(c.codec) + " takes no argument, got " + std::to_string(arg);
  if (std::string why = check_params(c); !why.empty()) return why;
  *out = c;
  return "";
}

// Text: CODEC[:ARG][@HOPS][,noef] - "none", "fp16", "bf16", "int8",
// "int8:256", "topk:0.01@cross_host", "topk,noef". "" or what is wrong.
inline std::string parse(std::string_view text, Compression* out) {
  Compression c;
  std::string_view t = text;
  constexpr std::string_view kNoEf = ",noef";
  if (t.size() >= kNoEf.size() && t.substr(t.size() - kNoEf.size()) == kNoEf) {
    c.error_feedback = false;
    t.remove_suffix(kNoEf.size());
  }
  if (size_t at = t.find('@'); at != std::string_view::npos) {
    std::string_view h = t.substr(at + 1);
    bool found = false;
    for (int v = 0; v <= 2 && !found; v++) {
      Hops hv{};
      hops_from_wire(v, &hv);
      if (h == name(hv)) {
        c.hops = hv;
        found = true;
      }
    }
    if (!found)
      return "compression '" + std::string(text) + "': hops '" + std::string(h) +
             "' is not cross_rack, cross_host or all";
    t = t.substr(0, at);
  }
  std::string_view arg;
  if (size_t colon = t.find(':'); colon != std::string_view::npos) {
    arg = t.substr(colon + 1);
    t = t.substr(0, colon);
  }
  if (!parse_codec(t, &c.codec))
    return "compression '" + std::string(text) + "': codec '" + std::string(t) +
           "' is not none, fp16, bf16, int8 or topk";
  if (!arg.empty()) {
    std::string a(arg);
    char* end = nullptr;
    if (c.codec == Codec::kInt8) {
      unsigned long v = std::strtoul(a.c_str(), &end, 10);
      if (*end != '\0' || a[0] == '-' || v > kMaxInt8Block)
        return "compression '" + std::string(text) + "': int8 block '" + a + "' is not a number " +
               "up to " + std::to_string(kMaxInt8Block);
      c.block = static_cast<uint32_t>(v);
    } else if (c.codec == Codec::kTopk) {
      float v = std::strtof(a.c_str(), &end);
      if (*end != '\0' || !std::isfinite(v))
        return "compression '" + std::string(text) + "': topk fraction '" + a + "' is not a number";
      c.topk_fraction = v;
      if (v == 0) return "compression '" + std::string(text) + "': topk fraction 0 sends nothing";
    } else {
      return "compression '" + std::string(text) + "': codec " + name(c.codec) +
             " takes no argument";
    }
  }
  c = with_defaults(c);
  if (std::string why = check_params(c); !why.empty())
    return "compression '" + std::string(text) + "': " + why;
  *out = c;
  return "";
}

}  // namespace gsync::proto
