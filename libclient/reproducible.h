// SPDX-License-Identifier: Apache-2.0
//
// A reproducible allreduce (docs/reproducibility.md): one request made of
// ops the daemons already know, so every path they take - local fold,
// every cross-host algorithm, chunking, transport - gives the same bits.
//
//   two-phase  per segment of the tensor, an allreduce max of each
//              element's exponent code (uint8), then an allreduce sum of
//              its values as int32 on the grid those codes set
//              (reproducible_math.h). A large tensor's segments overlap:
//              one segment's sum is on the wire while the next one's codes
//              travel and its grid values are computed;
//   slots      for small tensors, one allreduce sum of int32 in which each
//              rank fills its own slot with its values' bits and zeros
//              elsewhere - a gather, exact in any order - folded locally
//              into the same codes and sums.
//
// Which path and which segments a tensor takes depend on its size and the
// world's, never the result: every element ends in the same arithmetic.
//
// The inner ops ride keys with the two top bits set and the segment in
// bits 48-61 (protocol/reproducible.h), so the user's key must be below
// 2^48. Their scratch lives in the arena where it fits (no staging copy);
// a request freed while an inner op is in flight hands that op's scratch to
// it, freed when the daemon is done. The tensor is read twice (codes, then
// grid values) and written once at the end: the caller keeps it untouched
// until the request completes, as for any op.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "libclient/comm.h"
#include "libclient/request.h"

namespace gsync::client {

class Reproducible {
 public:
  // Checks, converts and submits the first inner ops. On success *out owns
  // the request; outer() is the handle's state, done when it is.
  static int start(const std::shared_ptr<Comm>& s, const OpArgs& user,
                   std::unique_ptr<Reproducible>* out);
  // start() into a new handle *req (nullptr on failure).
  static int submit(const std::shared_ptr<Comm>& s, const OpArgs& user, gsync_request** req);
  // A reproducible push or push_pull (a bsp job's): the workers' weighted
  // average of the gradient, reproducible (its allreduce on the key with
  // kReproPushBit), then global rank 0 pushes it with weight 1 and every
  // other rank zeros with weight 0, so the servers' fold adds only zeros
  // to it, in whatever order. Into a new handle *req.
  static int submit_push(const std::shared_ptr<Comm>& s, const OpArgs& push,
                         gsync_request** req);
  ~Reproducible();

  const std::shared_ptr<RequestState>& outer() const { return outer_; }
  int test();
  int wait(int timeout_ms);
  // The handle is freed: scratch goes now, or with the inner op in flight.
  void release();

 private:
  Reproducible(std::shared_ptr<Comm> s, const OpArgs& user);
  // A block of scratch: arena memory where it fits, else heap (staged).
  struct Scratch {
    void* p = nullptr;
    bool arena = false;
    std::vector<char> heap;
  };
  enum class Phase { kWaiting, kExponents, kSums, kDone };
  // Values [begin, begin + n) of the rank's contributions, or (slots) all
  // ranks' side by side.
  struct Segment {
    size_t begin = 0, n = 0;
    Phase phase = Phase::kWaiting;
    Scratch codes, ints;  // n codes; n int32 (slots: world x n)
    std::shared_ptr<RequestState> inner;
  };
  void alloc(Scratch* s, size_t bytes);
  void drop(Scratch* s);
  int submit_inner(Segment& seg, size_t index, bool slots);
  // Starts the segments the window allows.
  int fill_window();
  // An inner op completed with rc: its segment's next step.
  int advance(Segment& seg, size_t index, int rc);
  // Every segment is summed: the results into the user's buffer.
  int finish_all();
  int end(int rc, const std::string& why);
  // The allreduce part is done: a push's own op.
  int start_push();
  void release_segments();
  size_t in_flight() const;

  std::shared_ptr<Comm> session_;
  OpArgs user_;
  int world_ = 0;
  int rank_ = 0;
  size_t n_ = 0;  // values per rank (count, plus a weighted average's weight)
  bool slots_ = false;
  std::vector<Segment> segs_;
  size_t next_ = 0;     // the next segment to start
  size_t summed_ = 0;   // segments whose sums are in
  double total_weight_ = 0;  // a weighted average's, decoded
  bool has_push_ = false;    // the allreduce is a push's first part
  OpArgs push_;
  std::shared_ptr<RequestState> push_state_;
  std::shared_ptr<RequestState> outer_;
};

}  // namespace gsync::client
