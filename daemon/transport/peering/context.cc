// SPDX-License-Identifier: Apache-2.0
#include "daemon/transport/peering/context.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace gsync::transport::peering {

PeeringContext::PeeringContext(const ContextOptions& options) : options_(options) {}

Status PeeringContext::create(const ContextOptions& options,
                                std::unique_ptr<LinkProvider> provider, std::string why_none,
                                std::unique_ptr<PeeringContext>* out) {
  std::unique_ptr<PeeringContext> c(new PeeringContext(options));
  if (Status st = c->init(std::move(provider), std::move(why_none)); !st) return st;
  *out = std::move(c);
  return Status::ok();
}

Status PeeringContext::init(std::unique_ptr<LinkProvider> provider, std::string why_none) {
  const ContextOptions& options = options_;
  if (options.self < 0 || options.self >= static_cast<int>(options.hosts.size()))
    return Status(GSYNC_ERR_INVALID, fmt::format("self index {} is not one of the {} hosts",
                                                 options.self, options.hosts.size()));
  provider_ = std::move(provider);
  why_none_ = std::move(why_none);
  offer_ = provider_ ? Caps{provider_->kind(), provider_->detail()} : Caps{LinkKind::kNone, why_none_};
  // The bootstrap link: the TCP provider itself. It also carries the
  // writes of every link that is not fast (another rack, a peer without a
  // device, or no device here), so it gets the configured streams: the
  // same on every daemon whatever its device, as both ends of a link must
  // agree.
  Status st;
  inner_ = make_tcp_context(options, &st);
  if (!inner_) return st;
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (epoll_fd_ < 0 || wake_fd_ < 0)
    return Status(GSYNC_ERR_INTERNAL, fmt::format("epoll/eventfd: {}", strerror(errno)));
  int provider_fd = provider_ ? provider_->event_fd() : -1;
  for (int fd : {inner_->event_fd(), provider_fd, wake_fd_}) {
    if (fd < 0) continue;  // a provider without one (polled on tick())
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0)
      return Status(GSYNC_ERR_INTERNAL, fmt::format("epoll_ctl: {}", strerror(errno)));
  }
  size_t n = options.hosts.size();
  partial_.resize(n);
  link_.assign(n, Link::kUnknown);
  decided_.assign(n, false);
  logged_.resize(n);
  mismatch_.resize(n);
  return Status::ok();
}

PeeringContext::~PeeringContext() {
  inner_.reset();
  provider_.reset();  // its links before anything they report to
  if (wake_fd_ >= 0) close(wake_fd_);
  if (epoll_fd_ >= 0) close(epoll_fd_);
}

std::string PeeringContext::describe_host(int index) const {
  const PeerInfo& h = options_.hosts[static_cast<size_t>(index)];
  bool v6 = h.address.find(':') != std::string::npos;
  return fmt::format("{} ({}{}{}:{})", h.host_id, v6 ? "[" : "", h.address, v6 ? "]" : "", h.port);
}

bool PeeringContext::valid_peer(int peer) const {
  return peer >= 0 && peer < size() && peer != self();
}

bool PeeringContext::fast_linked(int peer) const {
  return provider_ && link_[size_t(peer)] == Link::kFast && decided_[size_t(peer)];
}

