// SPDX-License-Identifier: Apache-2.0
//
// The peering context's regions, writes and loop: one region id space for
// both kinds of link, retirement with every peer on a fast link, each write
// on the link its peer has, and poll(), the one place handlers run.
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "daemon/transport/peering/context.h"

namespace gsync::transport::peering {

Region PeeringContext::register_region(void* base, uint64_t bytes) {
  // One id for both paths: the TCP table's (never reused either).
  Region r = inner_->register_region(base, bytes);
  if (provider_) provider_->add_region(r);
  return r;
}

void PeeringContext::deregister_region(uint32_t id, std::function<void()> released) {
  // Released once both paths are done with it: TCP receives into it have
  // completed and every peer on a fast link has acknowledged its
  // retirement.
  auto left = std::make_shared<int>(2);
  auto cb = std::make_shared<std::function<void()>>(std::move(released));
  released = [left, cb] {
    if (--*left == 0 && *cb) (*cb)();
  };
  inner_->deregister_region(id, released);
  if (!provider_) {
    released();
    return;
  }
  provider_->retire_region(id);
  Retiring t;
  t.waiting.assign(size_t(size()), false);
  t.released = std::move(released);
  // Every peer that knows the region may have writes into it in flight,
  // which only it can see end (RDMA writes land without our CPU): ask
  // each, and wait.
  for (int p = 0; p < size(); p++) {
    if (p == self() || !fast_linked(p)) continue;
    send_bootstrap(p, encode_id(Ctl::kRetire, id));
    t.waiting[size_t(p)] = true;
    t.left++;
  }
  if (t.left == 0) {
    provider_->drop_region(id);
    if (t.released) t.released();
    return;
  }
  retiring_[id] = std::move(t);
}

void PeeringContext::region_acked(uint32_t id, int peer) {
  auto it = retiring_.find(id);
  if (it == retiring_.end() || size_t(peer) >= it->second.waiting.size() ||
      !it->second.waiting[size_t(peer)])
    return;
  it->second.waiting[size_t(peer)] = false;
  if (--it->second.left > 0) return;
  provider_->drop_region(id);
  events_.released(std::move(it->second.released));
  retiring_.erase(it);
  notify();
}

void PeeringContext::ack_retire(int peer, uint32_t id) {
  if (decided_[size_t(peer)]) send_bootstrap(peer, encode_id(Ctl::kRetireAck, id));
}

void PeeringContext::write(int peer, const void* src, uint64_t len, uint32_t remote_region,
                             uint64_t remote_offset, uint64_t imm, uint64_t cookie) {
  if (!valid_peer(peer)) {
    post_write_done(peer, cookie,
                    Status(GSYNC_ERR_INVALID, fmt::format("transport: write to host index {} "
                                                          "(this daemon is {}, {} hosts)",
                                                          peer, self(), size())));
    return;
  }
  switch (link_[size_t(peer)]) {
    case Link::kFast:
      provider_->write(peer, src, len, remote_region, remote_offset, imm, cookie);
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

void PeeringContext::send_control(int peer, std::string_view msg) {
  if (!valid_peer(peer)) return;
  if (msg.size() > kMaxControl) {
    spdlog::error("transport: control message of {} bytes to {} dropped: the limit is {}",
                  msg.size(), describe_host(peer), kMaxControl);
    return;
  }
  // One tag byte in front; a message of the full size goes in two parts.
  size_t room = kMaxControl - 1;
  while (msg.size() > room) {
    std::string part(1, static_cast<char>(Ctl::kUserPart));
    part.append(msg.substr(0, room));
    send_bootstrap(peer, part);
    msg.remove_prefix(room);
  }
  std::string last(1, static_cast<char>(Ctl::kUser));
  last.append(msg);
  send_bootstrap(peer, last);
}

// ---------------------------------------------------------------- the loop

void PeeringContext::notify() {
  // Inside poll() the events are delivered before it returns, and one
  // pending wakeup is enough: either way another write would only cost a
  // syscall and a spurious turn of the event loop.
  if (in_poll_ || wake_pending_) return;
  wake_pending_ = true;
  uint64_t one = 1;
  if (::write(wake_fd_, &one, sizeof one) < 0 && errno != EAGAIN)
    spdlog::warn("transport: eventfd write: {}", strerror(errno));
}

void PeeringContext::poll() {
  if (in_poll_) return;  // a handler called poll(); its caller is polling already
  if (wake_pending_) {
    uint64_t v;
    [[maybe_unused]] ssize_t n = ::read(wake_fd_, &v, sizeof v);
    wake_pending_ = false;
  }
  in_poll_ = true;
  inner_->poll();
  bool more = provider_ && provider_->poll();
  flush_events();
  in_poll_ = false;
  if (more) notify();  // bounded work per turn; the loop comes back
}

void PeeringContext::post_write_done(int peer, uint64_t cookie, Status st) {
  events_.write_done(peer, cookie, std::move(st));
  notify();
}

void PeeringContext::post_peer_up(int peer) {
  events_.peer_up(peer);
  notify();
}

void PeeringContext::post_peer_down(int peer, Status why) {
  events_.peer_down(peer, std::move(why));
  notify();
}

void PeeringContext::flush_events() { events_.flush(handlers_); }

bool PeeringContext::peer_up(int peer) const {
  if (!valid_peer(peer)) return false;
  switch (link_[size_t(peer)]) {
    case Link::kFast:
      return provider_->peer_up(peer);
    case Link::kTcp:
      return decided_[size_t(peer)] && inner_->peer_up(peer);
    case Link::kUnknown:
      break;
  }
  return false;
}

PeerStats PeeringContext::stats(int peer) const {
  if (!valid_peer(peer)) return {};
  if (link_[size_t(peer)] == Link::kFast) return provider_->stats(peer);
  PeerStats s = inner_->stats(peer);  // transport "tcp", no verbs_* fields
  if (s.state == PeerState::kUp && !peer_up(peer)) s.state = PeerState::kConnecting;
  if (!mismatch_[size_t(peer)].empty()) {
    s.last_error = mismatch_[size_t(peer)].text;
    s.last_error_at = mismatch_[size_t(peer)].at;
  }
  return s;
}

std::string PeeringContext::summary() const {
  if (!provider_) return fmt::format("tcp on every link: no usable RDMA device ({})", why_none_);
  return provider_->summary();
}

}  // namespace gsync::transport::peering
