// SPDX-License-Identifier: Apache-2.0
//
// The verbs link to one peer daemon: an RC queue pair and its completion
// queue (re-created on every (re)connection), the QP parameters exchanged over
// the bootstrap TCP link, the peer's announced regions (address, rkey), writes
// as RDMA WRITE + descriptor SEND under credits, the receive slots the peer's
// descriptors land in, and taking the link down on an error completion.
// docs/transport.md, "The verbs provider".
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <deque>
#include <string>
#include <unordered_map>
#include <vector>

#include "daemon/core/status.h"
#include "daemon/transport/transport.h"
#include "daemon/transport/verbs/buffer.h"
#include "daemon/transport/verbs/frame.h"

namespace gsync::transport::verbs {

class VerbsLinks;

// Receive slots a peer may fill with write descriptors (its credits), plus a
// reserve for credit returns, which spend no credit: a side sends one only
// once half the window is owed, so at most two can be unread at a time.
constexpr uint32_t kCreditSlots = 64;
constexpr uint32_t kReserveSlots = 4;
constexpr uint32_t kRecvSlots = kCreditSlots + kReserveSlots;
// Send queue depth (work requests); a write takes its pieces + 1.
constexpr uint32_t kSendDepth = 256;
// RDMA WRITE's length is 32 bits (and rxe caps a message at 2 GiB).
constexpr uint64_t kMaxPiece = 1ull << 30;
// Completions taken from one CQ per poll(): bounded work per event-loop turn.
constexpr int kPollBudget = 256;

class Pair {
 public:
  Pair(VerbsLinks& links, int peer);
  ~Pair();
  Pair(const Pair&) = delete;
  Pair& operator=(const Pair&) = delete;

  // The internal TCP link to the peer came up / went down.
  void on_link_up();
  void on_link_down(const Status& why);
  // Messages of the peer on that link.
  void on_qp_info(const QpInfo& m);
  void on_ready(const Ready& m);
  void on_region(const RegionInfo& m);
  void on_retire(uint32_t id);

  void write(const void* src, uint64_t len, uint32_t region, uint64_t offset, uint64_t imm,
             uint64_t cookie);

  // A completion event named this pair's CQ: re-arm it.
  void on_cq_event(ibv_cq* cq);
  // Takes up to kPollBudget completions; true when more may be waiting.
  bool poll_cq();
  // Posts what waited for credits or send-queue room.
  void flush();

  bool up() const { return user_up_; }
  bool link_up() const { return link_up_; }
  PeerStats stats() const;
  const std::string& describe() const { return describe_; }
  int peer() const { return peer_; }

  // For tests: make the next write use a wrong rkey (an error completion on purpose).
  void corrupt_next_rkey() { corrupt_rkey_ = true; }
  // For tests: the peer's region id has been announced here (writes into it
  // can go), so a test waits on that rather than for a while.
  bool knows_region(uint32_t id) const { return remote_regions_.count(id) > 0; }

 private:
  struct Write {
    uint64_t cookie = 0;
    const uint8_t* src = nullptr;
    uint64_t len = 0;
    uint32_t region = 0;
    uint64_t offset = 0, imm = 0;
    MrCache::Entry* mr = nullptr;  // the source's registration (len > 0)
    uint32_t rkey = 0;
    uint64_t raddr = 0;
    uint32_t wrs = 0;  // work requests posted for it (pieces + descriptor)
  };
  struct RemoteRegion {
    RegionInfo info;
    int inflight = 0;       // our writes into it, posted and not complete
    bool retiring = false;  // the peer retired it: ack once inflight is 0
  };

  // A fresh QP, its QP_INFO sent to the peer.
  void start_qp();
  Status create_qp();
  void destroy_qp();
  Status connect_qp(const QpInfo& remote);
  void post_recv(uint32_t slot);
  bool post_write(Write& w);
  bool post_credit();
  void on_send_done(uint64_t wr_id);
  void on_recv(const ibv_wc& wc);
  void maybe_up();
  // An error of the verbs link (the TCP link is fine): down, then a fresh QP.
  void fail(const Status& why);
  // Down: the QP goes, every write not complete fails with why.
  void teardown(const Status& why);
  void fail_write(Write& w, const Status& st);
  void finish_remote(uint32_t region);
  void send_ctl(const std::string& msg);
  std::string wc_error(const ibv_wc& wc) const;

  VerbsLinks& links_;
  const int peer_;
  std::string describe_;  // "h1 (10.0.0.2:7700)"
  std::string self_;      // "h0 (10.0.0.1:7700)"

  // Receive slots and send staging (descriptors that cannot go inline), one
  // registration for the pair's lifetime.
  std::vector<Descriptor> slots_;
  Registration slots_mr_{};

  bool link_up_ = false;
  ibv_cq* cq_ = nullptr;
  ibv_qp* qp_ = nullptr;
  uint32_t psn_ = 0;
  uint32_t max_inline_ = 0;
  bool connected_ = false;   // RTS, connected to remote_
  bool peer_ready_ = false;  // the peer's QP is connected to ours
  bool user_up_ = false;     // on_peer_up was reported
  QpInfo remote_{};

  uint32_t credits_ = 0;    // descriptors we may still send
  uint32_t owed_ = 0;       // slots reposted since we last returned credits
  uint32_t sq_used_ = 0;
  uint32_t stage_next_ = 0;
  bool corrupt_rkey_ = false;

  std::deque<Write> queued_;                     // waiting for credits / SQ room
  // wr_id: a receive slot's index, or kSendBit | n for our sends (n = 0: a
  // credit return, else the write's; its WRITEs carry the same id).
  static constexpr uint64_t kSendBit = 1ull << 63;
  std::unordered_map<uint64_t, Write> posted_;   // by wr_id
  uint64_t next_wr_ = 1;
  std::unordered_map<uint32_t, RemoteRegion> remote_regions_;
  uint32_t max_remote_region_ = 0;

  uint64_t bytes_sent_ = 0, bytes_received_ = 0;
  uint64_t writes_sent_ = 0, writes_received_ = 0;
  uint64_t connects_ = 0, completion_errors_ = 0;
  LastError last_error_;
};

}  // namespace gsync::transport::verbs
