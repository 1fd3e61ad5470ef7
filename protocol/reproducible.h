// SPDX-License-Identifier: Apache-2.0
//
// The keys of a reproducible allreduce's inner ops (docs/reproducibility.md):
// libgsync submits them, the daemon treats them as any op, and gsyncctl
// names them. A user key k (below kReproKeyLimit) becomes
//   kReproExponents | k   the allreduce max of exponent codes (uint8),
//   kReproSums | k        the allreduce sum of the int32 grid values, or of
//                         the slots of a small tensor,
// at the user's step, so the two never meet each other or a user's op with
// a key below the limit, and kBarrierKey (all ones) is never made.
#pragma once

#include <cstdint>
#include <string>

namespace gsync::proto {

constexpr uint64_t kReproKeyLimit = (uint64_t{1} << 62) - 1;
constexpr uint64_t kReproExponents = uint64_t{2} << 62;
constexpr uint64_t kReproSums = uint64_t{3} << 62;

// "" for a user's key; else what the inner op is, for status and traces.
inline std::string repro_role(uint64_t key) {
  if (key == ~uint64_t{0}) return "";
  const uint64_t top = key >> 62;
  const uint64_t user = key & ((uint64_t{1} << 62) - 1);
  if (top == 2) return "reproducible key " + std::to_string(user) + ": exponents";
  if (top == 3) return "reproducible key " + std::to_string(user) + ": sums";
  return "";
}

}  // namespace gsync::proto
