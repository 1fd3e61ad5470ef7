// SPDX-License-Identifier: Apache-2.0
//
// The verbs provider's Context: the device (PD, completion channel), the
// registration cache, the region table, one Pair per peer, and an internal
// TCP context (transport/tcp/, the configured streams) that does what TCP does well:
// the connector rule, HELLO with identity checks and refusals, reconnect
// backoff, heartbeats and liveness - and carries the QP parameters, region
// announcements and the user's control messages in order. The link to each
// peer is chosen per peer when the TCP link comes up (a CAPS message each
// way): RDMA for a peer in this daemon's rack when both ends offer verbs,
// else the TCP link carries the writes too. Regions are registered in both
// (the TCP context's ids are the ones callers see). event_fd() is an epoll set of the inner context's fd, the
// completion channel and a wake-up eventfd; poll() is the one place
// handlers run.
//
// Without a usable RDMA device (create(..., allow_no_device)) the context
// still runs, with no device, registration cache or pairs: it offers no
// verbs in every CAPS (naming why) and every link carries its writes over the
// internal TCP context. So every daemon of a libibverbs build speaks this one
// protocol, device or not, and a mixed cluster interoperates.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "daemon/transport/handler_queue.h"
#include "daemon/transport/transport.h"
#include "daemon/transport/verbs/buffer.h"
#include "daemon/transport/verbs/device.h"
#include "daemon/transport/verbs/frame.h"
#include "daemon/transport/verbs/pair.h"

namespace gsync::transport::verbs {

class VerbsContext final : public Context {
 public:
  // Fails where no device is usable, unless allow_no_device: then a context
  // that runs every link over TCP (has_device() false, no_device_reason()).
  static Status create(const ContextOptions& options, std::unique_ptr<VerbsContext>* out,
                       bool allow_no_device = false);
  ~VerbsContext() override;

  Status start(Handlers handlers) override;
  Region register_region(void* base, uint64_t bytes) override;
  void deregister_region(uint32_t id, std::function<void()> released) override;
  void write(int peer, const void* src, uint64_t len, uint32_t remote_region,
             uint64_t remote_offset, uint64_t imm, uint64_t cookie) override;
  void send_control(int peer, std::string_view msg) override;
  int event_fd() const override { return epoll_fd_; }
  void poll() override;
  // The inner TCP context's ring; verbs completions and wake-ups still
  // come through event_fd.
  bool pending() const override { return inner_->pending(); }
  void set_polled(bool on) override { inner_->set_polled(on); }
  bool peer_up(int peer) const override;
  PeerStats stats(int peer) const override;
  std::string summary() const override;
  int self() const override { return options_.self; }
  int size() const override { return static_cast<int>(options_.hosts.size()); }

  bool has_device() const { return device_ != nullptr; }
  // Why there is no device ("ibv_get_device_list: Function not implemented").
  const std::string& no_device_reason() const { return offer_.detail; }

  // For Pair (which exists only where there is a device).
  Device& device() { return *device_; }
  MrCache& mrs() { return *mrs_; }
  const RegionTable& regions() const { return regions_; }
  const ContextOptions& options() const { return options_; }
  const Handlers& handlers() const { return handlers_; }
  std::string describe_host(int index) const;
  void send_internal(int peer, const std::string& msg);
  void post_write_done(int peer, uint64_t cookie, Status st);
  void post_peer_up(int peer);
  void post_peer_down(int peer, Status why);
  // The peer has no write into our region id in flight any more.
  void region_acked(uint32_t id, int peer);
  void notify();

  // Tests: the pair to a peer (to provoke an error on purpose).
  Pair* pair_for_test(int peer) { return pairs_[size_t(peer)].get(); }
  // Tests: offer no verbs link to peers (as a daemon without a device would).
  void refuse_verbs_for_test(std::string why) { offer_ = {false, std::move(why)}; }
  const MrCache& mr_cache() const { return *mrs_; }  // has_device() only

 private:
  // A deregistered region peers may still be writing into.
  struct Retiring {
    std::vector<bool> waiting;  // by host: a RETIRE_ACK is due
    int left = 0;
    MrCache::Entry* mr = nullptr;
    std::function<void()> released;
  };

  // What carries the writes to a peer: decided on its CAPS, kept after the
  // link goes down (writes then fail as that kind of link does).
  enum class Link : uint8_t { kUnknown, kVerbs, kTcp };

  explicit VerbsContext(const ContextOptions& options);
  void on_caps(int peer, const Caps& m);
  void on_link_up(int peer);
  void on_link_down(int peer, const Status& why);
  void on_internal(int peer, std::string_view msg);
  void announce(int peer, const LocalRegion& r);
  void retire_done(uint32_t id);
  void flush_events();
  bool valid_peer(int peer) const;

  ContextOptions options_;
  Handlers handlers_;
  std::unique_ptr<Device> device_;  // null: no usable device, every link is TCP
  std::unique_ptr<MrCache> mrs_;    // null with device_
  RegionTable regions_;
  std::unordered_map<uint32_t, Retiring> retiring_;
  std::vector<std::unique_ptr<Pair>> pairs_;  // by host index; null for self, all without a device
  std::vector<std::string> partial_;          // a user message arriving in parts
  std::vector<Link> link_;                    // by host index
  std::vector<bool> decided_;                 // the peer's CAPS came on this TCP link
  std::vector<std::string> logged_;           // the last choice logged, per peer
  // Per peer: why its messages are ignored (its first message on the link
  // was not CAPS: it runs the plain TCP context), "" when it speaks ours.
  std::vector<LastError> mismatch_;
  Caps offer_{true, ""};                      // what we tell peers
  HandlerQueue events_;
  bool in_poll_ = false;
  bool wake_pending_ = false;  // wake_fd_ was written and not yet read
  bool started_ = false;
  int epoll_fd_ = -1, wake_fd_ = -1;
  uint64_t failed_registrations_ = 0;
  std::unique_ptr<Context> inner_;  // first to go: nothing calls back into us after
};

}  // namespace gsync::transport::verbs
