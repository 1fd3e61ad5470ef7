// SPDX-License-Identifier: Apache-2.0
//
// The peering context: a Context whose links each run over TCP or over a
// fast link kind (link.h: verbs, later DPDK), chosen per peer. An internal
// TCP context (transport/tcp/, the configured streams) does what TCP does
// well - the connector rule, HELLO with identity checks and refusals,
// reconnect backoff, heartbeats and liveness - and carries, in order, the
// capability exchange, the provider's bootstrap messages, region
// retirements and the user's control messages. When a peer's TCP link comes
// up each side sends CAPS (which fast kind it offers); the link runs on the
// fast kind when both offer the same one and are in the same rack, else the
// TCP link carries the writes too. Region ids are the TCP context's (one id
// space for both paths); a region is released once TCP receives into it
// have completed and every peer on a fast link has acknowledged its
// retirement. event_fd() is an epoll set of the inner context's fd, the
// provider's completion fd and a wake-up eventfd; poll() is the one place
// handlers run.
//
// Without a usable provider (null, or a device that is not there) the
// context still runs: it offers no fast link in every CAPS (naming why)
// and every link carries its writes over TCP, so every daemon of a build
// with a fast kind speaks this one protocol, and a mixed cluster
// interoperates.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "daemon/transport/peering/frame.h"
#include "daemon/transport/peering/link.h"
#include "daemon/transport/handler_queue.h"
#include "daemon/transport/transport.h"

namespace gsync::transport::peering {

class PeeringContext : public Context, public LinkHost {
 public:
  // provider: null (or one that failed to find its device, with why_none
  // saying why) for a context that runs every link over TCP.
  static Status create(const ContextOptions& options, std::unique_ptr<LinkProvider> provider,
                       std::string why_none, std::unique_ptr<PeeringContext>* out);
  ~PeeringContext() override;

  // Context.
  Status start(Handlers handlers) override;
  Region register_region(void* base, uint64_t bytes) override;
  void deregister_region(uint32_t id, std::function<void()> released) override;
  void write(int peer, const void* src, uint64_t len, uint32_t remote_region,
             uint64_t remote_offset, uint64_t imm, uint64_t cookie) override;
  void send_control(int peer, std::string_view msg) override;
  int event_fd() const override { return epoll_fd_; }
  void poll() override;
  // The inner TCP context's ring; the provider's completions and wake-ups
  // still come through event_fd.
  bool pending() const override {
    return inner_->pending() || (provider_ && provider_->pending());
  }
  void set_polled(bool on) override { inner_->set_polled(on); }
  std::chrono::microseconds tick() const override {
    return provider_ ? provider_->tick() : std::chrono::microseconds{};
  }
  // Membership that changes ([cluster] etcd): the inner TCP context grows
  // its table and links the host as any other; the provider makes the new
  // host's link state (add_peer), and the link is chosen on its CAPS as at
  // start - TCP on both ends where the provider could not take it.
  Status set_peer(int peer, const PeerInfo& info) override;
  void drop_peer(int peer, const Status& why) override;
  bool peer_up(int peer) const override;
  PeerStats stats(int peer) const override;
  std::string summary() const override;
  int self() const override { return options_.self; }
  int size() const override { return static_cast<int>(options_.hosts.size()); }

  // LinkHost.
  const ContextOptions& options() const override { return options_; }
  const Handlers& handlers() const override { return handlers_; }
  std::string describe_host(int index) const override;
  void send_bootstrap(int peer, const std::string& msg) override;
  void post_write_done(int peer, uint64_t cookie, Status st) override;
  void post_peer_up(int peer) override;
  void post_peer_down(int peer, Status why) override;
  void ack_retire(int peer, uint32_t id) override;
  void notify() override;

  bool has_provider() const { return provider_ != nullptr; }
  LinkProvider* provider() { return provider_.get(); }
  // Why there is no fast link here ("ibv_get_device_list: Function not
  // implemented").
  const std::string& no_link_reason() const { return why_none_; }
  // Tests: offer no fast link to peers (as a daemon without a device would).
  void refuse_links_for_test(std::string why) { offer_ = {LinkKind::kNone, std::move(why)}; }

 protected:
  explicit PeeringContext(const ContextOptions& options);
  // What create() does after construction (for a subclass's own create).
  Status init(std::unique_ptr<LinkProvider> provider, std::string why_none);

 private:
  // A deregistered region peers may still be writing into.
  struct Retiring {
    std::vector<bool> waiting;  // by host: a RETIRE_ACK is due
    int left = 0;
    std::function<void()> released;
  };
  // What carries the writes to a peer: decided on its CAPS, kept after the
  // link goes down (writes then fail as that kind of link does).
  enum class Link : uint8_t { kUnknown, kFast, kTcp };

  void on_caps(int peer, const Caps& m);
  std::string why_tcp(int peer, const Caps& m) const;
  void on_link_up(int peer);
  void on_link_down(int peer, const Status& why);
  void on_internal(int peer, std::string_view msg);
  void on_user(int peer, std::string_view msg, bool last);
  void region_acked(uint32_t id, int peer);
  void flush_events();
  bool valid_peer(int peer) const;
  bool fast_linked(int peer) const;
  // The per-peer tables hold index peer.
  void grow(int peer);

  ContextOptions options_;
  Handlers handlers_;
  std::unique_ptr<LinkProvider> provider_;  // null: every link is TCP
  std::string why_none_;
  std::unordered_map<uint32_t, Retiring> retiring_;
  std::vector<UserReassembly> partial_;  // a user message arriving in parts
  std::vector<Link> link_;            // by host index
  std::vector<bool> decided_;         // the peer's CAPS came on this TCP link
  std::vector<std::string> logged_;   // the last choice logged, per peer
  // Per peer: why its messages are ignored (its first message on the link
  // was not CAPS: it runs the TCP provider bare), "" when it speaks ours.
  std::vector<LastError> mismatch_;
  Caps offer_;  // what we tell peers
  // Per host: whether the provider holds its link's state (the hosts it
  // started with, and those add_peer took); the others link over TCP.
  std::vector<bool> fast_ok_;
  // What we tell the peer: the offer, or none for a host the provider
  // could not take (both ends then choose TCP).
  Caps offer_for(int peer) const;
  HandlerQueue events_;
  bool in_poll_ = false;
  bool wake_pending_ = false;  // wake_fd_ was written and not yet read
  bool started_ = false;
  int epoll_fd_ = -1, wake_fd_ = -1;
  std::unique_ptr<Context> inner_;  // first to go: nothing calls back into us after
};

}  // namespace gsync::transport::peering
