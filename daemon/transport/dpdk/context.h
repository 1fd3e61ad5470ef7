// SPDX-License-Identifier: Apache-2.0
//
// The DPDK provider: Ethernet links for a peering context
// (transport/peering/), which gives it the TCP bootstrap, the link choice
// and region retirement. DpdkLinks owns the port (device.h), the table of
// this daemon's regions, the drop counters and one Pair per peer. It runs
// inside the event loop: poll() takes received frames, hands each to its
// pair by link id, and sends what the pairs have due. While a link is busy
// poll() asks to be called again at once (and pending() keeps a polling
// loop polling); an idle port is looked at every idle_poll_us from the
// event loop's timer (tick()), since a virtual port has no receive
// interrupt - unless [dpdk] rx_lcore puts the receive poll on a dedicated
// lcore (rx_lcore.h), whose eventfd is then event_fd(). DpdkContext is the
// peering context with DpdkLinks in it.
// docs/transport.md, "The DPDK provider".
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "daemon/transport/peering/context.h"
#include "daemon/transport/peering/link.h"
#include "daemon/transport/dpdk/buffer.h"
#include "daemon/transport/dpdk/device.h"
#include "daemon/transport/dpdk/frame.h"
#include "daemon/transport/dpdk/pair.h"
#include "daemon/transport/dpdk/rx_lcore.h"
#include "daemon/transport/transport.h"

namespace gsync::transport::dpdk {

class DpdkLinks final : public peering::LinkProvider {
 public:
  // Starts the EAL and the port; fails where they cannot start.
  static Status create(const ContextOptions& options, std::unique_ptr<DpdkLinks>* out);
  ~DpdkLinks() override;

  peering::LinkKind kind() const override { return peering::LinkKind::kDpdk; }
  std::string detail() const override { return device_->describe(); }
  // No fd: a virtual port has no receive interrupt. tick() instead; and
  // the receive lcore's wake-up where there is one.
  int event_fd() const override { return rx_ ? rx_->event_fd() : -1; }
  std::chrono::microseconds tick() const override {
    return std::chrono::microseconds(options_.dpdk.idle_poll_us);
  }
  void start(peering::LinkHost& host) override;
  bool add_peer(int peer) override;
  void link_up(int peer) override;
  void link_down(int peer, const Status& why) override;
  void on_bootstrap(int peer, std::string_view msg) override;
  void on_retire(int peer, uint32_t id) override;
  void add_region(const Region& r) override { regions_.add(r); }
  void retire_region(uint32_t id) override { regions_.remove(id); }
  void drop_region(uint32_t) override {}
  void write(int peer, const void* src, uint64_t len, uint32_t remote_region,
             uint64_t remote_offset, uint64_t imm, uint64_t cookie) override;
  bool poll() override;
  bool pending() const override;
  bool peer_up(int peer) const override;
  PeerStats stats(int peer) const override;
  std::string summary() const override;

  uint64_t dropped(Drop d) const {
    return d == Drop::kInjected ? injected_.load(std::memory_order_relaxed) : drops_[size_t(d)];
  }
  // Tests: the receive path's drop hook ([dpdk] drop_ppm), changed live.
  void set_drop_ppm_for_test(uint32_t ppm) { drop_ppm_.store(ppm); }

 private:
  explicit DpdkLinks(const ContextOptions& options) : options_(options) {}
  void receive(rte_mbuf* m);
  void watch_port(Clock::time_point now);
  void drop_orphans();
  static uint16_t drop_hook(uint16_t port, uint16_t queue, rte_mbuf** pkts, uint16_t n,
                            uint16_t max, void* self);

  ContextOptions options_;
  peering::LinkHost* host_ = nullptr;
  std::unique_ptr<Device> device_;
  std::unique_ptr<TxBurst> tx_;
  std::unique_ptr<RxLcore> rx_;  // [dpdk] rx_lcore; null: received here
  RegionTable regions_;
  std::vector<std::unique_ptr<Pair>> pairs_;  // by host index; null for self
  PairEnv env_;  // what start() gave every pair, for a host that joins later
  std::array<uint64_t, size_t(Drop::kCount)> drops_{};
  uint32_t cluster_ = 0;  // cluster_tag
  int links_up_ = 0;
  Clock::time_point busy_until_{}, port_looked_{};
  bool port_up_ = false;
  uint64_t teardowns_ = 0, teardowns_seen_ = 0;
  const rte_eth_rxtx_callback* rx_hook_ = nullptr;
  // The drop hook's: it runs inside the receive burst, on the receive
  // lcore where there is one.
  std::minstd_rand drop_rng_{12345};
  std::atomic<uint32_t> drop_ppm_{0};
  std::atomic<uint64_t> injected_{0};
};

class DpdkContext final : public peering::PeeringContext {
 public:
  // Fails where the port cannot start, unless allow_no_device: then a
  // context that runs every link over TCP (has_device() false, naming why).
  static Status create(const ContextOptions& options, std::unique_ptr<DpdkContext>* out,
                       bool allow_no_device = false);
  bool has_device() const { return links_ != nullptr; }
  const std::string& no_device_reason() const { return no_link_reason(); }
  const DpdkLinks* links() const { return links_; }
  DpdkLinks* links() { return links_; }
  std::string summary() const override;

 private:
  explicit DpdkContext(const ContextOptions& options) : PeeringContext(options) {}
  DpdkLinks* links_ = nullptr;  // owned by the peering context
};

}  // namespace gsync::transport::dpdk
