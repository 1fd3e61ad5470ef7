// SPDX-License-Identifier: Apache-2.0
//
// Elastic jobs (docs/membership.md, "Elastic jobs"): which hosts have all
// their ranks of each elastic job, the world each job runs in now, and the
// rule by which the job's leader forms the next one. Plain data and pure
// decisions, owned by the control plane on the event thread; the messages
// that carry them are in elastic_messages.h.
//
// The leader is the lowest host of the current world that is still there
// (before the first world: the lowest host that has joined). Only it
// proposes, so every host adopts the same worlds in the same order; an
// epoch carries its leader's index in its low 12 bits, so a leader that
// died halfway through sending a world and the one after it never give one
// number to two different worlds.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "daemon/cluster/elastic_messages.h"

namespace gsync::cluster {

constexpr int kEpochLeaderBits = 12;  // a cluster's 4096 slots
constexpr uint64_t epoch_of(uint64_t counter, int leader) {
  return counter << kEpochLeaderBits | static_cast<uint64_t>(leader);
}
constexpr uint64_t epoch_counter(uint64_t epoch) { return epoch >> kEpochLeaderBits; }

struct ElasticWorldView {
  uint64_t epoch = 0;  // 0: no world formed yet
  std::vector<ElasticMember> hosts;  // in rank order (host index order)
  bool failed = false;  // the job ended below min_hosts
  std::string reason;

  bool formed() const { return epoch != 0; }
  bool has(int host) const { return offset_of(host) >= 0; }
  int world_size() const;
  // The first rank of host in this world; -1 when it is not in it.
  int offset_of(int host) const;
};

struct ElasticJobState {
  int min_hosts = 0, max_hosts = 0;  // this host's ranks' (0 and 0: none here)
  int local_size = 0;  // this host's ranks of the job, once all are connected
  std::map<int, int> joined;  // other hosts with all their ranks: their local sizes
  ElasticWorldView world;
  uint64_t counter = 0;  // the highest epoch counter seen
};

class ElasticBook {
 public:
  explicit ElasticBook(int self) : self_(self) {}

  ElasticJobState& job(const std::string& id) { return jobs_[id]; }
  const ElasticJobState* find(const std::string& id) const;
  const std::map<std::string, ElasticJobState>& jobs() const { return jobs_; }

  // The host that forms the job's next world, or -1 when none is there.
  // up(h): whether the link to host h is up.
  int leader(const ElasticJobState& j, const std::function<bool(int)>& up) const;
  // The world this host forms now as the job's leader: nothing when it
  // does not lead, when the hosts there are the world's already, or while
  // a first world waits for min_hosts. name(h): a host's id, for the reason.
  std::optional<ElasticWorldView> propose(const std::string& id,
                                          const std::function<bool(int)>& up,
                                          const std::function<std::string(int)>& name) const;
  // Takes w when it is newer than the job's world; false for a stale one.
  bool adopt(const std::string& id, ElasticWorldView w);
  // Host h is gone: it is no longer joined to any job; the jobs it was in.
  std::vector<std::string> host_gone(int host);
  // Forgets an ended job whose ranks here all closed, so that a new job of
  // the same id starts afresh.
  void forget_ended(const std::string& id);

  // The name a world's ops and rank map go by between the daemons
  // ("train#2001"): an epoch's ops never meet another's.
  static std::string world_name(const std::string& job, uint64_t epoch);
  // The job and epoch of a world's name; false for any other name.
  static bool parse_world_name(const std::string& name, std::string* job, uint64_t* epoch);

 private:
  bool alive(const ElasticJobState& j, int host, const std::function<bool(int)>& up) const;

  int self_;
  std::map<std::string, ElasticJobState> jobs_;
};

}  // namespace gsync::cluster
