// SPDX-License-Identifier: Apache-2.0
//
// The keys of a reproducible allreduce's inner ops (docs/reproducibility.md):
// libgsync submits them, the daemon treats them as any op, and gsyncctl
// names them. A user key k (below kReproKeyLimit, 2^48) and a segment s of
// its tensor become
//
//   bits 63-62   10 the allreduce max of exponent codes (uint8),
//                11 the allreduce sum of int32 grid values (or of the
//                   slots of a small tensor)
//   bits 61-48   s (below kReproMaxSegments)
//   bits 47-0    k
//
// at the user's step, so inner ops never meet each other or a user's op
// with a key below the limit, and kBarrierKey (all ones) is never made.
#pragma once

#include <cstdint>

namespace gsync::proto {

constexpr uint64_t kReproKeyLimit = uint64_t{1} << 48;
// A reproducible push's allreduce rides its key with this bit (parameter
// keys of a reproducible job stay below it), apart from the job's own
// allreduces of that key.
constexpr uint64_t kReproPushBit = uint64_t{1} << 47;
constexpr uint64_t kReproMaxSegments = (uint64_t{1} << 14) - 1;

constexpr uint64_t repro_key(uint64_t user, uint64_t segment, bool sums) {
  return (uint64_t{sums ? 3u : 2u} << 62) | (segment << 48) | user;
}

// For an inner op's key: the user's key, the segment and which op it is
// ("exponents" or "sums"); false for any other key (a user's, the
// barrier's).
constexpr bool repro_part(uint64_t key, uint64_t* user, uint64_t* segment, const char** part) {
  if (key == ~uint64_t{0} || (key >> 62) < 2) return false;
  *user = key & (kReproKeyLimit - 1);
  *segment = (key >> 48) & 0x3fff;
  *part = (key >> 62) == 2 ? "exponents" : "sums";
  return true;
}

}  // namespace gsync::proto
