// SPDX-License-Identifier: Apache-2.0
//
// What the service keeps per declared key and per op in flight, shared by
// its files (service.cc: declarations and peers; worker_side.cc: this host's
// ops; server_side.cc: the requests it serves). Private to daemon/ps/.
#pragma once

#include <chrono>

#include <deque>
#include <map>
#include <set>
#include <memory>
#include <string>
#include <vector>

#include "daemon/ps/pieces.h"
#include "daemon/ps/service.h"
#include "daemon/storage/checkpoint_files.h"
#include "daemon/storage/checkpoint_format.h"
#include "daemon/storage/snapshot.h"

namespace gsync::ps {

// A worker's request as its server keeps it until it is answered.
struct Service::Served {
  bool message = false;  // its PsPush is here, not yet served
  PsPush msg;
  // The push whose bytes are landing in its slot, from the writes'
  // immediates (a write of another token or clock starts a new one), its
  // pieces, and how many of its bytes are in from the start without a gap.
  bool data_started = false;
  uint32_t data_token = 0, data_clock = 0;
  Pieces pieces;
  uint64_t landed = 0;
  // What it waits for once served: the parameters of a step (a pull), or
  // its push applied (a push alone); then the answer's token and clock.
  bool waiting_pull = false, waiting_ack = false;
  uint64_t pull_step = 0;
  uint32_t token = 0;
  uint64_t clock = 0;
  int reply_writes = 0;   // reply writes in flight
  uint64_t reply_sent = 0;  // elements of the answer sent so far (bsp streams it)
  uint32_t reply_region = 0;  // the worker's tensor, where a pull's values go
  // How long its pulls have waited here for what the sync mode asks (in
  // bsp and ssp: for the slowest worker), all told.
  std::chrono::steady_clock::time_point wait_since;
  double waited_s = 0;
};

struct Service::Norm {
  bool in = false;
  double sum_squares = 0;
  int64_t marked = -1;  // ParamServer::clock_marked_rank
};

struct Service::WorkerOp {
  Request req;
  Done done;
  Key* key = nullptr;
  bool started = false;
  int sends = 0;    // push writes from req.data not done yet
  int answers = 0;  // shards whose reply (pull) or ack (push) has not come
  // Of those, the other hosts' shards not asked yet: this host's own shard
  // is served first, and a refusal there ends the op with nothing sent.
  int unasked = 0;
  std::vector<bool> answered;  // by participant
  std::vector<Pieces> got;     // by participant: the pieces of its reply landed
  Status failed;    // the first failure; the op ends once sends are done
  bool ended = false;
};

// A key's checkpoints (checkpoints.cc, docs/fault-tolerance.md).
struct Checkpoints {
  static constexpr uint64_t kNever = ~uint64_t{0};
  bool on = false;  // the options ask for them and the daemon has a folder
  storage::ShardId id;
  std::string folder;
  uint64_t wanted_at = kNever;  // one at the first clock reached >= this
  uint64_t last_clock = 0;      // the clock of the last one taken (or resumed from)
  std::set<uint64_t> written;   // clocks whose file is whole here (checkpoint_sets.cc)
  bool writing = false;
  std::shared_ptr<storage::Snapshot> snapshot;  // the one being written
  std::chrono::steady_clock::time_point started{}, last_request{};
  // The last one written, and counts.
  bool have_last = false;
  uint64_t written_clock = 0, written_bytes = 0;
  std::chrono::steady_clock::time_point written_at{};
  double written_s = 0, copy_s = 0, stall_s = 0, longest_stall_s = 0;
  uint64_t taken = 0, failed = 0, skipped = 0;
  std::string last_error;
  // Recovery: the clocks this host and each participant can resume from;
  // answers wait (resume_pending) until they are agreed and loaded.
  std::vector<uint64_t> valid;
  storage::Loaded newest;  // valid[0]'s contents, until the resume is decided
  std::vector<std::vector<uint64_t>> peers;
  bool resume_pending = false;
  uint64_t resumed_from = 0;
};

struct Service::Key {
  uint32_t id = 0;  // names it in the cookies of its reply writes
  // Updates applied, sampled a second or more apart over the last 10 s:
  // the rate gsyncctl shows.
  std::deque<std::pair<std::chrono::steady_clock::time_point, uint64_t>> rate_samples;
  void sample_updates(std::chrono::steady_clock::time_point now) {
    using std::chrono::seconds;
    if (!rate_samples.empty() && now - rate_samples.back().first < seconds(1)) return;
    rate_samples.emplace_back(now, server->updates());
    while (rate_samples.size() > 1 && now - rate_samples.front().first > seconds(10))
      rate_samples.pop_front();
  }
  double updates_per_s(std::chrono::steady_clock::time_point now) const {
    if (rate_samples.empty()) return 0;
    const double dt = std::chrono::duration<double>(now - rate_samples.front().first).count();
    return dt > 0 ? double(server->updates() - rate_samples.front().second) / dt : 0;
  }
  int releasing = 0;          // regions being deregistered (a dropped key)
  int replies_in_flight = 0;  // reply writes from staging not done yet
  std::string job;
  uint64_t key = 0, count = 0;
  proto::DType dtype = proto::DType::kF32;
  size_t elem = 4;
  proto::PsOptions opts;
  proto::Sync sync;
  std::vector<int> hosts;  // participants: cluster indices
  int self = 0;            // participant index of this host
  std::vector<Shard> shards;
  Done declared;           // until every host's regions are known
  bool ready = false;
  Status broken;           // set: every later request fails with it
  Checkpoints ckpt;
  // The anomaly guard (guard.cc): on for bsp keys of a guarded job. While
  // a clock's verdict is pending, no answer goes; norms: per clock, each
  // participant's sum of squares once it came.
  proto::Guard guard;
  bool verdict_pending = false;
  uint64_t verdict_clock = 0;
  std::map<uint64_t, std::vector<Norm>> norms;
  uint64_t anomalies = 0;
  std::string last_anomaly;
  // The clocks rolled back lately and why, for this host's own requests
  // of the clock (their answer says so: gsync_ps_rolled_back).
  std::map<uint64_t, std::string> rolled_back;
  double last_rollback_s = 0;

