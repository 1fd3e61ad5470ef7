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

namespace gsync::proto {

constexpr uint64_t kReproKeyLimit = (uint64_t{1} << 62) - 1;
constexpr uint64_t kReproExponents = uint64_t{2} << 62;
constexpr uint64_t kReproSums = uint64_t{3} << 62;

// For an inner op's key: the user's key and which op it is ("exponents" or
// "sums"); false for any other key (a user's, the barrier's).
constexpr bool repro_part(uint64_t key, uint64_t* user, const char** part) {
  if (key == ~uint64_t{0} || (key >> 62) < 2) return false;
  *user = key & ((uint64_t{1} << 62) - 1);
  *part = (key >> 62) == 2 ? "exponents" : "sums";
  return true;
}

}  // namespace gsync::proto
