// SPDX-License-Identifier: Apache-2.0
//
// The verbs provider: RDMA links for a peering context
// (transport/peering/), which gives it the TCP bootstrap, the link choice
// and region retirement. VerbsLinks owns what verbs needs once per daemon -
// the device (PD, completion channel), the registration cache, the table of
// this daemon's regions with their memory registrations - and one Pair per
// peer (an RC queue pair, set up by QP_INFO / READY over the bootstrap
// link). VerbsContext is the peering context with VerbsLinks in it: what
// make_context builds where libibverbs is, device or not.
// docs/transport.md, "The verbs provider".
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "daemon/transport/peering/context.h"
#include "daemon/transport/peering/link.h"
#include "daemon/transport/transport.h"
#include "daemon/transport/verbs/buffer.h"
#include "daemon/transport/verbs/device.h"
#include "daemon/transport/verbs/frame.h"
#include "daemon/transport/verbs/pair.h"

namespace gsync::transport::verbs {

class VerbsLinks final : public peering::LinkProvider {
 public:
  // Opens the device; fails where none is usable.
  static Status create(const ContextOptions& options, std::unique_ptr<VerbsLinks>* out);
  ~VerbsLinks() override;

  peering::LinkKind kind() const override { return peering::LinkKind::kVerbs; }
  std::string detail() const override;
  int event_fd() const override { return device_->channel()->fd; }
  void start(peering::LinkHost& host) override;
  bool add_peer(int peer) override;
  void link_up(int peer) override;
  void link_down(int peer, const Status& why) override;
  void on_bootstrap(int peer, std::string_view msg) override;
  void on_retire(int peer, uint32_t id) override;
  void add_region(const Region& r) override;
  void retire_region(uint32_t id) override;
  void drop_region(uint32_t id) override;
  void write(int peer, const void* src, uint64_t len, uint32_t remote_region,
             uint64_t remote_offset, uint64_t imm, uint64_t cookie) override;
  bool poll() override;
  bool peer_up(int peer) const override;
  PeerStats stats(int peer) const override;
  std::string summary() const override;

  // For Pair.
  Device& device() { return *device_; }
  const Device& device() const { return *device_; }
  MrCache& mrs() { return *mrs_; }
  const RegionTable& regions() const { return regions_; }
  peering::LinkHost& host() { return *host_; }

  Pair* pair(int peer) { return pairs_[size_t(peer)].get(); }
  const MrCache& mr_cache() const { return *mrs_; }

 private:
  explicit VerbsLinks(const ContextOptions& options) : options_(options) {}
  void announce(int peer, const LocalRegion& r);

  ContextOptions options_;
  peering::LinkHost* host_ = nullptr;
  std::unique_ptr<Device> device_;
  std::unique_ptr<MrCache> mrs_;
  RegionTable regions_;  // this daemon's regions, with their registrations
  // Retired regions whose registration waits for every peer's RETIRE_ACK.
  std::unordered_map<uint32_t, MrCache::Entry*> retired_;
  std::vector<std::unique_ptr<Pair>> pairs_;  // by host index; null for self
  uint64_t failed_registrations_ = 0;
};

class VerbsContext final : public peering::PeeringContext {
 public:
  // Fails where no device is usable, unless allow_no_device: then a context
  // that runs every link over TCP (has_device() false, no_device_reason()).
  static Status create(const ContextOptions& options, std::unique_ptr<VerbsContext>* out,
                       bool allow_no_device = false);

  bool has_device() const { return links_ != nullptr; }
  const std::string& no_device_reason() const { return no_link_reason(); }
  const Device& device() const { return links_->device(); }
  // Tests: the pair to a peer (to provoke an error on purpose), the
  // registration cache, and offering no verbs link as a daemon without a
  // device would.
  Pair* pair_for_test(int peer) { return links_->pair(peer); }
  const MrCache& mr_cache() const { return links_->mr_cache(); }
  void refuse_verbs_for_test(std::string why) { refuse_links_for_test(std::move(why)); }

 private:
  explicit VerbsContext(const ContextOptions& options) : PeeringContext(options) {}
  VerbsLinks* links_ = nullptr;  // owned by the peering context; null without a device
};

}  // namespace gsync::transport::verbs
