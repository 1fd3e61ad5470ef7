// SPDX-License-Identifier: Apache-2.0
//
// A job: the ranks of one training run that are on this host, and the ops
// they have submitted but that have not completed yet. Ops are matched by
// (tensor key, step), never by arrival order, so ranks may submit tensors in
// different orders. Owned by the event thread.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "daemon/core/clock.h"
#include "daemon/core/meter.h"
#include "daemon/core/status.h"
#include "daemon/records/stragglers.h"
#include "daemon/jobs/sync_policy.h"
#include "daemon/ops/op.h"
#include "protocol/guard.h"
#include "protocol/plan_choice.h"
#include "protocol/ps.h"
#include "daemon/shm/session.h"
#include "daemon/tuning/tune_table.h"
#include "daemon/worlds/world.h"
#include "protocol/ops.h"

namespace gsync {

using proto::OpId;
using proto::OpIdHash;

struct RankSlot {
  std::shared_ptr<Session> session;  // live client, or null
  // Set when the client died or left without the job ending; cleared when a
  // client takes the slot again. Ops fail at once while any slot is dead.
  bool dead = false;
  int dead_rank = -1;
  pid_t dead_pid = 0;
  std::string dead_reason;
  // A job that leases batches goes on without a rank that leaves: its slot
  // is departed for good (ops stop waiting for it; it cannot rejoin).
  bool departed = false;
  // Batch leases: the first clock whose pushes this rank has not all begun
  // (its leases for earlier clocks settle when those pushes are applied).
  uint64_t pushes_begun_below = 0;
  // An elastic job: the world epoch this rank last asked for (gsync_world);
  // its submissions are taken only in the job's current one.
  uint64_t world_seen = 0;
};

struct Job {
  Job(std::string id, int world, int local, proto::Sync sync)
      : id(std::move(id)), world_size(world), local_size(local), slots(static_cast<size_t>(local)),
        policy(std::make_unique<BspPolicy>()), sync(sync) {}

  std::string id;
  int world_size;
  int local_size;
  std::vector<RankSlot> slots;  // by local rank
  std::unordered_map<OpId, std::unique_ptr<ops::Op>, OpIdHash> ops;
  // Failed ops remembered for a while, so a rank that arrives late gets the
  // same error instead of waiting for ranks that will never come.
  struct Tombstone {
    OpId id;
    Status status;
    Clock::time_point expires;
    uint64_t world = 0;  // an elastic job's: a later world's op of this id is a new one
  };
  std::deque<Tombstone> tombstones;
  std::unique_ptr<SyncPolicy> policy;
  // The parameter server's sync mode (protocol/ps.h): bsp, asp or ssp:s.
  // Local ranks always all arrive (one push per host); the mode decides
  // when the servers apply and answer (daemon/ps/param_server.h).
  proto::Sync sync;
  // The anomaly guard of its allreduces (protocol/guard.h), and the ops it
  // found anomalous (they count as failed too).
  proto::Guard guard;
  uint64_t anomalies = 0;
  // Its own algorithm and chunk size (protocol/plan_choice.h), and the
  // tuning table in force when it was created, which it keeps for its life
  // (daemon/tuning/tune_table.h).
  proto::PlanChoice plan;
  std::shared_ptr<const tuning::TuneTable> tuning;
  // Batch leases (protocol/lease.h, jobs/leasing.cc): the parameter keys
  // declared; whether a rank has leased (from then on the job goes on
  // without a rank that leaves, and a clock's pushes begin together, once
  // every rank has submitted its push of every key: a rank that dies has
  // pushed all of a clock or nothing); per clock, each local rank's pushes
  // submitted; per (rank, clock), its pushes applied.
  std::set<uint64_t> ps_keys;
  bool leasing = false;
  // The host that keeps the ledger, fixed at the first lease (the job's
  // hosts are all known then: its keys are declared); -1: this one.
  int lease_keeper = -1;
  std::map<uint64_t, std::vector<uint32_t>> clock_pushes;
  std::map<std::pair<int, uint64_t>, uint32_t> pushes_applied;
  uint64_t departures = 0;
  // Who arrives last, over the last ops all local ranks joined.
  StragglerBook stragglers;
  // Which host is ready last, over the last cross-host ops.
  HostLagBook host_lags;

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

  // An elastic job's world (docs/membership.md, "Elastic jobs"); null for
  // a job of a fixed size. Its ranks are numbered in the world this host
  // adopted last, and its ops go between hosts under that world's name.
  std::unique_ptr<worlds::World> world;
  bool elastic() const { return world != nullptr; }
  uint64_t world_epoch() const { return world ? world->epoch() : 0; }
  // The name its ops and rank map go by between the daemons.
  const std::string& wire_name() const { return world ? world->name() : id; }

  bool multi_host() const { return world_size > local_size; }
  // The local ranks an op waits for: all but the departed.
  int expected_ranks() const;
  // Batch leases: every expected rank has submitted its push of every key
  // at `clock`.
  bool clock_pushed(uint64_t clock) const;
  int live_ranks() const;
  std::vector<int> live_rank_ids() const;  // global ranks of the connected slots
  const RankSlot* first_dead() const;
  const Tombstone* find_tombstone(const OpId& id) const;
};

}  // namespace gsync