  // As a server of shards[self].
  std::unique_ptr<ParamServer> server;
  Mapping push_area;   // a slot per participant, shard bytes each; registered
  Mapping staging;     // a slot per participant: the values a reply sends
  uint32_t push_region = 0;
  std::vector<Served> served;  // by participant
  // bsp: every worker's pull gets the same values: fp32 straight from the
  // master values, other dtypes from this host's own staging slot (which
  // no reply otherwise uses), converted range by range as they are applied.
  bool bsp() const { return server->sync().mode == proto::SyncMode::kBsp; }
  bool data_in(int w) const {
    const Served& s = served[size_t(w)];
    return s.data_token == (s.msg.token & 0x7fffffffu) &&
           s.data_clock == static_cast<uint32_t>(s.msg.clock) && s.landed == shard_bytes(self);
  }

  // As a worker.
  // The tensor the servers' replies go to, registered while the key's
  // ops use it (a pull into another tensor registers that one instead).
  uint8_t* tensor = nullptr;
  uint32_t tensor_region = 0;
  std::shared_ptr<const void> tensor_owner;
  std::vector<uint32_t> peer_push;  // by participant
  std::vector<bool> known;
  std::unique_ptr<WorkerOp> current;          // the op on the wire
  std::deque<std::unique_ptr<WorkerOp>> queue;  // the ones after it

  uint64_t shard_bytes(int p) const { return shards[size_t(p)].count() * elem; }
  uint8_t* push_slot(int w) { return push_area.data() + size_t(w) * shard_bytes(self); }
  uint8_t* staging_slot(int w) { return staging.data() + size_t(w) * shard_bytes(self); }
  int participant_of(int host) const {
    for (size_t i = 0; i < hosts.size(); i++)
      if (hosts[i] == host) return static_cast<int>(i);
    return -1;
  }
  std::string describe() const { return "job " + job + " parameter key " + std::to_string(key); }
};

}  // namespace gsync::ps
