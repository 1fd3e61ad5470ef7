// SPDX-License-Identifier: Apache-2.0
//
// The TCP provider's Context: one Pair per peer, the region table, the
// connections (all owned here, so none is freed while the kernel still holds
// one of its buffers), accepting and identifying inbound connections, timers,
// and the one place handlers are called from: poll().
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "daemon/transport/tcp/buffer.h"
#include "daemon/transport/tcp/connection.h"
#include "daemon/transport/tcp/device.h"
#include "daemon/transport/tcp/pair.h"
#include "daemon/transport/handler_queue.h"
#include "daemon/transport/transport.h"

namespace gsync::transport::tcp {

class TcpContext final : public Context {
 public:
  static Status create(const ContextOptions& options, std::unique_ptr<TcpContext>* out);
  ~TcpContext() override;

  Status start(Handlers handlers) override;
  Region register_region(void* base, uint64_t bytes) override;
  void deregister_region(uint32_t id, std::function<void()> released) override;
  void write(int peer, const void* src, uint64_t len, uint32_t remote_region,
             uint64_t remote_offset, uint64_t imm, uint64_t cookie) override;
  void send_control(int peer, std::string_view msg) override;
  int event_fd() const override { return device_->event_fd(); }
  void poll() override;
  bool pending() const override { return device_->ready(); }
  void set_polled(bool on) override;
  Status set_peer(int peer, const PeerInfo& info) override;
  void drop_peer(int peer, const Status& why) override;
  bool peer_up(int peer) const override;
  PeerStats stats(int peer) const override;
  int self() const override { return options_.self; }
  int size() const override { return static_cast<int>(options_.hosts.size()); }

  // For Pair.
  Device& device() { return *device_; }
  const RegionTable& regions() const { return regions_; }
  const ContextOptions& options() const { return options_; }
  const Handlers& handlers() const { return handlers_; }
  uint64_t instance_id() const { return instance_id_; }
  uint64_t new_link_id() { return (instance_id_ << 20) ^ ++links_; }
  uint32_t handshake_timeout_ms() const;
  // "h12 (10.0.0.12:7700)", from the hosts table.
  std::string describe_host(int index) const;
  // Connections to that peer: streams within this host's rack,
  // cross_rack_streams (or streams, when 0) to another rack.
  int streams_for(int peer) const;
  Connection* new_connection(int fd, bool outbound, std::string remote);
  void retire(Connection* c);
  // An adopted connection that has waited, unread, for the rest of its
  // link: reads (and handles) what it holds once the current completion
  // and the events it raised (the link coming up) are done.
  void resume_later(Connection* c) { resume_.push_back(c); }
  // Handler calls that must not run in the middle of a state change: queued
  // and run, in order, once the completion being handled is done.
  void post_write_done(int peer, uint64_t cookie, Status st);
  void post_peer_up(int peer);
  void post_peer_down(int peer, Status why);
  // Submits now unless poll() will at its end.
  void kick();

 private:
  // A deregistered region whose memory is still being received into.
  struct Release {
    int receives;  // recvs in flight into it
    std::function<void()> released;
  };

  explicit TcpContext(const ContextOptions& options);
  void dispatch(const Completion& c);
  void post_accept();
  void on_accept(int res);
  void on_connection_error(Connection* c, const std::string& what);
  // Frames of a connection until it is complete: the frames a read
  // completion (or the read-ahead) holds, handled one after another.
  void run_frames(Connection* c);
  void run_resumed();
  // Frames of an inbound connection that has not said who it is yet, or
  // has not proved the cluster key yet (inbound.cc).
  void on_unidentified(Connection* c);
  void send_hello_ack(Connection* c, const Hello& theirs);
  void on_auth(Connection* c);
  void drop_unidentified(Connection* c, const std::string& why);
  std::string check_hello(const Hello& h) const;
  void refuse(Connection* c, int claimed_index, const std::string& reason);
  // The pair of a host index; null for self, an index no host holds, or
  // one outside the table.
  Pair* pair_of(int peer) const;
  void run_timers();
  void arm_timer(Clock::time_point deadline);
  void reap();
  void flush_events();

  ContextOptions options_;
  std::unique_ptr<Device> device_;  // outlives the connections below
  RegionTable regions_;
  Handlers handlers_;
  bool started_ = false;
  bool in_poll_ = false;
  bool polled_ = false;  // set_polled(true): the ring stays quiet between polls
  uint64_t instance_id_ = 0;
  uint64_t links_ = 0;

  std::unordered_map<Connection*, std::unique_ptr<Connection>> conns_;
  std::vector<Connection*> unidentified_;
  std::vector<Connection*> resume_;  // resume_later()
  std::vector<Connection*> closing_;
  std::vector<std::unique_ptr<Pair>> pairs_;  // by host index; null for self

  sockaddr_storage accept_addr_{};
  socklen_t accept_len_ = 0;
  bool accept_posted_ = false;
  Clock::time_point accept_retry_at_{};

  bool timer_armed_ = false;
  Clock::time_point timer_deadline_{};
  __kernel_timespec timer_ts_{};

  std::unordered_map<uint32_t, Release> releasing_;
  std::vector<uint8_t> discard_;
  HandlerQueue events_;
  std::unordered_set<std::string> logged_refusals_;
};

}  // namespace gsync::transport::tcp
