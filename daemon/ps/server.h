// SPDX-License-Identifier: Apache-2.0
//
// One parameter tensor's shard as the host that serves it holds it
// (docs/parameter-server.md): fp32 master values and the optimizer's state,
// whatever dtype the workers use; each worker's clock; and the sync mode's
// rules for when a push is applied and when a pull may be answered.
//
//   bsp      a clock's update is applied once, when every worker has pushed
//            that clock: the workers' pushes summed in worker order, divided
//            by the sum of their weights, one optimizer step. A pull for step
//            t is answered once clock t - 1 is applied.
//   ssp:s    every push is applied as it arrives, scaled by its weight over
//            the expected weight of a step (the sum of every worker's last
//            weight); a pull for step t is answered once every worker's
//            pushes up to clock t - 1 - s are applied. ssp:0 is bsp (nothing
//            can be applied ahead, and bsp gives the same bits every run).
//   asp      as ssp with no bound: a pull is answered at once.
//
// Clocks: a worker's pushes carry 0, 1, 2, ... in order; a push_pull at
// clock c asks for the parameters of step c + 1, a pull at clock c for
// those of step c. Event thread only.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "daemon/core/status.h"
#include "daemon/ps/shards.h"
#include "protocol/ps.h"

namespace gsync::ps {

class ParamServer {
 public:
  // init: the shard's initial values in dtype (count() elements).
  ParamServer(const proto::PsOptions& opts, proto::Sync sync, proto::DType dtype, Shard shard,
              int workers, const void* init);

  // Worker w's push of `data` (the shard's range of its gradient, summed
  // over its ranks with their weights, in dtype) at `clock`. bsp keeps the
  // pointer until the clock is complete: data must stay as it is until
  // then (it is the worker's slot of the push region). The refusal names
  // what was wrong; it changes nothing.
  Status push(int w, uint64_t clock, double weight, float lr, const void* data,
              const std::string& who);
  // Whether parameters for step t may be handed out now.
  bool may_pull(uint64_t step) const;
  // Whether worker w's push at clock c has been applied (bsp: its clock).
  bool applied(int w, uint64_t clock) const;
  // The shard's values, in dtype, into dst (count() elements).
  void read(void* dst) const;
  // The master values (tests, checkpoints).
  const std::vector<float>& values() const { return p_; }

  const Shard& shard() const { return shard_; }
  proto::Sync sync() const { return sync_; }
  // The clock worker w pushes next.
  uint64_t next_clock(int w) const { return next_[size_t(w)]; }
  uint64_t updates() const { return updates_; }
  int workers() const { return static_cast<int>(next_.size()); }

 private:
  void apply(const float* grad, float scale, float lr);
  void apply_bsp_clock();

  proto::PsOptions opts_;
  proto::Sync sync_;
  proto::DType dtype_;
  Shard shard_;
  std::vector<float> p_, m_, v_;  // master values, first and second moments
  std::vector<float> grad_;       // scratch: a gradient in fp32
  uint64_t t_ = 0;                // optimizer steps taken
  uint64_t updates_ = 0;          // pushes applied (bsp: counted per push too)
  std::vector<uint64_t> next_;    // per worker: the clock it pushes next
  std::vector<double> last_weight_;  // per worker: its last push's weight (0: none yet)
  // bsp: the clock being gathered and each worker's push of it.
  uint64_t bsp_clock_ = 0;
  struct Pending {
    const void* data = nullptr;
    double weight = 0;
    float lr = 0;
    bool in = false;
  };
  std::vector<Pending> pending_;
};

}  // namespace gsync::ps
