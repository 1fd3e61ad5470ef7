// SPDX-License-Identifier: Apache-2.0
//
// One TCP connection of a pair: its socket, the receive state machine (a
// header, then its payload, one recv in flight) and the send queue (frames
// gathered into one sendmsg, one in flight, short sends resumed). It moves
// bytes and knows nothing of what they mean; Pair and TcpContext decide.
//
// Headers and small payloads are read ahead into a stage of kStageBytes, so
// a small frame (a header and its payload, or several frames) takes one recv
// completion instead of two. A WRITE payload is received straight into its
// region; only the part that the read-ahead already holds (< kStageBytes) is
// copied there from the stage.
//
// Lifetime: owned by TcpContext. close() shuts the socket down and cancels
// its operations; the object is freed only once every one of them has
// completed, because until then the kernel may still write into the header
// buffer or read from the send queue.
#pragma once

#include <sys/uio.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "daemon/transport/tcp/auth.h"
#include "daemon/transport/tcp/device.h"
#include "daemon/transport/tcp/frame.h"

namespace gsync::transport::tcp {

using Clock = std::chrono::steady_clock;

class Pair;

// A frame waiting to be sent. Items come from a per-connection pool and keep
// their control-payload capacity, so steady traffic allocates nothing.
struct SendItem {
  FrameHeader header;
  const uint8_t* data = nullptr;  // the caller's memory (WRITE): sent in place
  std::string owned;              // a copied payload (CONTROL, HELLO, REFUSE)
  bool use_owned = false;
  uint64_t sent = 0;        // bytes of header + payload already on the wire
  int32_t write_slot = -1;  // the Pair's pending write this piece belongs to
  SendItem* next = nullptr;

  uint64_t wire_bytes() const { return sizeof(FrameHeader) + header.length; }
  const uint8_t* payload() const {
    return use_owned ? reinterpret_cast<const uint8_t*>(owned.data()) : data;
  }
};

// Largest recv handed to the kernel at once. A 64 MiB payload then completes
// in pieces, and each completion counts as traffic for the liveness check: a
// peer trickling a large write slowly is alive.
constexpr uint64_t kMaxRecvChunk = 4 << 20;
// Frames gathered into one sendmsg (two iovecs each).
constexpr int kMaxIov = 64;
// Read-ahead for headers and small payloads: room for a header and an eager
// 4 KiB op with slack, small enough that what it takes of a bulk WRITE's
// payload (copied out of it) is a sliver of the piece.
constexpr uint32_t kStageBytes = 16 << 10;
// Queued frames with no WRITE among them and at most this many bytes are
// sent with a direct sendmsg instead of through the ring.
constexpr uint64_t kDirectSendMax = 64 << 10;

class Connection {
 public:
  enum class Phase : uint8_t {
    kConnecting,  // outbound, connect() in flight
    kHandshake,   // HELLO sent or expected, not yet accepted
    kOpen,        // carries frames of an established link
    kClosing,     // shut down; waiting for its operations to complete
  };
  enum class RxStage : uint8_t {
    kHeader,
    kSmallPayload,    // CONTROL, HELLO, HELLO_ACK, REFUSE: into small_payload()
    kRegionPayload,   // WRITE: straight into the region
    kDiscardPayload,  // WRITE into a deregistered region: read and dropped
  };
  enum class RecvResult { kMore, kDone, kEof, kError };

  // discard: scratch memory, shared by all connections, that payloads
  // nobody wants any more are received into and forgotten.
  Connection(Device& device, int fd, bool outbound, std::string remote, uint8_t* discard,
             uint64_t discard_bytes);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Outbound: connect() with a linked timeout, in one submission.
  void post_connect(const Endpoint& to, uint32_t timeout_ms);

  // The next thing to receive. Each takes what the stage holds and posts a
  // recv for the rest; when the stage holds all of it, nothing is posted and
  // take_ready() says so (the caller then handles it as a completed recv).
  void expect_header();
  void expect_small(uint32_t len);  // into small_payload()
  void expect_region(uint8_t* dst, uint64_t len, uint32_t region);
  void expect_discard(uint64_t len);
  // A recv completed: re-posts the rest of a short one (kMore), or says the
  // target is full (kDone), or the peer closed (kEof) / failed (kError).
  // region_gone: the region being received into was deregistered, so the
  // rest of this payload is discarded instead.
  RecvResult on_recv(int res, bool region_gone);
  // The last expect_*() was met from the stage; clears the flag.
  bool take_ready() { return std::exchange(ready_, false); }

