// SPDX-License-Identifier: Apache-2.0
//
// The DPDK link to one peer daemon. Brought up over the bootstrap TCP link:
// each side sends HELLO (its MAC, a fresh link id, its frame payload and
// window) and answers the peer's HELLO with READY; the link is up once both
// directions know each other's ids. Every (re)connection picks a new link
// id, so frames of an old incarnation are dropped by id. Writes are cut
// into frames (window.h does the numbering, acks and resends); a peer that
// acknowledges nothing for peer_timeout_ms while frames wait is declared
// down, its writes fail, and the link starts over with a new HELLO while
// the TCP link stands. docs/transport.md, "The DPDK provider".
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "daemon/core/status.h"
#include "daemon/transport/dpdk/buffer.h"
#include "daemon/transport/dpdk/frame.h"
#include "daemon/transport/dpdk/window.h"
#include "daemon/transport/transport.h"

namespace gsync::transport::peering {
class LinkHost;
}

namespace gsync::transport::dpdk {

// What a pair needs of the provider it belongs to.
struct PairEnv {
  peering::LinkHost* host = nullptr;
  const RegionTable* regions = nullptr;
  uint8_t mac[6] = {};
  uint32_t cluster = 0;     // cluster_tag
  uint32_t payload = 1400;  // the largest payload this side sends and takes
  uint32_t window = 512;    // frames in flight, each way
  Clock::duration min_rto = std::chrono::milliseconds(5);
  Clock::duration peer_timeout = std::chrono::milliseconds(3000);
  uint64_t* drops = nullptr;  // by Drop, the provider's counters
  const bool* port_up = nullptr;  // the port's link: no pair is up while it is down
  uint64_t* teardowns = nullptr;  // counted up each time a pair fails its writes
};

class Pair {
 public:
  Pair(const PairEnv& env, int peer, std::string self, std::string describe);

  void on_link_up();
  void on_link_down(const Status& why);
  void on_hello(const Hello& m);
  void on_ready(const Ready& m);
  // The port's link came up: a pair that waited for it comes up now.
  void maybe_up();

  void write(const WriteReq& w);
  // A frame from the port with this pair's link id.
  void on_frame(const Parsed& f);
  // Frames due now (data, resends, the ack owed) into the sink; then the
  // silent-peer check. True while it has more to send than fitted.
  bool transmit(Clock::time_point now, TxSink& tx);

  uint32_t link_id() const { return link_id_; }
  bool up() const { return up_; }
  // Writes are outstanding or an ack is owed: the caller keeps polling.
  bool busy() const { return up_ && (!sender_->idle() || ack_owed_); }
  PeerStats stats() const;

 private:
  void start();
  void teardown(const Status& why);
  void on_data(const Parsed& f);
  bool put_frame(TxSink& tx, const OutFrame& f);
  bool put_ack(TxSink& tx);
  void land(const std::vector<Landing>& done);

  PairEnv env_;
  int peer_;
  std::string self_, describe_;
  bool tcp_up_ = false, up_ = false, peer_ready_ = false, have_remote_ = false;
  uint32_t link_id_ = 0;         // ours: the peer puts it in every frame to us
  Hello remote_;                 // the peer's HELLO
  uint32_t payload_ = 0, window_ = 0;  // agreed: the smaller of both sides'
  std::unique_ptr<Sender> sender_;
  std::unique_ptr<Receiver> receiver_;
  bool ack_owed_ = false;
  std::vector<OutFrame> out_;
  std::vector<uint64_t> done_;
  std::vector<Landing> landed_;
  LastError last_error_;
  uint64_t connects_ = 0;
  uint64_t bytes_sent_ = 0, bytes_received_ = 0, writes_sent_ = 0, writes_received_ = 0;
  uint64_t acks_sent_ = 0, frames_received_ = 0, duplicates_ = 0;
  uint64_t frames_resent_total_ = 0, timeouts_total_ = 0;
};

}  // namespace gsync::transport::dpdk
