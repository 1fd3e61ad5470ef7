// SPDX-License-Identifier: Apache-2.0
//
// Which host has which ranks of each multi-host job, as the daemons announce
// it to each other (JobAnnounce / JobLeave). A job is ready when the ranks of
// all hosts cover its world exactly once; its hosts, in cluster order, are
// the participants of its ops. Plain data, owned by the event thread.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace gsync::cluster {

class Membership {
 public:
  explicit Membership(int self) : self_(self) {}

  // This host's ranks of a job, once all of them are connected.
  void set_local(const std::string& job, int world, std::vector<int> ranks);
  void clear_local(const std::string& job);
  // Everything about the job, every host's (an elastic job's old world).
  void forget(const std::string& job);
  bool has_local(const std::string& job) const { return local_.count(job) > 0; }
  // Every job name this host holds ranks of, its own or a peer's.
  std::vector<std::string> names() const;
  const std::map<std::string, std::pair<int, std::vector<int>>>& local() const { return local_; }

  void set_remote(const std::string& job, int host, int world, std::vector<int> ranks);
  void clear_remote(const std::string& job, int host);
  // The digest of the tuning table each host's job plans with
  // (tuning::TuneTable::digest; 0: none), as JobAnnounce carries it.
  void set_tuning(const std::string& job, int host, uint32_t digest) { tuning_[job][host] = digest; }
  // Whether every host that announced the job plans it with the same table.
  bool tuning_agrees(const std::string& job) const;
  uint32_t tuning_of(const std::string& job, int host) const;
  // A host is gone: forget its ranks everywhere; returns the jobs it was in.
  std::vector<std::string> remove_host(int host);

  bool ready(const std::string& job, int world) const;
  // Ranks no host has announced (nor are in also_seen), and the remote hosts
  // that have announced some ("3 7", {1, 4}).
  std::string missing(const std::string& job, int world, const std::vector<int>& also_seen,
                      std::vector<int>* hosts) const;
  // This host and every host with ranks of the job, in cluster order.
  std::vector<int> participants(const std::string& job) const;
  // The host that has rank r, or -1.
  int host_of(const std::string& job, int rank) const;

 private:
  struct Remote {
    int world = 0;
    std::map<int, std::vector<int>> hosts;
  };
  int self_;
  std::map<std::string, std::pair<int, std::vector<int>>> local_;
  std::map<std::string, Remote> remote_;
  std::map<std::string, std::map<int, uint32_t>> tuning_;  // by job, by host (self too)
};

}  // namespace gsync::cluster