  const FrameHeader& header() const { return rx_header_; }
  std::string_view small_payload() const {
    return {reinterpret_cast<const char*>(rx_small_.data()), rx_small_.size()};
  }
  RxStage rx_stage() const { return rx_stage_; }
  // Whether the other end ever sent a byte (a port check sends none).
  bool received_any() const { return received_any_; }
  uint32_t rx_region() const { return rx_region_; }
  // A payload recv into this region is in flight.
  bool receiving_into(uint32_t region) const {
    return recv_posted_ && rx_stage_ == RxStage::kRegionPayload && rx_region_ == region;
  }

  // A pooled item, reset, for push().
  SendItem* item();
  void push(SendItem* item);
  // Queues a frame whose payload is copied (everything but WRITE).
  void push_frame(FrameType type, std::string_view payload);
  // Sends what is queued if no send is in flight.
  void post_send();
  // A send completed with res >= 0 bytes: retires the frames it finished,
  // calling done(item) for each before recycling it, and resumes a partial
  // one on the next post_send().
  template <typename Done>
  void on_sent(int res, Done&& done);
  bool send_idle() const { return head_ == nullptr && !send_posted_; }
  uint64_t queued_bytes() const { return queued_bytes_; }
  Clock::time_point last_queued() const { return last_queued_; }

  // Shuts the socket down and cancels what is in flight; idempotent.
  void close();
  bool closed() const { return phase == Phase::kClosing; }
  // Operations in flight; the connection may be freed at 0 once closed.
  int ops() const { return ops_; }
  void op_done(Op op);

  int fd() const { return fd_; }
  const std::string& remote() const { return remote_; }
  uint64_t tag(Op op) const { return make_tag(this, op); }

  // Owned by whoever drives the connection (Pair, or TcpContext before HELLO).
  Phase phase = Phase::kHandshake;
  bool outbound;
  bool acked = false;             // outbound: HELLO_ACK received and its proof checked
  bool close_after_send = false;  // REFUSE queued: close once it is sent
  bool releasing = false;         // a deregister_region waits for its recv
  Pair* pair = nullptr;           // null until a HELLO names the peer
  int stream = -1;
  Clock::time_point deadline{};  // for an unidentified inbound connection
  Handshake hs;                  // until the cluster key is proved both ways

 private:
  // Moves what the stage holds (up to what is still expected) into place.
  void take_staged();
  void take_staged_or_post();
  void post_recv();
  void recycle(SendItem* item);

  Device& device_;
  int fd_;
  std::string remote_;
  uint8_t* discard_;
  uint64_t discard_bytes_;
  int ops_ = 0;
  Endpoint connect_to_;
  __kernel_timespec connect_timeout_{};

  RxStage rx_stage_ = RxStage::kHeader;
  FrameHeader rx_header_{};
  std::vector<uint8_t> rx_small_;
  uint8_t* rx_dst_ = nullptr;
  uint64_t rx_len_ = 0, rx_done_ = 0;
  uint32_t rx_region_ = 0;
  bool recv_posted_ = false;
  bool received_any_ = false;
  bool stage_recv_ = false;  // the recv in flight reads ahead into the stage
  bool ready_ = false;
  std::unique_ptr<uint8_t[]> stage_;
  uint32_t stage_head_ = 0, stage_tail_ = 0;  // unread staged bytes: [head, tail)

  SendItem* head_ = nullptr;
  SendItem* tail_ = nullptr;
  SendItem* free_ = nullptr;
  uint64_t queued_bytes_ = 0;
  Clock::time_point last_queued_ = Clock::now();
  bool send_posted_ = false;
  iovec iov_[kMaxIov];
  msghdr msg_{};
};

template <typename Done>
void Connection::on_sent(int res, Done&& done) {
  uint64_t left = static_cast<uint64_t>(res);
  queued_bytes_ -= left;
  while (head_ != nullptr) {
    SendItem* it = head_;
    uint64_t rest = it->wire_bytes() - it->sent;
    if (left < rest) {
      it->sent += left;
      break;
    }
    left -= rest;
    head_ = it->next;
    if (head_ == nullptr) tail_ = nullptr;
    done(it);
    recycle(it);
  }
}

}  // namespace gsync::transport::tcp
