// SPDX-License-Identifier: Apache-2.0
//
// Batch leases across hosts (docs/fault-tolerance.md, "Batch leases"): a
// job's ledger (lease_book.h) lives on one daemon, its keeper, the first of
// the job's hosts in cluster order; every other host forwards its ranks'
// leases, settlements and departures there (messages.h) and hands the
// answers back. The JobManager decides what to ask and when; this only
// carries it. Event thread only.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "daemon/cluster/control_plane.h"
#include "daemon/core/clock.h"
#include "daemon/core/status.h"
#include "daemon/leases/lease_book.h"
#include "daemon/leases/messages.h"

namespace gsync::leases {

class LeaseService final : public cluster::CrossHostService {
 public:
  // value: a batch id, proto::kLeaseWait or proto::kLeaseEnd.
  using Answer = std::function<void(const Status&, uint32_t value)>;
  // cp null: one host; every job's keeper is this daemon.
  explicit LeaseService(cluster::ControlPlane* cp);
  LeaseService(const LeaseService&) = delete;
  LeaseService& operator=(const LeaseService&) = delete;
  // What it owns in the control plane (added from gsyncd.cc): its
  // messages; it makes no one-sided writes.
  static cluster::ServiceClaim claim();

  // --- cluster::CrossHostService
  void on_message(int peer, std::string_view msg) override;
  void on_peer_lost(int peer, const Status& why) override;

  // keeper: the job's keeper (a cluster index; -1 or no cluster: this host).
  // done runs once, maybe before ask returns.
  void ask(const std::string& job, int keeper, int rank, uint64_t epoch, uint64_t batches,
           uint64_t clock, Answer done);
  void settle(const std::string& job, int keeper, int rank, uint64_t clock);
  void drop(const std::string& job, int keeper, int rank, uint64_t from_clock);
  // The job's last local rank left: its counts go; its ledger, if kept
  // here, is retired: it still answers the job's other hosts (whose ranks
  // may ask a moment after these were told the end) for kRetiredFor,
  // unless the job begins here again first (job_opened: a new ledger).
  void job_closed(const std::string& job);
  void job_opened(const std::string& job);
  // gsyncctl jobs: this host's counts and, on the keeper, the ledger.
  nlohmann::json report(const std::string& job) const;

 private:
  bool here(int keeper) const { return !cp_ || keeper < 0 || keeper == cp_->self(); }
  LeaseBook* book(const std::string& job, bool create);
  // The keeper's side: answers now, or holds the ask (kLeaseHold) until a
  // settle or a drop lets the ledger answer it.
  void keep(const std::string& job, int rank, uint64_t epoch, uint64_t batches, uint64_t clock,
            Answer done);
  void on_settle(const std::string& job, int rank, uint64_t clock);
  size_t on_drop(const std::string& job, int rank, uint64_t from_clock);
  void on_grant(int peer, const LeaseGrant& g);
  std::string host_id(int host) const;

  struct Asked {
    std::string job;
    int keeper = 0;
    Answer done;
  };
  struct Held {
    int rank = 0;
    uint64_t epoch = 0, batches = 0, clock = 0;
    Answer done;
  };
  // This host's side, per job.
  struct Counts {
    int keeper = -1;
    uint64_t leased = 0, waits = 0, ends = 0, settled = 0, dropped = 0;
  };

  cluster::ControlPlane* cp_;
  std::map<uint64_t, Asked> asked_;  // by ask id, waiting for the keeper
  uint64_t next_id_ = 1;
  std::map<std::string, LeaseBook> books_;            // the jobs this host keeps
  std::map<std::string, Clock::time_point> retired_;  // books_ of closed jobs, since
  std::map<std::string, std::vector<Held>> held_;
  std::map<std::string, Counts> counts_;
};

}  // namespace gsync::leases
