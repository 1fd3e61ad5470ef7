// SPDX-License-Identifier: Apache-2.0
#include "daemon/transport/verbs/context.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace gsync::transport::verbs {

Status VerbsLinks::create(const ContextOptions& options, std::unique_ptr<VerbsLinks>* out) {
  std::unique_ptr<VerbsLinks> v(new VerbsLinks(options));
  const PeerInfo& me = options.hosts[size_t(options.self)];
  std::string local = options.listen_address.empty() ? me.address : options.listen_address;
  if (Status st = Device::create(options.verbs, local, &v->device_); !st) return st;
  v->mrs_ = std::make_unique<MrCache>(*v->device_);
  if (std::string m = memlock_problem(64ull << 20); !m.empty())
    spdlog::warn("verbs transport: {}", m);
  *out = std::move(v);
  return Status::ok();
}

VerbsLinks::~VerbsLinks() {
  pairs_.clear();  // QPs and CQs before the registrations and the PD
  for (auto& [id, r] : regions_.all())
    if (r.mr) mrs_->release(r.mr);
  for (auto& [id, mr] : retired_)
    if (mr) mrs_->release(mr);
  mrs_.reset();
}

std::string VerbsLinks::detail() const {
  const DeviceChoice& d = device_->choice();
  return fmt::format("{} port {} gid {}", d.device, d.port, d.gid_index);
}

std::string VerbsLinks::summary() const {
  const DeviceChoice& c = device_->choice();
  return fmt::format("verbs within a rack on {} port {} (GID index {}, {}), tcp otherwise", c.device,
                     c.port, c.gid_index, c.gid_type);
}

void VerbsLinks::start(peering::LinkHost& host) {
  host_ = &host;
  pairs_.resize(options_.hosts.size());
  for (int i = 0; i < static_cast<int>(options_.hosts.size()); i++)
    if (i != options_.self) pairs_[size_t(i)] = std::make_unique<Pair>(*this, i);
}

bool VerbsLinks::add_peer(int peer) {
  if (peer < 0 || peer == options_.self) return false;
  if (size_t(peer) >= pairs_.size()) pairs_.resize(size_t(peer) + 1);
  if (!pairs_[size_t(peer)]) pairs_[size_t(peer)] = std::make_unique<Pair>(*this, peer);
  return true;
}

void VerbsLinks::link_up(int peer) {
  pairs_[size_t(peer)]->on_link_up();
  for (auto& [id, r] : regions_.all()) announce(peer, r);
}

void VerbsLinks::link_down(int peer, const Status& why) { pairs_[size_t(peer)]->on_link_down(why); }

void VerbsLinks::on_bootstrap(int peer, std::string_view msg) {
  Pair& p = *pairs_[size_t(peer)];
  auto bad = [&](const char* what) {
    spdlog::error("verbs transport: malformed {} message from {} ({} bytes); ignored", what,
                  p.describe(), msg.size());
  };
  switch (static_cast<Tag>(msg[0])) {
    case Tag::kQpInfo: {
      QpInfo m;
      if (!decode(msg, &m)) return bad("QP_INFO");
      return p.on_qp_info(m);
    }
    case Tag::kReady: {
      Ready m;
      if (!decode(msg, &m)) return bad("READY");
      return p.on_ready(m);
    }
    case Tag::kRegion: {
      RegionInfo m;
      if (!decode(msg, &m)) return bad("REGION");
      return p.on_region(m);
    }
  }
  bad("unknown");
}

void VerbsLinks::on_retire(int peer, uint32_t id) { pairs_[size_t(peer)]->on_retire(id); }

// ---------------------------------------------------------------- regions

void VerbsLinks::announce(int peer, const LocalRegion& r) {
  RegionInfo m;
  m.id = r.region.id;
  m.addr = reinterpret_cast<uint64_t>(r.region.base);
  m.bytes = r.region.bytes;
  m.rkey = r.mr ? MrCache::registration(r.mr).rkey : 0;
  m.error = r.error;
  host_->send_bootstrap(peer, encode(m));
}

void VerbsLinks::add_region(const Region& region) {
  regions_.note_issued(region.id);
  LocalRegion r;
  r.region = region;
  if (region.bytes > 0) {
    Status err;
    r.mr = mrs_->acquire(region.base, region.bytes, &err);
    if (r.mr == nullptr) {
      // The interface cannot fail here: the region exists, and every write
      // into it (and from it) fails with this text, naming the cause.
      r.error = err.message();
      if (failed_registrations_++ == 0)
        spdlog::error("verbs transport: {} (further failures are reported by the writes)",
                      r.error);
    }
  }
  for (auto& p : pairs_)
    if (p && p->link_up()) announce(p->peer(), r);
  regions_.add(std::move(r));
}

void VerbsLinks::retire_region(uint32_t id) {
  // Writes of peers may still land in it until they acknowledge: the
  // registration stays until drop_region.
  LocalRegion r;
  if (regions_.take(id, &r)) retired_[id] = r.mr;
}

void VerbsLinks::drop_region(uint32_t id) {
  auto it = retired_.find(id);
  if (it == retired_.end()) return;
  if (it->second) mrs_->release(it->second);
  retired_.erase(it);
}

// ---------------------------------------------------------------- data

void VerbsLinks::write(int peer, const void* src, uint64_t len, uint32_t remote_region,
                       uint64_t remote_offset, uint64_t imm, uint64_t cookie) {
  pairs_[size_t(peer)]->write(src, len, remote_region, remote_offset, imm, cookie);
}

bool VerbsLinks::poll() {
  // ibv_get_cq_event(3): every event is acknowledged (here, at once) and
  // the CQ re-armed before it is polled, so a completion that lands after
  // the polling raises a new event. Acknowledged events are what
  // ibv_destroy_cq waits for; none is ever left unacknowledged.
  ibv_cq* cq = nullptr;
  void* cq_ctx = nullptr;
  while (ibv_get_cq_event(device_->channel(), &cq, &cq_ctx) == 0) {
    ibv_ack_cq_events(cq, 1);
    static_cast<Pair*>(cq_ctx)->on_cq_event(cq);
  }
  bool more = false;
  for (auto& p : pairs_)
    if (p) more |= p->poll_cq();
  for (auto& p : pairs_)
    if (p) p->flush();
  return more;
}

bool VerbsLinks::peer_up(int peer) const { return pairs_[size_t(peer)]->up(); }

PeerStats VerbsLinks::stats(int peer) const { return pairs_[size_t(peer)]->stats(); }

// ---------------------------------------------------------------- the context

Status VerbsContext::create(const ContextOptions& options, std::unique_ptr<VerbsContext>* out,
                            bool allow_no_device) {
  if (options.self < 0 || options.self >= static_cast<int>(options.hosts.size()))
    return Status(GSYNC_ERR_INVALID, fmt::format("self index {} is not one of the {} hosts",
                                                 options.self, options.hosts.size()));
  std::unique_ptr<VerbsLinks> links;
  Status st = VerbsLinks::create(options, &links);
  if (!st && !allow_no_device) return st;
  std::unique_ptr<VerbsContext> c(new VerbsContext(options));
  c->links_ = links.get();
  if (Status init = c->init(std::move(links), st.message()); !init) return init;
  *out = std::move(c);
  return Status::ok();
}

}  // namespace gsync::transport::verbs
