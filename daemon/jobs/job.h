// SPDX-License-Identifier: Apache-2.0
//
// A job: the ranks of one training run that are on this host, and the ops
// they have submitted but that have not completed yet. Ops are matched by
// (tensor key, step), never by arrival order, so ranks may submit tensors in
// different orders. Owned by the event thread.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "daemon/core/clock.h"
#include "daemon/core/meter.h"
#include "daemon/core/status.h"
#include "daemon/jobs/sync_policy.h"
#include "protocol/guard.h"
#include "protocol/ps.h"
#include "daemon/shm/session.h"
#include "protocol/ops.h"

namespace gsync {

using proto::OpId;
using proto::OpIdHash;

// One rank's part of an op: where its tensor is and whom to tell.
struct Arrival {
  std::shared_ptr<Session> session;  // null: this local rank has not arrived
  uint64_t tag = 0;
  void* data = nullptr;
  double weight = 0;
  Clock::time_point at{};  // when its submission was taken
};

struct JobOp {
  OpId id;
  proto::OpShape shape;
  int first = -1;  // local rank whose submission fixed the shape
  std::vector<Arrival> arrivals;  // by local rank
  int arrived = 0;
  Clock::time_point started, deadline;
  uint32_t timeout_ms = 0;
  // The pipeline's serial once the op runs (its buffers are in use until
  // it is done); 0 while it waits for ranks or hosts.
  uint64_t serial = 0;

  bool running() const { return serial != 0; }
  uint64_t bytes() const { return shape.bytes(); }  // one rank's tensor
  std::string describe(const std::string& job) const;  // "job j allreduce key 3 step 7"
};

struct RankSlot {
  std::shared_ptr<Session> session;  // live client, or null
  // Set when the client died or left without the job ending; cleared when a
  // client takes the slot again. Ops fail at once while any slot is dead.
  bool dead = false;
  int dead_rank = -1;
  pid_t dead_pid = 0;
  std::string dead_reason;
};

struct Job {
  Job(std::string id, int world, int local, proto::Sync sync)
      : id(std::move(id)), world_size(world), local_size(local), slots(static_cast<size_t>(local)),
        policy(std::make_unique<BspPolicy>()), sync(sync) {}

  std::string id;
  int world_size;
  int local_size;
  std::vector<RankSlot> slots;  // by local rank
  std::unordered_map<OpId, std::unique_ptr<JobOp>, OpIdHash> ops;
  // Failed ops remembered for a while, so a rank that arrives late gets the
  // same error instead of waiting for ranks that will never come.
  struct Tombstone {
    OpId id;
    Status status;
    Clock::time_point expires;
  };
  std::deque<Tombstone> tombstones;
  std::unique_ptr<SyncPolicy> policy;
  // The parameter server's sync mode (protocol/ps.h): bsp, asp or ssp:s.
  // Local ranks always all arrive (one push per host); the mode decides
  // when the servers apply and answer (daemon/ps/server.h).
  proto::Sync sync;
  // The anomaly guard of its allreduces (protocol/guard.h), and the ops it
  // found anomalous (they count as failed too).
  proto::Guard guard;
  uint64_t anomalies = 0;

  uint64_t ops_completed = 0, ops_failed = 0, bytes_reduced = 0;
  RateMeter meter;
  std::string last_error;
  // A rank on another host left and has not rejoined: the first such
  // departure (later ones, often ranks that exited because of it, do not
  // replace it). Ops fail with it until the host announces the job again.
  Status remote_broken;
  // Remote ranks that left or hosts of the job that were lost, counted
  // (gsyncctl jobs: what an operator, and a test, can wait on).
  uint64_t remote_departures = 0;

  bool multi_host() const { return world_size > local_size; }
  int live_ranks() const;
  std::vector<int> live_rank_ids() const;  // global ranks of the connected slots
  const RankSlot* first_dead() const;
  const Tombstone* find_tombstone(const OpId& id) const;
};

}  // namespace gsync
