// SPDX-License-Identifier: Apache-2.0
//
// The probe behind the admin request `probe` (gsyncctl doctor; docs/
// operations.md, "Doctor"): over each up peer's own link, `pings` small
// round trips one after the other (latency, and the peer's clock by the
// midpoint method at the fastest of them), then a burst of `bytes` in
// control messages that the peer acknowledges once its last chunk is in
// (bandwidth of the control stream, one TCP connection). Every peer is
// probed at once; the report goes out when each has answered, failed (its
// link went down) or the deadline passed, and names each peer that did not
// answer and how far it got. Nothing here waits: replies come in through
// on_message and the deadline through tick(), on the event thread.
//
// The answering side keeps no state: it answers a ping at once and a burst
// when its last chunk arrives (probe_messages.h).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "daemon/cluster/probe_messages.h"
#include "daemon/core/clock.h"
#include "daemon/core/status.h"

namespace gsync::cluster {

class ControlPlane;

struct ProbeOptions {
  int pings = 16;
  uint64_t bytes = 4ull << 20;
  std::chrono::milliseconds timeout{5000};
};

class Prober {
 public:
  using Done = std::function<void(const nlohmann::json& report)>;

  explicit Prober(ControlPlane& cp) : cp_(cp) {}
  Prober(const Prober&) = delete;
  Prober& operator=(const Prober&) = delete;

  // Probes every peer whose link is up; done gets the report (possibly
  // before this returns, when no peer is up).
  void start(const ProbeOptions& options, Done done);
  // A Probe (answered) or a ProbeReply (for a run of ours) from peer.
  void on_message(int peer, std::string_view msg);
  // peer's link went down: its part of every run fails with why.
  void peer_down(int peer, const Status& why);
  // Ends the runs whose deadline has passed.
  void tick(Clock::time_point now);
  size_t running() const { return runs_.size(); }

 private:
  enum class Phase { kPinging, kData, kDone, kFailed };
  struct PeerRun {
    int host = -1;
    std::string state;  // the link when the run began: up, down, connecting
    Phase phase = Phase::kFailed;
    uint32_t seq = 0;               // the ping in flight
    Clock::time_point sent_at{};    // the ping's, or the burst's first chunk's
    std::vector<double> rtt_us;     // answered pings, in order
    ClockSample best;               // the clock sample of the fastest ping
    double data_seconds = 0;        // first chunk out to the burst's reply
    std::string error;
  };
  struct Run {
    uint64_t id = 0;
    ProbeOptions options;
    Clock::time_point deadline{};
    std::vector<PeerRun> peers;
    Done done;
  };

  void answer(int peer, std::string_view msg);
  void on_reply(int peer, std::string_view msg);
  void on_ping_reply(Run& run, PeerRun& p, const ProbeReply& r);
  void send_ping(const Run& run, PeerRun& p);
  void send_burst(const Run& run, PeerRun& p);
  // Reports and forgets the run once no peer is still in progress (or
  // when forced, failing those still in progress as silent).
  void finish_if_done(uint64_t id, bool deadline_passed = false);
  std::string silent_error(const Run& run, const PeerRun& p) const;
  nlohmann::json peer_report(const Run& run, const PeerRun& p) const;

  ControlPlane& cp_;
  std::map<uint64_t, Run> runs_;
  uint64_t next_id_ = 1;
};

}  // namespace gsync::cluster
