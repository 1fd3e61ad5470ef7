// SPDX-License-Identifier: Apache-2.0
//
// Who is slow (docs/operations.md, "Stragglers"): an allreduce's barrier
// makes every rank's step take as long as the slowest's, so the culprit
// shows only in when each rank hands its part in, which the daemon sees.
// Per job, over its last kWindow ops that every local rank joined: each
// rank's lag behind the first to arrive (median, p99) and the share of ops
// it came last to. A rank last in more than kWarnShare of them, by a median
// of more than kWarnLag, is the straggler: said once a minute in the log,
// naming rank, host and pid. This host's ranks only (a rank on another host
// is in that host's report). Event thread only.
//
// HostLagBook does the same for whole hosts, for a job on several: per op,
// when this host's part was ready and when each peer's rendezvous came
// (core/host_arrivals.h), each host's lag behind the first host ready,
// this one included. Every time is this daemon's own clock.
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "daemon/core/clock.h"
#include "daemon/core/host_arrivals.h"
#include "daemon/records/op_end.h"

namespace gsync {

struct RankLag {
  int rank = -1;
  int pid = 0;
  double median_s = 0, p99_s = 0;
  double last_share = 0;  // of the ops in the window
};

class StragglerBook {
 public:
  static constexpr size_t kWindow = 256;
  static constexpr double kWarnShare = 0.5;
  static constexpr double kWarnLagS = 0.005;
  static constexpr size_t kMinOps = 16;

  // One op every local rank joined: their arrivals, by local rank. The
  // ring is sized at the first op (kWindow ops x the job's local ranks)
  // and only reused: nothing is allocated per op.
  void add(std::span<const RankArrival> arrivals);
  // Per local rank (rank and pid filled by the caller), over the window.
  std::vector<RankLag> lags() const;
  // The straggler's local rank, or -1 (none, or not enough ops yet).
  int straggler(const std::vector<RankLag>& lags) const;
  size_t ops() const { return ops_; }
  // Ops ever added (not capped at the window): when to look again.
  uint64_t seen() const { return seen_; }
  // Whether a warning about local rank l may be logged now (once a minute).
  bool may_warn(int l, Clock::time_point now);

 private:
  size_t ranks_ = 0;
  size_t next_ = 0, ops_ = 0;  // the ring's next slot; ops in it (<= kWindow)
  std::vector<float> lag_;     // slot * ranks_ + local rank: seconds behind the first
  std::vector<uint16_t> last_;  // per slot: the local rank last in
  uint64_t seen_ = 0;
  Clock::time_point warned_{};
  int warned_rank_ = -1;
};

struct HostLag {
  int host = -1;  // a cluster index
  double median_s = 0, p99_s = 0;
  double last_share = 0;  // of the ops in the window it took part in
};

class HostLagBook {
 public:
  // One op of `hosts` cluster hosts, this host `self`. The ring is sized
  // at the first op (kWindow ops x the cluster's hosts) and only reused.
  void add(const HostArrivals& a, int self, int hosts);
  // Per host heard from in the window, by cluster index.
  std::vector<HostLag> lags() const;
  // The straggler host's index into lags, or -1 (as StragglerBook).
  int straggler(const std::vector<HostLag>& lags) const;
  size_t ops() const { return ops_; }
  uint64_t seen() const { return seen_; }  // as StragglerBook::seen
  bool may_warn(int host, Clock::time_point now);

 private:
  int hosts_ = 0;
  size_t next_ = 0, ops_ = 0;  // the ring's next slot; ops in it (<= kWindow)
  uint64_t seen_ = 0;
  std::vector<float> lag_;     // slot * hosts_ + host: seconds behind the first; < 0: absent
  std::vector<int16_t> last_;  // per slot: the last host
  Clock::time_point warned_{};
  int warned_host_ = -1;
};

}  // namespace gsync
