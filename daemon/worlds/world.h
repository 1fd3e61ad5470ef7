// SPDX-License-Identifier: Apache-2.0
//
// An elastic job's world as this host sees it (docs/membership.md,
// "Elastic jobs"). The control plane forms and agrees on each world
// (cluster/elastic.h); this record holds the one this host adopted last:
// its epoch and name (the name the job's ops and rank map go by between
// hosts, so an epoch's ops never meet another's), whether this host is in
// it, why it changed, whether the job ended below min_hosts, the ranks
// waiting in gsync_world, and the ops of an earlier world still crossing.
// It words every refusal a changing world causes. The jobs layer keeps one
// per elastic job and does what reaches beyond it: answering ranks,
// ending ops (jobs/elastic_jobs.cc). Event thread only.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "daemon/cluster/control_plane.h"
#include "daemon/cluster/elastic.h"
#include "daemon/core/clock.h"
#include "daemon/core/status.h"
#include "daemon/ops/op.h"
#include "daemon/pipeline/pipeline.h"
#include "daemon/shm/session.h"
#include "protocol/ops.h"
#include "protocol/world.h"

namespace gsync::worlds {

// A rank's gsync_world call, answered once a world forms with this host
// in it.
struct Waiter {
  std::shared_ptr<Session> session;
  uint64_t tag = 0;
};

class World {
 public:
  World(std::string job_id, int min_hosts, int max_hosts)
      : job_id_(std::move(job_id)), min_hosts_(min_hosts), max_hosts_(max_hosts) {}

  int min_hosts() const { return min_hosts_; }
  int max_hosts() const { return max_hosts_; }
  // 0: no world adopted yet.
  uint64_t epoch() const { return epoch_; }
  // The job's name between hosts in this world ("job#epoch"); empty before
  // the first.
  const std::string& name() const { return name_; }
  int hosts() const { return hosts_; }
  bool in_world() const { return in_world_; }
  const std::string& reason() const { return reason_; }
  // Not ok once the job ended below min_hosts: every op fails with it.
  const Status& end() const { return end_; }
  bool ended() const { return !end_.is_ok(); }
  // Whether ops may run in it (the cross-host links aside).
  bool usable() const { return epoch_ != 0 && in_world_ && !ended(); }
  size_t waiting() const { return waiters_.size(); }

  // What adopting a world did, for the jobs layer to carry out.
  struct Adopted {
    std::string closed;  // the world before's name (empty: none), for the pipeline to close
    Status ops_end;      // what the ops of the world before that had not begun fail with
    int offset = -1;     // this host's first rank in it; -1: not in it
    int world_size = 0;  // its ranks (0: not in it, or the job ended)
  };
  // The control plane adopted w; self is this host's index.
  Adopted adopt(const cluster::ElasticWorldView& w, int self);
  // The world a daemon without a cluster forms at once: this host alone.
  cluster::ElasticWorldView alone(int local_size) const;

  // Why a rank that last saw world `seen` cannot submit (key, step) now;
  // ok when it can. world_size: the job's, for the words.
  Status refusal(uint64_t key, uint64_t step, uint64_t seen, int world_size) const;
  // The answer to gsync_world for a rank.
  proto::WorldView view(int rank, int local_rank, int world_size, int local_size) const;

  // A rank asked for the world: kept until one forms. A rank that asks
  // again gets the tag of its earlier ask back, to be ended.
  std::optional<uint64_t> wait(const std::shared_ptr<Session>& s, uint64_t tag);
  std::vector<Waiter> take_waiters();
  // A rank left: its ask, if any, is dropped; the control plane hears
  // that this host gave up its place (and the ranks of the world it last
  // ran in, when that is not the current one, so their ops fail there).
  void rank_left(cluster::ControlPlane* control, const Session& s, uint64_t seen, bool multi_host);

  // Ops of an earlier world still in the pipeline (their stages end
  // them), by serial: their (key, step) is free for the new world's op.
  void keep_crossing(std::unique_ptr<ops::Op> op);
  std::unique_ptr<ops::Op> take_crossing(uint64_t serial);
  bool crossing() const { return !old_ops_.empty(); }
  // The crossing ops past their deadline, with their errors, for the
  // pipeline to abort by serial.
  std::vector<std::pair<uint64_t, Status>> overdue(pipeline::Pipeline& pipeline,
                                                   Clock::time_point now) const;
  // The names its ops went by in every world it had, to close with the job.
  const std::vector<std::string>& names() const { return names_; }
  std::vector<std::string> take_names() { return std::move(names_); }

 private:
  std::string job_id_;
  int min_hosts_ = 0, max_hosts_ = 0;
  uint64_t epoch_ = 0;
  std::string name_;
  int hosts_ = 0;
  bool in_world_ = false;
  std::string reason_;
  Status end_;
  std::vector<std::string> names_;
  std::vector<Waiter> waiters_;
  std::map<uint64_t, std::unique_ptr<ops::Op>> old_ops_;
};

}  // namespace gsync::worlds
