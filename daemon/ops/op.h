// SPDX-License-Identifier: Apache-2.0
//
// An op from its first rank's arrival to its end (docs/architecture.md,
// "An op's life"): the one record the daemon keeps of it above the
// pipeline. It gathers its local ranks' parts, the first fixing the shape
// every later one must match; the job's sync policy says when it may
// start; it then runs in the pipeline under its serial (the pipeline's own
// record of the run, pipeline::Op, holds the stages) and ends once, with a
// status, as the OpEnd its subscribers read (records/op_end.h). It owns its
// deadline - the shortest timeout any of its ranks asked for, counted from
// the first arrival - and the words of its errors. Event thread only.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "daemon/core/clock.h"
#include "daemon/core/status.h"
#include "daemon/pipeline/op.h"
#include "daemon/pipeline/pipeline.h"
#include "daemon/records/op_end.h"
#include "daemon/shm/session.h"
#include "protocol/ops.h"

namespace gsync::ops {

// One rank's part of an op: where its tensor is and whom to tell.
struct Arrival {
  std::shared_ptr<Session> session;  // null: this local rank has not arrived
  uint64_t tag = 0;
  void* data = nullptr;
  DeviceSpan device;  // data is in this device memory (owner set)
  double weight = 0;
  Clock::time_point at{};  // when its submission was taken
};

class Op {
 public:
  // gathering: local ranks are arriving; running: the pipeline has it
  // (serial() names it there); an op that ended is handed to its
  // subscribers and dropped, so no state names that.
  enum class State : uint8_t { kGathering, kRunning };

  // The first rank's submission of (key, step) at `now`, in a job of
  // `local_size` local ranks; world: an elastic job's world epoch (0 for
  // a fixed job).
  Op(proto::OpId id, const proto::OpShape& shape, int first, int local_size, uint64_t world,
     uint32_t timeout_ms, Clock::time_point now);

  const proto::OpId& id() const { return id_; }
  const proto::OpShape& shape() const { return shape_; }
  uint64_t bytes() const { return shape_.bytes(); }  // one rank's tensor
  State state() const { return serial_ ? State::kRunning : State::kGathering; }
  bool running() const { return state() == State::kRunning; }
  // The pipeline's serial while it runs (its buffers are in use until it
  // is done); 0 while it gathers.
  uint64_t serial() const { return serial_; }
  uint64_t world() const { return world_; }
  int first() const { return first_; }
  int arrived() const { return arrived_; }
  const std::vector<Arrival>& arrivals() const { return arrivals_; }
  bool has(int local_rank) const { return arrivals_[size_t(local_rank)].session != nullptr; }
  Clock::time_point started() const { return started_; }
  Clock::time_point deadline() const { return deadline_; }
  uint32_t timeout_ms() const { return timeout_ms_; }

  // A local rank's part; timeout_ms (0: none) shortens the deadline when
  // it is the shortest yet.
  void arrive(int local_rank, Arrival a, uint32_t timeout_ms);
  // A rank let go (a job that leases batches goes on without it): its part
  // is dropped; the first arrival left fixes the shape from now on.
  void withdraw(int local_rank);
  // The pipeline took it under `serial`.
  void began(uint64_t serial) { serial_ = serial; }

  // Its ranks' buffers as the pipeline takes them, by local rank (ranks
  // that did not arrive are left out).
  std::vector<pipeline::Contribution> contributions() const;
  // "job j allreduce key 3 step 7"
  std::string describe(const std::string& job) const;
  // Its timeout's error: "<describe> timed out after N ms<why>".
  Status timed_out(const std::string& job, const std::string& why) const;
  // The event of its end (records/op_end.h); arrivals: storage for the
  // event's arrivals, reused op after op.
  OpEnd end(std::string_view job, const Status& st, const pipeline::OpTimes* times,
            std::vector<RankArrival>* arrivals) const;

 private:
  proto::OpId id_;
  proto::OpShape shape_;
  int first_;  // local rank whose submission fixed the shape
  std::vector<Arrival> arrivals_;  // by local rank
  int arrived_ = 0;
  uint64_t world_;
  Clock::time_point started_, deadline_;
  uint32_t timeout_ms_;
  uint64_t serial_ = 0;
};

}  // namespace gsync::ops
