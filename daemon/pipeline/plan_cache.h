// SPDX-License-Identifier: Apache-2.0
//
// Prepare once, run many (Gloo's AllreduceRing constructor against its
// run()): the plan of a tensor's cross-host op - algorithm, chunking,
// schedule, scratch, and the regions peers write into - is built the first
// time a (job, key, shape, membership epoch) is seen and reused by every
// later step. An op leases a plan for its run; a second op of the same key
// running at the same time gets a plan of its own (scratch cannot be
// shared). Per-tensor state that outlives one op and does not depend on
// the epoch (the compression issue's error-feedback residuals, the
// parameter server's shard maps) hangs off TensorState.
//
// Plans are evicted, and their regions retired with every peer (on verbs:
// the RETIRE / RETIRE_ACK exchange), when:
//   - an op on them fails (a peer may still write into its regions),
//   - the mapping their buffer is in goes (arena_closed: the client's
//     session closed), or the job ends,
//   - the membership epoch changes (the participants may have),
//   - there are more than kMaxIdle idle ones (least recently used first).
// Event thread only.
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>

#include "daemon/collective/engine.h"
#include "daemon/collective/plan.h"
#include "daemon/pipeline/op.h"

namespace gsync::pipeline {

struct PlanKey {
  std::string job;
  uint64_t key = 0;
  OpShape shape;
  uint64_t epoch = 0;
  bool operator==(const PlanKey&) const = default;
  bool operator<(const PlanKey& o) const;
};

// State of one (job, tensor key) across its steps, whatever the epoch.
struct TensorState {
  OpShape shape;          // the last shape seen; a new one drops the state
  uint64_t bytes_held = 0;  // what the state below holds, for gsyncctl
};

struct PlanLease {
  std::shared_ptr<collective::Plan> plan;
  PlanKey key;
  explicit operator bool() const { return plan != nullptr; }
};

struct PlanCacheStats {
  uint64_t hits = 0, misses = 0, evictions = 0, retiring = 0;
  size_t idle = 0, leased = 0;
};

class PlanCache {
 public:
  static constexpr size_t kMaxIdle = 4096;

  explicit PlanCache(collective::Engine& engine) : engine_(engine) {}
  ~PlanCache();
  PlanCache(const PlanCache&) = delete;
  PlanCache& operator=(const PlanCache&) = delete;

  // An idle plan under key, or a new one built from in; prepared for the
  // host's buffer (the data region follows the buffer if it moved). On
  // failure *err says why and the lease is empty.
  PlanLease lease(const PlanKey& key, const collective::PlanInputs& in, const Buffer& host,
                  Status* err);
  // The op on it ended: back to the idle set on success (if its epoch is
  // still current), else evicted; released runs once its regions are
  // retired (at once when nothing is to retire).
  void give_back(PlanLease lease, bool ok, std::function<void()> released);

  // Evictions of idle plans (leased ones go when given back).
  void arena_closed(uint64_t arena);
  void job_closed(const std::string& job);
  void epoch_changed(uint64_t epoch);

  TensorState& tensor(const std::string& job, uint64_t key);
  PlanCacheStats stats() const;
  // Bytes of error feedback (compressed plans' residuals) the job's plans
  // hold, idle and leased: gsyncctl jobs.
  uint64_t error_feedback_bytes(const std::string& job) const;

 private:
  struct Idle {
    PlanKey key;
    std::shared_ptr<collective::Plan> plan;
    uint64_t arena = 0;  // of the buffer its data region covers
  };
  using IdleList = std::list<Idle>;
  void evict(std::shared_ptr<collective::Plan> plan, std::function<void()> released);
  void drop_idle(IdleList::iterator it);
  template <class Pred>
  void evict_idle_if(Pred pred);

  collective::Engine& engine_;
  uint64_t epoch_ = 0;
  IdleList idle_;  // most recently used first
  std::multimap<PlanKey, IdleList::iterator> by_key_;
  struct Leased {
    uint64_t arena = 0;
    bool arena_closed = false;  // evicted when given back
    std::string job;
  };
  std::unordered_map<const collective::Plan*, Leased> leased_;
  std::map<std::pair<std::string, uint64_t>, TensorState> tensors_;
  PlanCacheStats stats_;
};

}  // namespace gsync::pipeline
