// SPDX-License-Identifier: Apache-2.0
//
// The control plane's side of membership on etcd (docs/membership.md):
// joining at start, and the registry's changes applied on the event thread.
// A host's slot is its index on every daemon; a host that joins gets a link
// (transport set_peer), one that leaves loses it (drop_peer: its ops fail
// naming it, through on_peer_down, as when a link dies).
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "daemon/cluster/control_plane.h"
#include "gsync_build_config.h"

namespace gsync::cluster {

namespace {

std::string own_host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0) return "";
  return name;
}

}  // namespace

Status ControlPlane::join_etcd(const DaemonConfig& cfg, std::unique_ptr<etcd::Registry>* registry,
                               ClusterFile* cluster) {
  etcd::RegistryOptions o;
  o.endpoints = cfg.etcd_endpoints;
  o.cluster = etcd::cluster_prefix(cfg.etcd_prefix, cfg.cluster_name);
  o.ttl_s = cfg.etcd_lease_ttl_s;
  o.self.id = cfg.host_id.empty() ? own_host_name() : cfg.host_id;
  if (o.self.id.empty() || o.self.id.find('/') != std::string::npos ||
      o.self.id.size() > kMaxClusterName)
    return {GSYNC_ERR_INVALID, fmt::format("etcd membership: host id \"{}\" must be 1 to {} bytes "
                                           "without '/' ([cluster] host_id)",
                                           o.self.id, kMaxClusterName)};
  o.self.address = cfg.address;
  o.self.port = static_cast<uint16_t>(cfg.port);
  o.self.rack = cfg.rack;
  o.self.version = GSYNC_VERSION_STRING;
  o.self.pid = static_cast<uint32_t>(getpid());
  auto reg = std::make_unique<etcd::Registry>(o);
  int slot = -1;
  std::vector<etcd::HostRecord> hosts;
  if (Status st = reg->join(&slot, &hosts); !st) return st;
  ClusterFile cf;
  cf.name = cfg.cluster_name;
  cf.path = fmt::format("etcd {}", fmt::join(cfg.etcd_endpoints, ","));
  cf.self = slot;
  cf.hosts.resize(size_t(slot) + 1);
  for (const auto& h : hosts) {
    if (size_t(h.slot) >= cf.hosts.size()) cf.hosts.resize(size_t(h.slot) + 1);
    cf.hosts[size_t(h.slot)] = {h.id, h.address, h.port, h.rack};
  }
  cf.hosts[size_t(slot)] = {o.self.id, o.self.address, o.self.port, o.self.rack};
  spdlog::info("etcd: host {} registered in cluster {} at slot {} (lease ttl {} s, {}); {} hosts "
               "registered now",
               o.self.id, cf.name, slot, o.ttl_s, reg->state().endpoint, hosts.size());
  *cluster = std::move(cf);
  *registry = std::move(reg);
  return Status::ok();
}

void ControlPlane::start_registry() {
  registry_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (registry_fd_ < 0) {
    spdlog::critical("etcd: eventfd: {}; membership changes will not be seen", strerror(errno));
    return;
  }
  loop_.add(registry_fd_, EPOLLIN, [this](uint32_t) {
    uint64_t n = 0;
    [[maybe_unused]] ssize_t r = ::read(registry_fd_, &n, sizeof n);
    on_registry();
  });
  int fd = registry_fd_;
  registry_->start([fd] {
    uint64_t one = 1;
    [[maybe_unused]] ssize_t r = ::write(fd, &one, sizeof one);
  });
}