Status PeeringContext::start(Handlers handlers) {
  if (started_) return Status(GSYNC_ERR_INVALID, "transport: started twice");
  started_ = true;
  handlers_ = std::move(handlers);
  if (provider_) provider_->start(*this);
  fast_ok_.assign(options_.hosts.size(), provider_ != nullptr);
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

// ---------------------------------------------------------------- membership

Caps PeeringContext::offer_for(int peer) const {
  if (offer_.kind == LinkKind::kNone || fast_ok_[size_t(peer)]) return offer_;
  return {LinkKind::kNone, fmt::format("its {} links cannot take a host that joined later",
                                       kind_name(offer_.kind))};
}

void PeeringContext::grow(int peer) {
  const size_t n = size_t(peer) + 1;
  if (n <= link_.size()) return;
  options_.hosts.resize(n);
  fast_ok_.resize(n, false);
  partial_.resize(n);
  link_.resize(n, Link::kUnknown);
  decided_.resize(n, false);
  logged_.resize(n);
  mismatch_.resize(n);
}

Status PeeringContext::set_peer(int peer, const PeerInfo& info) {
  // The inner context checks the index and the host and links it.
  if (Status st = inner_->set_peer(peer, info); !st) return st;
  grow(peer);
  PeerInfo& now = options_.hosts[size_t(peer)];
  if (now != info) {
    // Another host at the index (or the first): its link is chosen anew
    // on its CAPS; the old one's went down with the inner link.
    now = info;
    // A fast provider makes the new host's link state now (it was not
    // among the hosts it started with, or held another host's).
    if (provider_ && started_ && !fast_ok_[size_t(peer)])
      fast_ok_[size_t(peer)] = provider_->add_peer(peer);
    link_[size_t(peer)] = Link::kUnknown;
    decided_[size_t(peer)] = false;
    logged_[size_t(peer)].clear();
    mismatch_[size_t(peer)].clear();
    partial_[size_t(peer)].reset();
  }
  return Status::ok();
}

void PeeringContext::drop_peer(int peer, const Status& why) {
  if (!valid_peer(peer)) return;
  // The inner link goes down (on_link_down: the fast link with it).
  inner_->drop_peer(peer, why);
}

// ---------------------------------------------------------------- the TCP link

void PeeringContext::on_link_up(int peer) {
  // First on the link, so the peer decides before anything else of ours
  // arrives; the fast link (if any) starts once its CAPS is here.
  decided_[size_t(peer)] = false;
  send_bootstrap(peer, encode(offer_for(peer)));
}

std::string PeeringContext::why_tcp(int peer, const Caps& m) const {
  const PeerInfo& me = options_.hosts[size_t(self())];
  const PeerInfo& them = options_.hosts[size_t(peer)];
  auto detail = [](const std::string& d) { return d.empty() ? std::string() : ": " + d; };
  if (them.rack != me.rack) return fmt::format("other rack {}", them.rack.empty() ? "\"\"" : them.rack);
  if (m.kind == LinkKind::kNone)
    // Its detail is its own reason (an RDMA or a DPDK one, whichever it
    // was asked for).
    return fmt::format("peer offers no fast link{}", detail(m.detail));
  if (offer_.kind == LinkKind::kNone)
    return fmt::format("this daemon offers no {} link{}", kind_name(m.kind), detail(offer_.detail));
  if (!fast_ok_[size_t(peer)])
    return fmt::format("this daemon's {} links cannot take a host that joined later",
                       kind_name(offer_.kind));
  if (m.kind != offer_.kind)
    return fmt::format("peer offers {}, this daemon {}", kind_name(m.kind), kind_name(offer_.kind));
  return "";
}

void PeeringContext::on_caps(int peer, const Caps& m) {
  if (decided_[size_t(peer)]) return;
  decided_[size_t(peer)] = true;
  mismatch_[size_t(peer)].clear();
  std::string why = why_tcp(peer, m);
  const std::string& id = options_.hosts[size_t(peer)].host_id;
  std::string said = why.empty() ? fmt::format("{}: {} {}", id, kind_name(offer_.kind), offer_.detail)
                                 : fmt::format("{}: tcp ({})", id, why);
  if (said != logged_[size_t(peer)]) {
    spdlog::info("transport: link {}", said);
    logged_[size_t(peer)] = said;
  }
  if (why.empty() && provider_) {
    link_[size_t(peer)] = Link::kFast;
    provider_->link_up(peer);
    return;
  }
  link_[size_t(peer)] = Link::kTcp;
  // The TCP link is the data link: it is up now. Reported at once, so the
  // caller hears of it before any write that comes in on it.
  post_peer_up(peer);
  flush_events();
}

void PeeringContext::on_link_down(int peer, const Status& why) {
  bool was_tcp = decided_[size_t(peer)] && link_[size_t(peer)] == Link::kTcp;
  bool was_fast = fast_linked(peer);
  decided_[size_t(peer)] = false;
  mismatch_[size_t(peer)].clear();
  if (was_fast) provider_->link_down(peer, why);
  if (was_tcp) post_peer_down(peer, why);
  partial_[size_t(peer)].reset();
  // It can no longer write anything into our memory: its fast link is gone
  // with the bootstrap link.
  std::vector<uint32_t> ids;
  for (auto& [id, r] : retiring_) ids.push_back(id);
  for (uint32_t id : ids) region_acked(id, peer);
}

void PeeringContext::on_internal(int peer, std::string_view msg) {
  if (msg.empty()) return;
  auto bad = [&](const char* what) {
    spdlog::error("transport: malformed {} message from {} ({} bytes); ignored", what,
                  describe_host(peer), msg.size());
  };
  auto tag = static_cast<uint8_t>(msg[0]);
  // Our side sends CAPS first on every link, so does every daemon of this
  // protocol, whatever its transport setting. Anything else first is the
  // TCP provider bare (a gsyncd from before every setting spoke this
  // protocol): its messages are not ours to read, and it never comes up.
  if (!decided_[size_t(peer)] && static_cast<Ctl>(tag) != Ctl::kCaps) {
    if (mismatch_[size_t(peer)].empty()) {
      mismatch_[size_t(peer)].set(fmt::format(
          "peer {} speaks the bare tcp protocol of an older gsyncd (its first message was not "
          "the capability message every transport setting sends first); run one gsyncd "
          "release on every host",
          describe_host(peer)));
      spdlog::error("transport: {}; its messages are ignored", mismatch_[size_t(peer)].text);
    }
    return;
  }
  if (!is_peering_tag(tag)) {
    if (!fast_linked(peer)) {
      spdlog::error("transport: a {}-byte message (tag {:#x}) from {} for a fast link it does not "
                    "have with this daemon; ignored",
                    msg.size(), tag, describe_host(peer));
      return;
    }
    provider_->on_bootstrap(peer, msg);
    return;
  }
  uint32_t id = 0;
  switch (static_cast<Ctl>(tag)) {
    case Ctl::kCaps: {
      Caps m;
      if (!decode(msg, &m)) return bad("CAPS");
      return on_caps(peer, m);
    }
    case Ctl::kUserPart:
      return on_user(peer, msg.substr(1), false);
    case Ctl::kUser:
      return on_user(peer, msg.substr(1), true);
    case Ctl::kRetire:
      if (!decode_id(msg, &id)) return bad("RETIRE");
      if (!fast_linked(peer)) return bad("RETIRE (no fast link)");
      return provider_->on_retire(peer, id);
    case Ctl::kRetireAck:
      if (!decode_id(msg, &id)) return bad("RETIRE_ACK");
      return region_acked(id, peer);
  }
}

void PeeringContext::on_user(int peer, std::string_view msg, bool last) {
  std::string_view whole;
  switch (partial_[size_t(peer)].add(msg, last, &whole)) {
    case UserReassembly::Result::kMore:
      return;
    case UserReassembly::Result::kDropped:
      spdlog::error("transport: a control message from {} in parts of more than {} bytes in all; "
                    "dropped",
                    describe_host(peer), kMaxControl);
      return;
    case UserReassembly::Result::kWhole:
      break;
  }
  if (handlers_.on_control) handlers_.on_control(peer, whole);
}

void PeeringContext::send_bootstrap(int peer, const std::string& msg) {
  inner_->send_control(peer, msg);
}

}  // namespace gsync::transport::peering
