// SPDX-License-Identifier: Apache-2.0
//
// What the service keeps per declared key and per op in flight, shared by
// its files (service.cc: declarations and peers; worker.cc: this host's
// ops; serve.cc: the requests it serves). Private to daemon/ps/.
#pragma once

#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "daemon/ps/service.h"

namespace gsync::ps {

// A worker's request as its server keeps it until it is answered.
struct Service::Served {
  bool message = false;  // its PsPush is here
  bool data = false;     // its push's bytes have landed in the slot
  PsPush msg;
  uint64_t data_clock = 0;
  // What it waits for once served: the parameters of a step (a pull), or
  // its push applied (a push alone); then the answer's token and clock.
  bool waiting_pull = false, waiting_ack = false;
  uint64_t pull_step = 0;
  uint32_t token = 0;
  uint64_t clock = 0;
  bool replying = false;  // a reply write from its staging slot is in flight
};

struct Service::WorkerOp {
  Request req;
  Done done;
  Key* key = nullptr;
  bool started = false;
  int sends = 0;    // push writes from req.data not done yet
  int answers = 0;  // shards whose reply (pull) or ack (push) has not come
  std::vector<bool> answered;  // by participant
  Status failed;    // the first failure; the op ends once sends are done
  bool ended = false;
};

struct Service::Key {
  uint32_t id = 0;  // names it in the cookies of its reply writes
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

  // As a server of shards[self].
  std::unique_ptr<ParamServer> server;
  Mapping push_area;   // a slot per participant, shard bytes each; registered
  Mapping staging;     // a slot per participant: the values a reply sends
  uint32_t push_region = 0;
  std::vector<Served> served;  // by participant

  // As a worker.
  Mapping reply_area;  // the whole tensor; registered
  uint32_t reply_region = 0;
  std::vector<uint32_t> peer_push, peer_reply;  // by participant
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