void ControlPlane::on_registry() {
  for (auto& c : registry_->take()) {
    switch (c.kind) {
      case etcd::Change::Kind::kJoined:
        host_joined(c.host);
        break;
      case etcd::Change::Kind::kLeft:
        host_left(c.id, c.text);
        break;
      case etcd::Change::Kind::kSnapshot:
        hosts_now(c.hosts);
        break;
      case etcd::Change::Kind::kEtcdDown:
        spdlog::error("etcd is unreachable ({}): running jobs go on with the {} hosts known now; "
                      "no host joins or leaves until it answers",
                      c.text, members());
        break;
      case etcd::Change::Kind::kEtcdUp:
        spdlog::info("etcd answers again ({}); membership follows it again",
                     registry_->state().endpoint);
        break;
      case etcd::Change::Kind::kRejoined:
        spdlog::warn("etcd: {}: peers saw this host leave and come back", c.text);
        break;
    }
  }
}

void ControlPlane::host_joined(const etcd::HostRecord& r) {
  if (r.id == self_id()) return;  // our own record (written again after a lost lease)
  if (r.slot == cluster_.self) {
    spdlog::error("etcd: host {} claims slot {}, this daemon's; ignored", r.id, r.slot);
    return;
  }
  grow(size_t(r.slot) + 1);
  auto& h = cluster_.hosts[size_t(r.slot)];
  bool was = is_member(r.slot) && h.id == r.id && h.address == r.address && h.port == r.port &&
             h.rack == r.rack;
  if (was) return;
  h = {r.id, r.address, r.port, r.rack};
  present_[size_t(r.slot)] = true;
  if (Status st = net_->set_peer(r.slot, {r.id, r.address, r.port, r.rack}); !st) {
    spdlog::error("etcd: host {} joined but cannot be linked: {}", r.id, st.message());
    return;
  }
  spdlog::info("host {} ({}:{}, rack {}, pid {}) joined cluster {} at slot {}; {} hosts", r.id,
               r.address, r.port, r.rack, r.pid, cluster_.name, r.slot, members());
}

void ControlPlane::host_left(const std::string& id, const std::string& why) {
  if (id == self_id()) {
    spdlog::warn("etcd: this host's own key went ({}); it registers again", why);
    return;
  }
  for (int h = 0; h < static_cast<int>(cluster_.hosts.size()); h++) {
    if (!is_member(h) || cluster_.hosts[size_t(h)].id != id) continue;
    present_[size_t(h)] = false;
    const auto& host = cluster_.hosts[size_t(h)];
    std::string what = fmt::format("host {} ({}:{}, rack {}) left cluster {}: {}", id,
                                   host.address, host.port, host.rack, cluster_.name, why);
    spdlog::warn("{}; {} hosts", what, members());
    // Its link goes down with this reason (on_peer_down fails its ops);
    // a link already down has failed them already.
    net_->drop_peer(h, Status(GSYNC_ERR_HOST_LOST, what));
    return;
  }
}

void ControlPlane::hosts_now(const std::vector<etcd::HostRecord>& hosts) {
  std::set<std::string> there;
  for (const auto& r : hosts) there.insert(r.id);
  for (int h = 0; h < static_cast<int>(cluster_.hosts.size()); h++)
    if (h != cluster_.self && is_member(h) && !there.count(cluster_.hosts[size_t(h)].id))
      host_left(cluster_.hosts[size_t(h)].id, "its key is no longer in etcd");
  for (const auto& r : hosts) host_joined(r);
}

int ControlPlane::members() const {
  int n = 0;
  for (bool p : present_) n += p;
  return n;
}

nlohmann::json ControlPlane::membership_report() const {
  nlohmann::json j = {{"source", registry_ ? "etcd" : "file"},
                      {"where", cluster_.path},
                      {"hosts", members()}};
  if (!registry_) return j;
  auto s = registry_->state();
  j["etcd"] = {{"endpoints", registry_->options().endpoints},
               {"prefix", registry_->options().cluster},
               {"up", s.etcd_up},
               {"endpoint", s.endpoint},
               {"last_error", s.last_error},
               {"lease", fmt::format("{:x}", s.lease)},
               {"lease_ttl_s", registry_->options().ttl_s},
               {"revision", s.revision},
               {"changes", s.changes},
               {"rejoins", s.rejoins}};
  return j;
}

}  // namespace gsync::cluster
