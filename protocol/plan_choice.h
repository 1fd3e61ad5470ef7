// SPDX-License-Identifier: Apache-2.0
//
// A job's own choice of cross-host algorithm and chunk size
// (gsync_config_t.algorithm and .chunk_bytes; docs/algorithms.md, "Choosing
// per job"), written once for both sides like protocol/guard.h: what the
// hello carries, and its rules. Every rank of a job must say the same; the
// daemon refuses a rank that does not.
#pragma once

#include <cstdint>
#include <string>

namespace gsync::proto {

// The cross-host algorithms by their wire numbers (the same bytes
// OpReady::algo carries between daemons; collective::Algo has them too).
// 0: not chosen by the job (the daemon's config, then its tuning table,
// then its built-in rule decide).
constexpr uint8_t kAlgoAuto = 0;
constexpr uint8_t kAlgoMax = 5;
constexpr const char* kAlgoNames[kAlgoMax + 1] = {"auto", "ring", "hier",
                                                  "direct", "tree", "doubling"};

// Chunks are whole 4 KiB pages, at most 1 GiB.
constexpr uint64_t kChunkUnit = 4096;
constexpr uint64_t kMaxChunkBytes = uint64_t{1} << 30;

struct PlanChoice {
  uint8_t algo = kAlgoAuto;
  uint64_t chunk_bytes = 0;  // 0: chosen per tensor
  bool operator==(const PlanChoice&) const = default;
  bool any() const { return algo != kAlgoAuto || chunk_bytes != 0; }
};

// In the hello (HelloRequest::plan): bits 0-3 the algorithm, bits 4-7 zero,
// bits 8-31 the chunk size in 4 KiB units (0: per tensor).
constexpr uint32_t to_wire(const PlanChoice& p) {
  return uint32_t{p.algo} | static_cast<uint32_t>(p.chunk_bytes / kChunkUnit) << 8;
}

inline std::string describe(const PlanChoice& p) {
  std::string a = p.algo <= kAlgoMax ? kAlgoNames[p.algo] : "?";
  if (p.chunk_bytes == 0) return a;
  return a + ", chunks of " + std::to_string(p.chunk_bytes >> 10) + " KiB";
}

// "" or why chunk_bytes cannot be a job's chunk size.
inline std::string check_chunk_bytes(uint64_t b) {
  if (b == 0) return "";
  if (b % kChunkUnit != 0 || b > kMaxChunkBytes)
    return "chunk_bytes " + std::to_string(b) + " is not a multiple of 4096 up to 1 GiB";
  return "";
}

// "" or what is wrong with v.
inline std::string from_wire_plan(uint32_t v, PlanChoice* out) {
  PlanChoice p;
  p.algo = static_cast<uint8_t>(v & 0xf);
  if ((v & 0xf0) != 0) return "plan word has unknown bits set";
  if (p.algo > kAlgoMax) return "plan word names algorithm " + std::to_string(p.algo) + ", unknown";
  p.chunk_bytes = uint64_t{v >> 8} * kChunkUnit;
  if (std::string why = check_chunk_bytes(p.chunk_bytes); !why.empty()) return why;
  *out = p;
  return "";
}

// The algorithm's wire number by name ("auto" is 0); false if unknown.
inline bool algo_by_name(const std::string& name, uint8_t* out) {
  for (uint8_t a = 0; a <= kAlgoMax; a++)
    if (name == kAlgoNames[a]) {
      *out = a;
      return true;
    }
  return false;
}

}  // namespace gsync::proto
