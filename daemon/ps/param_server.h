// SPDX-License-Identifier: Apache-2.0
//
// One parameter tensor's shard as the host that serves it holds it
// (docs/parameter-server.md): fp32 master values and the optimizer's state,
// whatever dtype the workers use; each worker's clock; and the sync mode's
// rules for when a push is applied and when a pull may be answered.
//
//   bsp      a clock's update is applied once, when every worker has pushed
//            that clock: the workers' pushes summed in worker order, divided
//            by the sum of their weights, one optimizer step. The caller
//            applies it (apply_upto) range by range as the pushes' bytes
//            land, so that the first ranges go back while the last still
//            come. A pull for step t is answered once clock t - 1 is
//            applied.
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
#include <memory>
#include <string>
#include <vector>

#include "daemon/core/status.h"
#include "daemon/ps/shards.h"
#include "daemon/storage/snapshot.h"
#include "protocol/ps.h"

namespace gsync::ps {

class ParamServer {
 public:
  // init: the shard's initial values in dtype (count() elements).
  ParamServer(const proto::PsOptions& opts, proto::Sync sync, proto::DType dtype, Shard shard,
              int workers, const void* init);
  ~ParamServer();
  ParamServer(const ParamServer&) = delete;
  ParamServer& operator=(const ParamServer&) = delete;

  // Worker w's push of `data` (the shard's range of its gradient, summed
  // over its ranks with their weights, in dtype) at `clock`: asp and ssp
  // apply it now; bsp keeps the pointer until the clock is applied, and
  // data's bytes need only have landed when apply_upto reaches them (it is
  // the worker's slot of the push region). The refusal names what was
  // wrong; it changes nothing.
  Status push(int w, uint64_t clock, double weight, float lr, const void* data,
              const std::string& who);
  // bsp: whether every worker has pushed the clock being gathered; then
  // apply_upto(e) applies its update to the elements [applied(), e) (e a
  // multiple of the block, or the shard's end, which completes the clock).
  bool gathered() const;
  uint64_t applied_upto() const { return bsp_applied_; }
  void apply_upto(uint64_t end);
  uint64_t bsp_clock() const { return bsp_clock_; }
  // Whether parameters for step t may be handed out now.
  bool may_pull(uint64_t step) const;
  // Whether worker w's push at clock c has been applied (bsp: its clock).
  bool applied(int w, uint64_t clock) const;
  // The shard's values, in dtype, into dst (count() elements); or those of
  // the elements [begin, end) into dst's same range.
  void read(void* dst) const;
  void read(void* dst, uint64_t begin, uint64_t end) const;
  // The master values (tests, checkpoints; a bsp reply of fp32 sends them
  // as they are: they change only once every worker has pushed again).
  const std::vector<float>& values() const { return p_; }

  const Shard& shard() const { return shard_; }
  proto::Sync sync() const { return sync_; }
  // The clock worker w pushes next.
  uint64_t next_clock(int w) const { return next_[size_t(w)]; }
  uint64_t updates() const { return updates_; }
  int workers() const { return static_cast<int>(next_.size()); }

  // Checkpoints (docs/fault-tolerance.md). The clock a checkpoint taken
  // now is of: bsp, the clocks applied (between clocks only: not
  // between_clocks() is mid-update); asp and ssp, the clock every worker
  // has pushed up to.
  bool between_clocks() const { return bsp_applied_ == 0 && !bsp_begun_; }
  uint64_t checkpoint_clock() const;
  uint64_t steps() const { return t_; }
  // A copy of the state as it is now (values, then the optimizer's
  // moments), finished by the checkpoint writer while updates go on: each
  // update first has the old values of what it changes copied.
  std::shared_ptr<storage::Snapshot> snapshot();
  // The state of a checkpoint: every worker pushes `clock` next. payload:
  // the arrays as snapshot() lays them out.
  void restore(uint64_t clock, uint64_t steps, uint64_t updates, const float* payload);

  // The anomaly guard (bsp; ps/guard.cc): with it on, each clock's update
  // first copies the state it changes (block by block, as it applies), and
  // sums the squares of the gradient it applies (the weighted mean, in
  // double, block by block in order). rollback() puts the state back as it
  // was before the last clock's update, which then never happened (the
  // clock stays counted: its pushes were taken).
  void set_guard(bool on);
  double clock_sum_squares() const { return sumsq_; }
  // The rank whose mark (reduce/nonfinite.h) the clock's gradient holds
  // first in this shard, when its sum is not finite; -1: none.
  int64_t clock_marked_rank() const { return marked_; }
  // bsp: the last clock was one without data (every push weighed 0): it
  // changed nothing, and the guard has nothing to judge.
  bool last_clock_empty() const { return last_empty_; }
  void rollback();

 private:
  // One optimizer step with the sum of `inputs` (in dtype, summed in their
  // order) times scale as the gradient, on the elements [begin, end), a
  // block at a time: the sum of a block stays in the cache for its step
  // (the bits are those of summing the whole first: every element is on
  // its own). The step's number t_ is the caller's.
  void apply(const void* const* inputs, size_t n_inputs, float scale, float lr, uint64_t begin,
             uint64_t end);
  // bsp: a clock every worker pushed with weight 0 ends with no update.
  void empty_clock();

  proto::PsOptions opts_;
  proto::Sync sync_;
  proto::DType dtype_;
  Shard shard_;
  std::vector<float> p_, m_, v_;  // master values, first and second moments
  std::vector<float> grad_;       // scratch: a block of the gradient in fp32
  uint64_t t_ = 0;                // optimizer steps taken
  uint64_t updates_ = 0;          // pushes applied (bsp: counted per push too)
  std::vector<uint64_t> next_;    // per worker: the clock it pushes next
  std::vector<double> last_weight_;  // per worker: its last push's weight (0: none yet)
  // bsp: the clock being gathered and each worker's push of it.
  uint64_t bsp_clock_ = 0;
  uint64_t bsp_applied_ = 0;  // elements of its update applied
  bool bsp_begun_ = false;    // its optimizer step counted in t_
  struct Pending {
    const void* data = nullptr;
    double weight = 0;
    float lr = 0;
    bool in = false;
  };
  std::vector<Pending> pending_;
  std::shared_ptr<storage::Snapshot> snapshot_;  // being copied, until complete
  bool guard_ = false;
  std::vector<float> prev_p_, prev_m_, prev_v_;  // the state before the clock's update
  uint64_t prev_t_ = 0, prev_updates_ = 0;
  double sumsq_ = 0;  // the clock's gradient, squared and summed
  int64_t marked_ = -1;
  bool last_empty_ = false;
  // Before the elements [begin, end) change: a snapshot's copy of them.
  void before_write(uint64_t begin, uint64_t end);
  // The guard's part of applying a block: the old state kept, the
  // gradient's squares summed.
  void guard_block(size_t at, size_t len, const float* g, float scale);
};

}  // namespace gsync::ps
