// SPDX-License-Identifier: Apache-2.0
//
// A reproducible allreduce (docs/reproducibility.md): one request made of
// two ops the daemons already know, so every path they take - local fold,
// every cross-host algorithm, chunking, transport - gives the same bits.
//
//   two-phase  an allreduce max of each element's exponent code (uint8),
//              then an allreduce sum of the contributions as int32 on the
//              grid those codes set (reproducible_math.h);
//   slots      for small tensors, one allreduce sum of int32 in which each
//              rank fills its own slot with its contributions' bits and
//              zeros elsewhere - a gather, exact in any order - folded
//              locally into the same codes and sums.
//
// Which path a tensor takes depends on its size and the world's, never the
// result: both end in repro::finish over the same codes and sums.
//
// The inner ops ride keys with the two top bits set (protocol/reproducible.h),
// so the user's key must be below kReproKeyLimit. Their scratch lives in the
// arena where it fits (no staging copy); a request freed while an inner op
// is in flight hands its scratch to that op, freed when the daemon is done.
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
  // Checks, converts and submits the first inner op. On success *out owns
  // the request and *outer is the handle's state, done when it is.
  static int start(const std::shared_ptr<Session>& s, const OpArgs& user,
                   std::unique_ptr<Reproducible>* out);
  // start() into a new handle *req (nullptr on failure).
  static int submit(const std::shared_ptr<Session>& s, const OpArgs& user, gsync_request** req);
  ~Reproducible();

  const std::shared_ptr<RequestState>& outer() const { return outer_; }
  int test();
  int wait(int timeout_ms);
  // The handle is freed: scratch goes now, or with the inner op in flight.
  void release();

 private:
  Reproducible(std::shared_ptr<Session> s, const OpArgs& user);
  enum class Phase { kSlots, kExponents, kSums, kDone };
  // A block of scratch: arena memory where it fits, else heap (staged).
  struct Scratch {
    void* p = nullptr;
    bool arena = false;
    std::vector<char> heap;
  };
  int alloc(Scratch* s, size_t bytes);
  void drop(Scratch* s);
  int submit(Phase phase);
  // The inner op completed with rc: the next phase, or the end.
  int advance(int rc);
  int end(int rc, const std::string& why);

  std::shared_ptr<Session> session_;
  OpArgs user_;
  int world_ = 0;
  int rank_ = 0;
  size_t n_ = 0;  // values per rank (count, plus a weighted average's weight)
  Phase phase_ = Phase::kDone;
  std::shared_ptr<RequestState> inner_;
  std::shared_ptr<RequestState> outer_;
  Scratch values_;  // the slots (world_ x n_ fp32 values), small tensors only
  Scratch codes_;   // n_ exponent codes
  Scratch ints_;    // n_ int32
};

}  // namespace gsync::client
