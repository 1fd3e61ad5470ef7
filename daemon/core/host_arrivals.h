// SPDX-License-Identifier: Apache-2.0
//
// When each host's part of one cross-host op was known here, for the
// straggler report's host lags (docs/operations.md, "Stragglers"): this
// host's own (its local ranks had all arrived: the op began its cross-host
// stage and its rendezvous went out) and, per peer, when its rendezvous
// (OpReady, or for an eager op its first partial sum that waited on no one)
// came in. All on this daemon's clock: no clock of another machine is read.
// The engine (collective/) records into it, the pipeline hands it on with
// the op's times, the jobs layer feeds the job's straggler book; it lives
// here because all three see core/.
//
// Fixed size, inline: kept whether or not ops are recorded ([trace]
// record), it costs no allocation per op. An op of more than kMaxPeers
// peers keeps the first kMaxPeers that came.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>

#include "daemon/core/clock.h"

namespace gsync {

class HostArrivals {
 public:
  static constexpr int kMaxPeers = 64;

  HostArrivals() = default;
  // Copies only the peers held: an op's times are copied op after op (into
  // OpTimes, into the op history's slot), mostly of a few hosts.
  HostArrivals(const HostArrivals& o) { *this = o; }
  HostArrivals& operator=(const HostArrivals& o) {
    self_ = o.self_;
    count_ = o.count_;
    std::copy_n(o.peer_.begin(), count_, peer_.begin());
    std::copy_n(o.at_.begin(), count_, at_.begin());
    return *this;
  }

  void reset() {
    self_ = {};
    count_ = 0;
  }
  // This host's part is ready (the op began here).
  void set_self(Clock::time_point at) { self_ = at; }
  // Peer (a cluster index) was heard from at `at`; only its first counts.
  void add(int peer, Clock::time_point at) {
    for (int i = 0; i < count_; i++)
      if (peer_[size_t(i)] == peer) return;
    if (count_ >= kMaxPeers) return;
    peer_[size_t(count_)] = static_cast<int16_t>(peer);
    at_[size_t(count_)] = at;
    count_++;
  }

  Clock::time_point self() const { return self_; }
  int peers() const { return count_; }
  int peer(int i) const { return peer_[size_t(i)]; }
  Clock::time_point at(int i) const { return at_[size_t(i)]; }

 private:
  Clock::time_point self_{};  // {}: the op never began a cross-host stage here
  int count_ = 0;
  std::array<int16_t, kMaxPeers> peer_{};
  std::array<Clock::time_point, kMaxPeers> at_{};
};

}  // namespace gsync
