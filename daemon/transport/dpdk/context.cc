// SPDX-License-Identifier: Apache-2.0
#include "daemon/transport/dpdk/context.h"

#include <sched.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>
#include <rte_errno.h>
#include <spdlog/spdlog.h>

namespace gsync::transport::dpdk {

namespace {
// Receive bursts per poll(): bounded work per event-loop turn.
constexpr int kRxBursts = 8;
constexpr uint16_t kRxBurst = 32;
// How long the loop keeps polling after the last frame: a peer's next
// frames are usually this close behind.
constexpr auto kLinger = std::chrono::milliseconds(2);
}  // namespace

Status DpdkLinks::create(const ContextOptions& options, std::unique_ptr<DpdkLinks>* out) {
  std::unique_ptr<DpdkLinks> d(new DpdkLinks(options));
  const PeerInfo& me = options.hosts[size_t(options.self)];
  std::string prefix = fmt::format("gsync-{}-{}", me.host_id, getpid());
  if (Status st = Device::open(options.dpdk, prefix, &d->device_); !st) return st;
  size_t room = size_t(d->device_->mtu()) + kEtherHeaderBytes;
  room = std::min<size_t>(room, d->device_->data_room());
  if (room <= kFrameOverhead + 64)
    return Status(GSYNC_ERR_UNSUPPORTED, fmt::format("dpdk: the port's MTU ({}) leaves no room "
                                                     "for a frame's payload",
                                                     d->device_->mtu()));
  uint32_t payload = uint32_t(room - kFrameOverhead);
  if (options.dpdk.payload != 0) payload = std::min(payload, options.dpdk.payload);
  d->options_.dpdk.payload = payload;
  d->tx_ = std::make_unique<TxBurst>(*d->device_);
  d->cluster_ = cluster_tag(options.identity.cluster_name);
  d->drop_ppm_.store(options.dpdk.drop_ppm);
  if (options.dpdk.rx_lcore != ContextOptions::Dpdk::kRxOff) {
    Status st = RxLcore::start(*d->device_, options.dpdk.rx_lcore, options.dpdk.mbufs, &d->rx_);
    if (!st) return st;
    spdlog::info("dpdk: port {} received on {}", d->device_->describe(), d->rx_->describe());
  }
  *out = std::move(d);
  return Status::ok();
}

DpdkLinks::~DpdkLinks() {
  rx_.reset();  // the receive lcore stops before what it calls into goes
  // The port outlives this (it is opened again by a context made again):
  // its receive path must not call into us any more. DPDK keeps the
  // callback's memory (a burst may be running it on another thread; here
  // none is).
  if (rx_hook_ != nullptr) rte_eth_remove_rx_callback(device_->port(), 0, rx_hook_);
  pairs_.clear();
  tx_.reset();  // its buffers go back to the pool before the port closes
  device_.reset();
}

std::string DpdkLinks::summary() const {
  return fmt::format("dpdk within a rack on {} ({} bytes per frame, window {}{}), tcp otherwise",
                     device_->describe(), options_.dpdk.payload, options_.dpdk.window,
                     rx_ ? ", received on " + rx_->describe() : std::string());
}

void DpdkLinks::start(peering::LinkHost& host) {
  host_ = &host;
  PairEnv env;
  env.host = host_;
  env.regions = &regions_;
  std::memcpy(env.mac, device_->mac(), 6);
  env.cluster = cluster_;
  env.payload = options_.dpdk.payload;
  env.window = std::max<uint32_t>(options_.dpdk.window, 2);
  env.peer_timeout = std::chrono::milliseconds(options_.peer_timeout_ms);
  env.drops = drops_.data();
  env.port_up = &port_up_;
  rx_hook_ = rte_eth_add_rx_callback(device_->port(), 0, drop_hook, this);
  if (rx_hook_ == nullptr)
    spdlog::warn("dpdk: the drop test hook could not be installed on port {}: {}",
                 device_->describe(), rte_strerror(rte_errno));
  env.teardowns = &teardowns_;
  port_up_ = device_->link_up();
  env_ = env;
  pairs_.resize(options_.hosts.size());
  for (int i = 0; i < int(options_.hosts.size()); i++)
    if (i != options_.self)
      pairs_[size_t(i)] = std::make_unique<Pair>(env, i, host_->describe_host(options_.self),
                                                  host_->describe_host(i));
}

bool DpdkLinks::add_peer(int peer) {
  if (peer < 0 || peer == options_.self || host_ == nullptr) return false;
  // Frames are taken on the event thread (receive), as this runs: growing
  // the table here races with nothing.
  if (size_t(peer) >= pairs_.size()) pairs_.resize(size_t(peer) + 1);
  if (!pairs_[size_t(peer)])
    pairs_[size_t(peer)] = std::make_unique<Pair>(env_, peer, host_->describe_host(options_.self),
                                                  host_->describe_host(peer));
  return true;
}

void DpdkLinks::link_up(int peer) {
  links_up_++;
  pairs_[size_t(peer)]->on_link_up();
}

void DpdkLinks::link_down(int peer, const Status& why) {
  pairs_[size_t(peer)]->on_link_down(why);
  links_up_--;
}

void DpdkLinks::on_bootstrap(int peer, std::string_view msg) {
  Pair& p = *pairs_[size_t(peer)];
  auto bad = [&](const char* what) {
    spdlog::error("dpdk transport: malformed {} message from {} ({} bytes); ignored", what,
                  host_->describe_host(peer), msg.size());
  };
  switch (static_cast<Tag>(msg[0])) {
    case Tag::kHello: {
      Hello m;
      if (!decode(msg, &m)) return bad("HELLO");
      return p.on_hello(m);
    }
    case Tag::kReady: {
      Ready m;
      if (!decode(msg, &m)) return bad("READY");
      return p.on_ready(m);
    }
  }
  bad("unknown");
}

void DpdkLinks::on_retire(int peer, uint32_t id) {
  // The receiver copies every frame itself and has stopped taking this
  // region: no write of ours can land in it any more.
  host_->ack_retire(peer, id);
}

void DpdkLinks::write(int peer, const void* src, uint64_t len, uint32_t remote_region,
                      uint64_t remote_offset, uint64_t imm, uint64_t cookie) {
  pairs_[size_t(peer)]->write(
      WriteReq{static_cast<const uint8_t*>(src), len, remote_region, remote_offset, imm, cookie});
  busy_until_ = Clock::now() + kLinger;
  host_->notify();  // its frames go out from poll()
}

// ---------------------------------------------------------------- the loop

void DpdkLinks::receive(rte_mbuf* m) {
  Parsed f;
  Drop d = m->nb_segs != 1 ? Drop::kOversized
                           : parse(rte_pktmbuf_mtod(m, const uint8_t*), rte_pktmbuf_data_len(m),
                                   cluster_, &f);
  if (d == Drop::kNone) {
    uint32_t idx = f.h.link & 0xffff;
    Pair* p = idx < pairs_.size() ? pairs_[idx].get() : nullptr;
    if (p == nullptr || p->link_id() != f.h.link) d = Drop::kLink;
    else p->on_frame(f);
  }
  if (d != Drop::kNone) drops_[size_t(d)]++;
}

// The test hook ([dpdk] drop_ppm) in the PMD's receive path: an rx
// callback that DPDK runs inside rte_eth_rx_burst, after the PMD filled the
// burst and before it returns, so a dropped frame is as lost as one the
// wire lost.
uint16_t DpdkLinks::drop_hook(uint16_t, uint16_t, rte_mbuf** pkts, uint16_t n, uint16_t,
                              void* self) {
  auto* links = static_cast<DpdkLinks*>(self);
  uint32_t ppm = links->drop_ppm_.load(std::memory_order_relaxed);
  if (ppm == 0) return n;
  uint16_t kept = 0;
  for (uint16_t i = 0; i < n; i++) {
    if (links->drop_rng_() % 1000000 < ppm) {
      rte_pktmbuf_free(pkts[i]);
      links->injected_.fetch_add(1, std::memory_order_relaxed);
    } else {
      pkts[kept++] = pkts[i];
    }
  }
  return kept;
}

void DpdkLinks::watch_port(Clock::time_point now) {
  // A link reported up over TCP carries nothing while the port is down (a
  // memif peer not yet connected): pairs come up only with the port.
  if (now - port_looked_ < std::chrono::milliseconds(10)) return;
  port_looked_ = now;
  bool up = device_->link_up();
  if (up == port_up_) return;
  port_up_ = up;
  if (up) {
    spdlog::info("dpdk: port {} link up", device_->describe());
    for (auto& p : pairs_)
      if (p) p->maybe_up();
  } else {
    // Not restarted here: stopping and starting a memif port while its
    // peer comes and goes panicked DPDK 22.11's interrupt thread (the
    // daemon died); a memif client whose server started again needs its
    // daemon started again.
    spdlog::warn("dpdk: port {} link down: its links stall until it is back (or their peer "
                 "timeout ends them)",
                 device_->describe());
  }
}

void DpdkLinks::drop_orphans() {
  // A pair that failed its writes (link down, silence) told its callers so
  // in events that run after this poll(): frames still waiting in the
  // burst may point into their memory, which is theirs again then. They
  // go; the other pairs' frames among them are resent as lost.
  if (teardowns_ == teardowns_seen_) return;
  teardowns_seen_ = teardowns_;
  tx_->discard();
}

bool DpdkLinks::poll() {
  Clock::time_point now = Clock::now();
  drop_orphans();  // links that went down since the last turn
  watch_port(now);
  rte_mbuf* bufs[kRxBurst];
  bool more = false, active = false;
  for (int b = 0; b < kRxBursts; b++) {
    uint16_t n = rx_ ? uint16_t(rx_->take(bufs, kRxBurst)) : device_->rx(bufs, kRxBurst);
    for (uint16_t i = 0; i < n; i++) receive(bufs[i]);
    rte_pktmbuf_free_bulk(bufs, n);
    active |= n > 0;
    if (n < kRxBurst) break;
    more = b == kRxBursts - 1;
  }
  for (auto& p : pairs_) {
    if (!p) continue;
    more |= p->transmit(now, *tx_);
    active |= p->busy();
    if (tx_->room() < 64) tx_->flush();
  }
  if (!tx_->flush()) more = true;
  drop_orphans();  // links that went silent this turn
  if (active) busy_until_ = now + kLinger;
  // While busy the loop comes straight back, even where it does not poll
  // (no spare CPU, or [daemon] poll_us = 0): a port has no interrupt, and
  // sleeping between a frame and its ack costs a timer tick per round trip
  // (measured: 2-3x slower with a 20 us tick). A turn that found nothing
  // yields the core to the ranks and reduce threads that share it.
  bool busy = now < busy_until_;
  if (busy && !active && !more) sched_yield();
  // Where the loop may sleep now, the receive lcore wakes it for the next
  // frame (or says one came meanwhile).
  if (!more && !busy && rx_ && rx_->arm()) more = true;
  return more || busy;
}

bool DpdkLinks::pending() const {
  return Clock::now() < busy_until_ || (rx_ && rx_->waiting());
}

bool DpdkLinks::peer_up(int peer) const { return pairs_[size_t(peer)]->up(); }

PeerStats DpdkLinks::stats(int peer) const {
  PeerStats s = pairs_[size_t(peer)]->stats();
  s.dpdk.port = device_->name();
  for (size_t d = 1; d < drops_.size(); d++) {
    uint64_t n = dropped(Drop(d));
    if (n == 0) continue;
    s.dpdk.dropped += n;
    s.dpdk.dropped_by_reason.emplace_back(drop_key(Drop(d)), n);
  }
  s.dpdk.port_missed = device_->missed();
  if (rx_) {
    s.dpdk.rx_lcore = rx_->describe();
    s.dpdk.rx_wakeups = rx_->wakeups();
    s.dpdk.rx_ring_full = rx_->ring_full();
    s.dpdk.rx_armed = rx_->armed();
  }
  s.dpdk.tx_no_buffer = tx_->no_buffer;
  return s;
}

// ---------------------------------------------------------------- the context

std::string DpdkContext::summary() const {
  if (links_ != nullptr) return links_->summary();
  return fmt::format("tcp on every link: no usable DPDK port ({})", no_device_reason());
}

Status DpdkContext::create(const ContextOptions& options, std::unique_ptr<DpdkContext>* out,
                           bool allow_no_device) {
  if (options.self < 0 || options.self >= static_cast<int>(options.hosts.size()))
    return Status(GSYNC_ERR_INVALID, fmt::format("self index {} is not one of the {} hosts",
                                                 options.self, options.hosts.size()));
  std::unique_ptr<DpdkLinks> links;
  Status st = DpdkLinks::create(options, &links);
  if (!st && !allow_no_device) return st;
  std::unique_ptr<DpdkContext> c(new DpdkContext(options));
  c->links_ = links.get();
  if (Status init = c->init(std::move(links), st.message()); !init) return init;
  *out = std::move(c);
  return Status::ok();
}

}  // namespace gsync::transport::dpdk

namespace gsync::transport {

std::unique_ptr<Context> make_dpdk_context(const ContextOptions& options, Status* err) {
  std::unique_ptr<dpdk::DpdkContext> d;
  Status st = dpdk::DpdkContext::create(options, &d, !options.dpdk.required);
  if (!st) {
    if (err != nullptr)
      *err = options.dpdk.required
                 ? Status(GSYNC_ERR_UNSUPPORTED,
                          fmt::format("transport dpdk is required but unusable: {}", st.message()))
                 : st;
    return nullptr;
  }
  if (d->has_device())
    spdlog::info("transport: {}", d->summary());
  else
    spdlog::warn("transport: {}", d->summary());
  if (err != nullptr) *err = Status::ok();
  return d;
}

}  // namespace gsync::transport
