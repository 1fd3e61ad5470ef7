// SPDX-License-Identifier: Apache-2.0
//
// A job: the ranks of one training run that are on this host, and the ops
// they have submitted but that have not completed yet. Ops are matched by
// (tensor key, step), never by arrival order, so ranks may submit tensors in
// different orders. Owned by the event thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "daemon/core/meter.h"
#include "daemon/core/status.h"
#include "daemon/shm/session.h"

namespace gsync {

using Clock = std::chrono::steady_clock;

struct OpId {
  uint64_t key = 0;
  uint64_t step = 0;
  auto operator<=>(const OpId&) const = default;
};
struct OpIdHash {
  size_t operator()(const OpId& o) const { return o.key * 0x9e3779b97f4a7c15ull ^ o.step; }
};

// One rank's part of an op: where its tensor is and whom to tell.
struct Arrival {
  std::shared_ptr<Session> session;  // null: this local rank has not arrived
  uint64_t tag = 0;
  void* data = nullptr;
  double weight = 0;
};

struct Op {
  OpId id;
  uint8_t opcode = 0, dtype = 0, redop = 0;
  uint64_t count = 0;
  int32_t root = -1;
  int first = -1;  // local rank whose submission fixed the shape above
  std::vector<Arrival> arrivals;  // by local rank
  int arrived = 0;
  Clock::time_point started, deadline;
  uint32_t timeout_ms = 0;
  bool running = false;  // handed to the executor; its buffers are in use
  Status fail_after_run;  // set when the op must fail once the executor is done
  // A job that spans hosts: fold the local ranks into host_data, reduce that
  // across hosts, store it into every local rank (docs/algorithms.md).
  enum class Stage : uint8_t { kLocal, kFold, kCross, kStore } stage = Stage::kLocal;
  void* host_data = nullptr;  // local rank 0's tensor, or the broadcast root's
  int world_size = 0;
  double weight_total = 0;
  // Elements per cross-host chunk when the fold is pipelined with the
  // cross-host step (the fold reports each finished chunk); 0: not.
  size_t pipeline_elems = 0;
  // Pipelined store: each chunk is stored as soon as the cross-host step has
  // its final value, by pool tasks that may still run when the step ends.
  bool store_by_chunk = false, cross_done = false;
  int store_tasks = 0;  // chunk stores still running
  // Stable storage for the executor while it runs. The store has its own,
  // set up once: chunk stores run while the fold may still be running and
  // while later chunks' stores are being submitted.
  std::vector<const void*> inputs;
  std::vector<void*> outputs;
  std::vector<double> weights;
  std::vector<const void*> store_inputs;
  std::vector<void*> store_outputs;
  bool store_planned = false;

  uint64_t bytes() const;  // one rank's tensor
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
  Job(std::string id, int world, int local) : id(std::move(id)), world_size(world), local_size(local),
      slots(static_cast<size_t>(local)) {}

  std::string id;
  int world_size;
  int local_size;
  std::vector<RankSlot> slots;  // by local rank
  std::unordered_map<OpId, std::unique_ptr<Op>, OpIdHash> ops;
  // Failed ops remembered for a while, so a rank that arrives late gets the
  // same error instead of waiting for ranks that will never come.
  struct Tombstone {
    OpId id;
    Status status;
    Clock::time_point expires;
  };
  std::deque<Tombstone> tombstones;

  uint64_t ops_completed = 0, ops_failed = 0, bytes_reduced = 0;
  RateMeter meter;
  std::string last_error;
  // A rank on another host left and has not rejoined: the first such
  // departure (later ones, often ranks that exited because of it, do not
  // replace it). Ops fail with it until the host announces the job again.
  Status remote_broken;

  int live_ranks() const;
  const RankSlot* first_dead() const;
  const Tombstone* find_tombstone(const OpId& id) const;
};

const char* opcode_name(uint8_t opcode);
const char* dtype_name(uint8_t dtype);
const char* redop_name(uint8_t redop);

}  // namespace gsync
