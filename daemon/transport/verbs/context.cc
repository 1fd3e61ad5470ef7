// SPDX-License-Identifier: Apache-2.0
#include "daemon/transport/verbs/context.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "daemon/transport/verbs/frame.h"

namespace gsync::transport::verbs {

VerbsContext::VerbsContext(const ContextOptions& options) : options_(options) {}

Status VerbsContext::create(const ContextOptions& options, std::unique_ptr<VerbsContext>* out,
                            bool allow_no_device) {
  if (options.self < 0 || options.self >= static_cast<int>(options.hosts.size()))
    return Status(GSYNC_ERR_INVALID, fmt::format("self index {} is not one of the {} hosts",
                                                 options.self, options.hosts.size()));
  std::unique_ptr<VerbsContext> c(new VerbsContext(options));
  const PeerInfo& me = options.hosts[size_t(options.self)];
  std::string local = options.listen_address.empty() ? me.address : options.listen_address;
  if (Status st = Device::create(options.verbs, local, &c->device_); !st) {
    if (!allow_no_device) return st;
    c->device_.reset();
    c->offer_ = {false, st.message()};
  }
  if (c->device_) {
    c->mrs_ = std::make_unique<MrCache>(*c->device_);
    if (std::string m = memlock_problem(64ull << 20); !m.empty())
      spdlog::warn("verbs transport: {}", m);
  }

  // The control link: the TCP provider itself. It also carries the writes
  // of every link that is not verbs (another rack, a peer without a device,
  // or no device here), so it gets the configured streams: the same on every
  // daemon whatever its device, as both ends of a link must agree.
  Status st;
  c->inner_ = make_tcp_context(options, &st);
  if (!c->inner_) return st;

  c->epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  c->wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (c->epoll_fd_ < 0 || c->wake_fd_ < 0)
    return Status(GSYNC_ERR_INTERNAL, fmt::format("epoll/eventfd: {}", strerror(errno)));
  for (int fd : {c->inner_->event_fd(), c->device_ ? c->device_->channel()->fd : -1, c->wake_fd_}) {
    if (fd < 0) continue;
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    if (epoll_ctl(c->epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0)
      return Status(GSYNC_ERR_INTERNAL, fmt::format("epoll_ctl: {}", strerror(errno)));
  }
  c->partial_.resize(options.hosts.size());
  c->link_.assign(options.hosts.size(), Link::kUnknown);
  c->decided_.assign(options.hosts.size(), false);
  c->logged_.resize(options.hosts.size());
  c->mismatch_.resize(options.hosts.size());
  c->pairs_.resize(options.hosts.size());
  if (c->device_) {
    const DeviceChoice& d = c->device_->choice();
    c->offer_.detail = fmt::format("{} port {} gid {}", d.device, d.port, d.gid_index);
    for (int i = 0; i < static_cast<int>(options.hosts.size()); i++)
      if (i != options.self) c->pairs_[size_t(i)] = std::make_unique<Pair>(*c, i);
  }
  *out = std::move(c);
  return Status::ok();
}

VerbsContext::~VerbsContext() {
  inner_.reset();
  pairs_.clear();  // QPs and CQs before the registrations and the PD
  for (auto& [id, r] : regions_.all())
    if (r.mr && mrs_) mrs_->release(r.mr);
  for (auto& [id, r] : retiring_)
    if (r.mr && mrs_) mrs_->release(r.mr);
  mrs_.reset();
  if (wake_fd_ >= 0) close(wake_fd_);
  if (epoll_fd_ >= 0) close(epoll_fd_);
}

std::string VerbsContext::describe_host(int index) const {
  const PeerInfo& h = options_.hosts[static_cast<size_t>(index)];
  bool v6 = h.address.find(':') != std::string::npos;
  return fmt::format("{} ({}{}{}:{})", h.host_id, v6 ? "[" : "", h.address, v6 ? "]" : "", h.port);
}

bool VerbsContext::valid_peer(int peer) const {
  return peer >= 0 && peer < size() && peer != self();
}

Status VerbsContext::start(Handlers handlers) {
  if (started_) return Status(GSYNC_ERR_INVALID, "verbs transport: started twice");
  started_ = true;
  handlers_ = std::move(handlers);
  Handlers h;
  h.on_peer_up = [this](int p) { on_link_up(p); };
  h.on_peer_down = [this](int p, const Status& why) { on_link_down(p, why); };
  h.on_control = [this](int p, std::string_view m) { on_internal(p, m); };
  // Writes of TCP links: the region ids are the ones callers hold.
  h.on_write = [this](int p, uint32_t r, uint64_t off, uint64_t len, uint64_t imm) {
    if (!mismatch_[size_t(p)].empty()) return;  // not a peer of this protocol
    if (handlers_.on_write) handlers_.on_write(p, r, off, len, imm);
  };
  h.on_write_done = [this](int p, uint64_t cookie, const Status& st) {
    if (handlers_.on_write_done) handlers_.on_write_done(p, cookie, st);
  };
  return inner_->start(std::move(h));
}

// ---------------------------------------------------------------- the TCP link

void VerbsContext::on_link_up(int peer) {
  // First on the link, so the peer decides before anything else of ours
  // arrives; the QP (if any) starts once its CAPS is here.
  decided_[size_t(peer)] = false;
  send_internal(peer, encode(offer_));
}

void VerbsContext::on_caps(int peer, const Caps& m) {
  if (decided_[size_t(peer)]) return;
  decided_[size_t(peer)] = true;
  const PeerInfo& me = options_.hosts[size_t(self())];
  const PeerInfo& them = options_.hosts[size_t(peer)];
  std::string why;
  mismatch_[size_t(peer)].clear();
  if (them.rack != me.rack)
    why = fmt::format("other rack {}", them.rack.empty() ? "\"\"" : them.rack);
  else if (!m.verbs)
    why = fmt::format("peer has no RDMA device{}", m.detail.empty() ? "" : ": " + m.detail);
  else if (!offer_.verbs)
    why = fmt::format("this daemon offers no verbs link{}",
                      offer_.detail.empty() ? "" : ": " + offer_.detail);
  std::string said = why.empty() ? fmt::format("{}: verbs {}", them.host_id, offer_.detail)
                                 : fmt::format("{}: tcp ({})", them.host_id, why);
  if (said != logged_[size_t(peer)]) {
    spdlog::info("verbs transport: link {}", said);
    logged_[size_t(peer)] = said;
  }
  if (why.empty() && pairs_[size_t(peer)]) {
    link_[size_t(peer)] = Link::kVerbs;
    pairs_[size_t(peer)]->on_link_up();
    for (auto& [id, r] : regions_.all()) announce(peer, r);
    return;
  }
  link_[size_t(peer)] = Link::kTcp;
  // The TCP link is the data link: it is up now. Reported at once, so the
  // caller hears of it before any write that comes in on it.
  post_peer_up(peer);
  flush_events();
}

void VerbsContext::on_link_down(int peer, const Status& why) {
  bool was_tcp = decided_[size_t(peer)] && link_[size_t(peer)] == Link::kTcp;
  decided_[size_t(peer)] = false;
  mismatch_[size_t(peer)].clear();
  if (pairs_[size_t(peer)]) pairs_[size_t(peer)]->on_link_down(why);
  if (was_tcp) post_peer_down(peer, why);
  partial_[size_t(peer)].clear();
  // It can no longer write anything into our memory: the QP is gone.
  std::vector<uint32_t> ids;
  for (auto& [id, r] : retiring_) ids.push_back(id);
  for (uint32_t id : ids) region_acked(id, peer);
}

void VerbsContext::on_internal(int peer, std::string_view msg) {
  if (msg.empty()) return;
  Pair* p = pairs_[size_t(peer)].get();
  auto bad = [&](const char* what) {
    spdlog::error("verbs transport: malformed {} message from {} ({} bytes); ignored", what,
                  describe_host(peer), msg.size());
  };
  // Our side sends CAPS first on every link, so does every daemon of this
  // protocol. Anything else first is a daemon running the plain TCP context
  // ([cluster] transport = "tcp", or a build without libibverbs): its
  // messages are not ours to read, and it never comes up here.
  if (!decided_[size_t(peer)] && static_cast<Ctl>(msg[0]) != Ctl::kCaps) {
    if (mismatch_[size_t(peer)].empty()) {
      mismatch_[size_t(peer)].set(fmt::format(
          "peer {} speaks the plain tcp transport (its first message was not the verbs "
          "transport's capability message); set [cluster] transport the same on every host",
          describe_host(peer)));
      spdlog::error("verbs transport: {}; its messages are ignored", mismatch_[size_t(peer)].text);
    }
    return;
  }
  auto no_pair = [&](const char* what) {
    spdlog::error("verbs transport: {} message from {}, but this daemon offers no verbs link; "
                  "ignored", what, describe_host(peer));
  };
  switch (static_cast<Ctl>(msg[0])) {
    case Ctl::kCaps: {
      Caps m;
      if (!decode(msg, &m)) return bad("CAPS");
      on_caps(peer, m);
      return;
    }
    case Ctl::kUserPart:
      partial_[size_t(peer)].append(msg.substr(1));
      return;
    case Ctl::kUser: {
      std::string& part = partial_[size_t(peer)];
      if (part.empty()) {
        if (handlers_.on_control) handlers_.on_control(peer, msg.substr(1));
      } else {
        std::string whole = std::move(part);
        part.clear();
        whole.append(msg.substr(1));
        if (handlers_.on_control) handlers_.on_control(peer, whole);
      }
      return;
    }
    case Ctl::kQpInfo: {
      QpInfo m;
      if (!decode(msg, &m)) return bad("QP_INFO");
      if (!p) return no_pair("QP_INFO");
      p->on_qp_info(m);
      return;
    }
    case Ctl::kReady: {
      Ready m;
      if (!decode(msg, &m)) return bad("READY");
      if (!p) return no_pair("READY");
      p->on_ready(m);
      return;
    }
    case Ctl::kRegion: {
      RegionInfo m;
      if (!decode(msg, &m)) return bad("REGION");
      if (!p) return no_pair("REGION");
      p->on_region(m);
      return;
    }
    case Ctl::kRetire: {
      uint32_t id;
      if (!decode_id(msg, &id)) return bad("RETIRE");
      if (!p) return no_pair("RETIRE");
      p->on_retire(id);
      return;
    }
    case Ctl::kRetireAck: {
      uint32_t id;
      if (!decode_id(msg, &id)) return bad("RETIRE_ACK");
      region_acked(id, peer);
      return;
    }
  }
  bad("unknown");
}

void VerbsContext::send_internal(int peer, const std::string& msg) {
  inner_->send_control(peer, msg);
}

// ---------------------------------------------------------------- regions

void VerbsContext::announce(int peer, const LocalRegion& r) {
  RegionInfo m;
  m.id = r.region.id;
  m.addr = reinterpret_cast<uint64_t>(r.region.base);
  m.bytes = r.region.bytes;
  m.rkey = r.mr ? MrCache::registration(r.mr).rkey : 0;
  m.error = r.error;
  send_internal(peer, encode(m));
}

Region VerbsContext::register_region(void* base, uint64_t bytes) {
  // One id for both paths: the TCP table's (never reused either).
  Region t = inner_->register_region(base, bytes);
  regions_.note_issued(t.id);
  LocalRegion r;
  r.region = {t.id, static_cast<uint8_t*>(base), bytes};
  if (bytes > 0 && mrs_) {
    Status err;
    r.mr = mrs_->acquire(base, bytes, &err);
    if (r.mr == nullptr) {
      // The interface cannot fail here: the region exists, and every write
      // into it (and from it) fails with this text, naming the cause.
      r.error = err.message();
      if (failed_registrations_++ == 0)
        spdlog::error("verbs transport: {} (further failures are reported by the writes)",
                      r.error);
    }
  }
  for (int p = 0; p < size(); p++)
    if (pairs_[size_t(p)] && pairs_[size_t(p)]->link_up()) announce(p, r);
  Region out = r.region;
  regions_.add(std::move(r));
  return out;
}

void VerbsContext::deregister_region(uint32_t id, std::function<void()> released) {
  // Released once both paths are done with it: TCP receives into it have
  // completed and every verbs peer has acknowledged its retirement.
  auto left = std::make_shared<int>(2);
  auto cb = std::make_shared<std::function<void()>>(std::move(released));
  released = [left, cb] {
    if (--*left == 0 && *cb) (*cb)();
  };
  inner_->deregister_region(id, released);
  LocalRegion r;
  if (!regions_.take(id, &r)) {
    released();
    return;
  }
  Retiring t;
  t.waiting.assign(size_t(size()), false);
  t.mr = r.mr;
  t.released = std::move(released);
  // Every peer that knows the region may have RDMA writes into it in
  // flight, which only it can see end: ask each, and wait.
  for (int p = 0; p < size(); p++) {
    if (!pairs_[size_t(p)] || !pairs_[size_t(p)]->link_up()) continue;
    send_internal(p, encode_id(Ctl::kRetire, id));
    t.waiting[size_t(p)] = true;
    t.left++;
  }
  if (t.left == 0) {
    if (t.mr) mrs_->release(t.mr);
    if (t.released) t.released();
    return;
  }
  retiring_[id] = std::move(t);
}

void VerbsContext::region_acked(uint32_t id, int peer) {
  auto it = retiring_.find(id);
  if (it == retiring_.end() || !it->second.waiting[size_t(peer)]) return;
  it->second.waiting[size_t(peer)] = false;
  if (--it->second.left > 0) return;
  if (it->second.mr) mrs_->release(it->second.mr);
  events_.released(std::move(it->second.released));
  retiring_.erase(it);
  notify();
}

// ---------------------------------------------------------------- data

void VerbsContext::write(int peer, const void* src, uint64_t len, uint32_t remote_region,
                         uint64_t remote_offset, uint64_t imm, uint64_t cookie) {
  if (!valid_peer(peer)) {
    post_write_done(peer, cookie,
                    Status(GSYNC_ERR_INVALID, fmt::format("verbs transport: write to host index {} "
                                                          "(this daemon is {}, {} hosts)",
                                                          peer, self(), size())));
    return;
  }
  switch (link_[size_t(peer)]) {
    case Link::kVerbs:
      pairs_[size_t(peer)]->write(src, len, remote_region, remote_offset, imm, cookie);
      return;
    case Link::kTcp:
      inner_->write(peer, src, len, remote_region, remote_offset, imm, cookie);
      return;
    case Link::kUnknown:
      break;
  }
  post_write_done(peer, cookie,
                  Status(GSYNC_ERR_HOST_LOST,
                         fmt::format("write {} -> {}: the link is not up yet", describe_host(self()),
                                     describe_host(peer))));
}

void VerbsContext::send_control(int peer, std::string_view msg) {
  if (!valid_peer(peer)) return;
  if (msg.size() > kMaxControl) {
    spdlog::error("verbs transport: control message of {} bytes to {} dropped: the limit is {}",
                  msg.size(), describe_host(peer), kMaxControl);
    return;
  }
  // One tag byte in front; a message of the full size goes in two parts.
  size_t room = kMaxControl - 1;
  while (msg.size() > room) {
    std::string part(1, static_cast<char>(Ctl::kUserPart));
    part.append(msg.substr(0, room));
    send_internal(peer, part);
    msg.remove_prefix(room);
  }
  std::string last(1, static_cast<char>(Ctl::kUser));
  last.append(msg);
  send_internal(peer, last);
}

// ---------------------------------------------------------------- the loop

void VerbsContext::notify() {
  // Inside poll() the events are delivered before it returns, and one
  // pending wakeup is enough: either way another write would only cost a
  // syscall and a spurious turn of the event loop.
  if (in_poll_ || wake_pending_) return;
  wake_pending_ = true;
  uint64_t one = 1;
  if (::write(wake_fd_, &one, sizeof one) < 0 && errno != EAGAIN)
    spdlog::warn("verbs transport: eventfd write: {}", strerror(errno));
}

void VerbsContext::poll() {
  if (in_poll_) return;  // a handler called poll(); its caller is polling already
  if (wake_pending_) {
    uint64_t v;
    [[maybe_unused]] ssize_t n = ::read(wake_fd_, &v, sizeof v);
    wake_pending_ = false;
  }
  in_poll_ = true;
  inner_->poll();
  // ibv_get_cq_event(3): every event is acknowledged (here, at once) and
  // the CQ re-armed before it is polled, so a completion that lands after
  // the polling raises a new event. Acknowledged events are what
  // ibv_destroy_cq waits for; none is ever left unacknowledged.
  ibv_cq* cq = nullptr;
  void* cq_ctx = nullptr;
  while (device_ && ibv_get_cq_event(device_->channel(), &cq, &cq_ctx) == 0) {
    ibv_ack_cq_events(cq, 1);
    static_cast<Pair*>(cq_ctx)->on_cq_event(cq);
  }
  bool more = false;
  for (auto& p : pairs_)
    if (p) more |= p->poll_cq();
  for (auto& p : pairs_)
    if (p) p->flush();
  flush_events();
  in_poll_ = false;
  if (more) notify();  // bounded work per turn; the loop comes back
}

void VerbsContext::post_write_done(int peer, uint64_t cookie, Status st) {
  events_.write_done(peer, cookie, std::move(st));
  notify();
}

void VerbsContext::post_peer_up(int peer) {
  events_.peer_up(peer);
  notify();
}

void VerbsContext::post_peer_down(int peer, Status why) {
  events_.peer_down(peer, std::move(why));
  notify();
}

void VerbsContext::flush_events() { events_.flush(handlers_); }

bool VerbsContext::peer_up(int peer) const {
  if (!valid_peer(peer)) return false;
  switch (link_[size_t(peer)]) {
    case Link::kVerbs:
      return pairs_[size_t(peer)]->up();
    case Link::kTcp:
      return decided_[size_t(peer)] && inner_->peer_up(peer);
    case Link::kUnknown:
      break;
  }
  return false;
}

PeerStats VerbsContext::stats(int peer) const {
  if (!valid_peer(peer)) return {};
  if (link_[size_t(peer)] == Link::kVerbs) return pairs_[size_t(peer)]->stats();
  PeerStats s = inner_->stats(peer);  // transport "tcp", no verbs_* fields
  if (s.state == PeerState::kUp && !peer_up(peer)) s.state = PeerState::kConnecting;
  if (!mismatch_[size_t(peer)].empty()) {
    s.last_error = mismatch_[size_t(peer)].text;
    s.last_error_at = mismatch_[size_t(peer)].at;
  }
  return s;
}

std::string VerbsContext::summary() const {
  if (!device_) return fmt::format("tcp on every link: no usable RDMA device ({})", no_device_reason());
  const DeviceChoice& c = device_->choice();
  return fmt::format("verbs within a rack on {} port {} (GID index {}, {}), tcp otherwise", c.device,
                     c.port, c.gid_index, c.gid_type);
}

}  // namespace gsync::transport::verbs
