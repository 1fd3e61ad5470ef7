// SPDX-License-Identifier: Apache-2.0
//
// What a compressed phase does to one chunk (compress_schedule.h says which
// phase does what): at its start, the transforms of this host's own data
// (top-k selection, encodings written back) and the bytes its sends carry;
// at its end, once its receives have landed, the fold of what arrived. Pure
// functions over the chunk's buffers, so that the engine (chunks.cc, once it
// runs compressed schedules) and the compressed schedules' test
// (tests/util/compress_sim.h) run the same code. docs/compression.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "daemon/collective/schedule.h"
#include "daemon/reduce/codec.h"

namespace gsync::collective {

// One chunk's buffers on this host.
struct PackView {
  reduce::CodecParams params;
  float* data = nullptr;  // the chunk's elements
  size_t count = 0;
  // Error buffer e of the chunk (Schedule::residuals of them, all zero at
  // the op's first step, kept from step to step) is at residuals + e *
  // residual_stride.
  float* residuals = nullptr;
  size_t residual_stride = 0;
  uint8_t* send = nullptr;  // at least reduce::max_encoded_bytes(params, count)
  uint64_t send_len = 0;    // what the last encoding left in it
  float* maxima = nullptr;  // block_count(count) floats: own, then agreed maxima

  float* residual(int e) const { return residuals + size_t(e) * residual_stride; }
  size_t blocks() const { return (count + params.block - 1) / params.block; }
};

// Bytes that landed from a participant (or this host's copy slot).
struct Arrival {
  int peer = -1;  // participant index
  const uint8_t* bytes = nullptr;
  uint64_t len = 0;
};

struct Outgoing {
  const uint8_t* bytes = nullptr;
  uint64_t len = 0;
};

// The start of packed phase ph: transforms this host's data as the phase
// says and returns what every send of the phase carries. copy_in is the
// final value this host received encoded (kForward only).
Outgoing begin_phase(const Phase& ph, PackView& v, const Arrival& copy_in);

// The end of packed phase ph, everything it receives in `in` (one arrival
// per receive; the copy slot's for a kCopy): folds the maxima or the
// contributions, or decodes the final value. "" or what was wrong, naming
// the participant whose bytes did not decode.
std::string end_phase(const Phase& ph, int self, PackView& v, const std::vector<Arrival>& in);

}  // namespace gsync::collective
