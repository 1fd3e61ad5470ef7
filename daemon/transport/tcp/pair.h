// SPDX-License-Identifier: Apache-2.0
//
// The link to one peer daemon: its `streams` connections, who connects
// (the lower host index) with exponential backoff, the handshake, how writes
// are cut into pieces over the streams, what a received frame means, the
// heartbeat, and when the peer counts as down. docs/transport.md.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "daemon/core/status.h"
#include "daemon/transport/tcp/connection.h"
#include "daemon/transport/tcp/device.h"
#include "daemon/transport/tcp/frame.h"
#include "daemon/transport/transport.h"

namespace gsync::transport::tcp {

class TcpContext;

// Writes at least this large are cut into one piece per stream, so a single
// large write uses every connection; smaller ones go whole to the stream
// with the least queued.
constexpr uint64_t kSplitMin = 512 << 10;
// The header's length is 32 bits; larger writes are cut into more pieces.
constexpr uint64_t kMaxPiece = 256ull << 20;
// Partially received multi-piece writes a peer may have open at once; more
// is a protocol error rather than a way to grow our memory.
constexpr size_t kMaxAssembling = 1 << 16;

class Pair {
 public:
  Pair(TcpContext& ctx, int peer);
  ~Pair();
  Pair(const Pair&) = delete;
  Pair& operator=(const Pair&) = delete;

  // The lower host index of the two connects; the other accepts.
  bool connector() const;
  void start();

  void write(const void* src, uint64_t len, uint32_t region, uint64_t offset, uint64_t imm,
             uint64_t cookie);
  void send_control(std::string_view msg);

  // Completions of this pair's connections, from TcpContext::poll().
  void on_connected(Connection* c, int res);
  void on_received(Connection* c);  // a header or a payload is complete
  void on_sent(Connection* c, int res);
  void on_traffic() { last_rx_ = Clock::now(); }
  void on_connection_error(Connection* c, const std::string& what);

  // Acceptor: a connection whose HELLO the context found valid and whose
  // AUTH proved the cluster key. Returns a refusal reason, or "" once the
  // pair has taken the connection; it is read from only once every stream
  // of its link is here.
  std::string adopt(Connection* c, const Hello& hello);
  // Acceptor: the context refused a HELLO that named this peer.
  void note_refusal(const std::string& reason) {
    if (!up()) last_error_.set(reason);
  }

  // Runs what is due at now (reconnect, handshake timeout, heartbeat,
  // liveness) and lowers *next to when this pair next needs to run.
  void tick(Clock::time_point now, Clock::time_point* next);

  bool up() const { return phase_ == Phase::kUp; }
  // Membership (TcpContext::set_peer / drop_peer): the host left the
  // cluster (the link goes down with why and stays down), or it is back,
  // perhaps at a new endpoint (the hosts table says where).
  void leave(const Status& why);
  void rejoin();
  bool absent() const { return absent_; }
  PeerStats stats() const;
  // "h12 (10.0.0.12:7700)"
  const std::string& describe() const { return describe_; }

 private:
  enum class Phase : uint8_t {
    kIdle,        // no link; the connector waits for retry_at_
    kConnecting,  // an attempt (connector) or a gathering of streams (acceptor)
    kUp,
  };
  struct PendingWrite {
    uint64_t cookie = 0;
    uint64_t len = 0;
    uint32_t pieces_left = 0;
    bool live = false;
  };
  // A write received in several pieces, until its last piece lands.
  struct Assembly {
    uint32_t region;
    uint64_t imm;
    uint64_t total;
    uint64_t claimed = 0;   // bytes announced by the headers seen so far
    uint64_t received = 0;  // bytes landed
    uint64_t first;         // lowest offset seen: where the write starts
    uint64_t end;           // highest piece end seen
  };

  void connect_attempt(Clock::time_point now);
  void go_up();
  // The link, or the attempt at one, failed: down if it was up (handlers,
  // pending writes fail), else the connector retries after its backoff.
  void fail(const std::string& reason, int code);
  void link_down(const std::string& reason, int code);
  void attempt_failed(const std::string& reason, int code);
  void drop_connections();
  void schedule_retry();

  // A peer sent something it must not; fails the link naming the stream.
  void malformed(Connection* c, const std::string& what);
  void on_header(Connection* c);
  void on_write_header(Connection* c, const FrameHeader& h);
  void on_piece_landed(Connection* c);
  void deliver(uint32_t region, uint64_t offset, uint64_t len, uint64_t imm);
  void on_hello_ack(Connection* c);
  Hello own_hello(int stream) const;

  void queue_frame(Connection* c, FrameType type, std::string_view payload);
  Connection* least_loaded();
  int32_t alloc_write(uint64_t cookie, uint64_t len);
  void piece_sent(int32_t slot);
  void flush_sends();

  TcpContext& ctx_;
  const int peer_;
  int streams_;
  std::string describe_;
  bool absent_ = false;  // left the cluster: no reconnect, no adopt
  Endpoint endpoint_;
  bool endpoint_ok_ = false;

  Phase phase_ = Phase::kIdle;
  PeerState state_ = PeerState::kConnecting;
  std::vector<Connection*> conns_;  // by stream; null where none
  // Streams of link_id_ so far: acceptor, adopted (AUTH checked); connector,
  // whose HELLO_ACK proved the key.
  int gathered_ = 0;
  uint64_t link_id_ = 0;
  uint64_t peer_instance_ = 0;
  Clock::time_point retry_at_{};
  Clock::time_point handshake_deadline_{};
  uint32_t backoff_ms_;
  Clock::time_point last_rx_{};
  std::string last_logged_;  // a repeated failure is logged once

  std::vector<PendingWrite> writes_;
  std::vector<int32_t> free_writes_;
  uint64_t next_write_id_ = 1;
  uint64_t next_stream_ = 0;
  std::unordered_map<uint64_t, Assembly> assembling_;
  uint64_t dropped_controls_ = 0;

  uint64_t bytes_sent_ = 0, bytes_received_ = 0;
  uint64_t writes_sent_ = 0, writes_received_ = 0;
  uint64_t connects_ = 0;
  LastError last_error_;
};

}  // namespace gsync::transport::tcp
