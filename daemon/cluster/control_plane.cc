// SPDX-License-Identifier: Apache-2.0
#include "daemon/cluster/control_plane.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "daemon/cluster/cluster_key.h"
#include "gsync_build_config.h"

namespace gsync::cluster {

ControlPlane::ControlPlane(const DaemonConfig& cfg, ClusterFile cluster, EventLoop& loop)
    : ControlPlane(cfg, std::move(cluster), loop, nullptr) {}

ControlPlane::ControlPlane(const DaemonConfig& cfg, ClusterFile cluster, EventLoop& loop,
                           std::unique_ptr<etcd::Registry> registry)
    : cfg_(cfg),
      cluster_(std::move(cluster)),
      loop_(loop),
      members_(cluster_.self),
      elastic_(cluster_.self),
      registry_(std::move(registry)) {
  grow(cluster_.hosts.size());
  // A cluster file's hosts are all members; on etcd, those join() found.
  for (size_t h = 0; h < cluster_.hosts.size(); h++)
    present_[h] = !cluster_.hosts[h].id.empty();
  prober_ = std::make_unique<Prober>(*this);
}

ControlPlane::~ControlPlane() {
  // Its threads first: they write to registry_fd_ until they are joined.
  registry_.reset();
  if (registry_fd_ >= 0) {
    loop_.remove(registry_fd_);
    ::close(registry_fd_);
  }
}

void ControlPlane::grow(size_t n) {
  if (n <= present_.size()) return;
  cluster_.hosts.resize(std::max(n, cluster_.hosts.size()));
  sent_meter_.resize(n);
  recv_meter_.resize(n);
  last_sent_.resize(n, 0);
  last_recv_.resize(n, 0);
  peer_builds_.resize(n);
  present_.resize(n, false);
}

Status ControlPlane::load_key(std::string* key) const {
  static_assert(kClusterKeySize == transport::kClusterKeyBytes);
  if (cfg_.cluster_key_file.empty())
    return {GSYNC_ERR_INVALID,
            fmt::format("cluster '{}' ({}): no cluster key. The daemons of a cluster prove a "
                        "shared key to each other before they exchange anything; make one with "
                        "`gsyncctl keygen -o /etc/gsync/cluster.key`, copy it to every host "
                        "(mode 0600) and set [cluster] key_file (or --cluster-key)",
                        cluster_.name, cluster_.path)};
  return load_cluster_key(cfg_.cluster_key_file, key);
}

Status ControlPlane::start() {
  transport::ContextOptions o;
  if (Status st = load_key(&o.cluster_key); !st) return st;
  o.identity.cluster_name = cluster_.name;
  o.identity.protocol_version = kProtocolVersion;
  o.identity.build_id = GSYNC_VERSION_STRING;
  for (const auto& h : cluster_.hosts) o.hosts.push_back({h.id, h.address, h.port, h.rack});
  o.self = cluster_.self;
  o.streams = static_cast<int>(cfg_.tcp_streams);
  o.cross_rack_streams = static_cast<int>(cfg_.tcp_streams_cross_rack);
  o.socket_buffer_bytes = static_cast<int>(cfg_.tcp_buffer_kib << 10);
  o.peer_timeout_ms = cfg_.peer_timeout_ms;
  o.heartbeat_ms = std::max<uint32_t>(cfg_.peer_timeout_ms / 10, 20);
  o.verbs.required = cfg_.transport == "verbs";
  o.dpdk.wanted = cfg_.transport == "dpdk";
  o.dpdk.required = o.dpdk.wanted;
  o.dpdk.eal_args = cfg_.dpdk_eal_args;
  o.dpdk.port = cfg_.dpdk_port;
  o.dpdk.mbufs = cfg_.dpdk_mbufs;
  o.dpdk.window = cfg_.dpdk_window;
  o.dpdk.payload = cfg_.dpdk_payload;
  o.dpdk.idle_poll_us = cfg_.dpdk_idle_poll_us;
  o.dpdk.drop_ppm = cfg_.dpdk_drop_ppm;
  static_assert(kDpdkRxOff == transport::ContextOptions::Dpdk::kRxOff &&
                kDpdkRxAnyCpu == transport::ContextOptions::Dpdk::kRxAnyCpu);
  o.dpdk.rx_lcore = dpdk_rx_cpu(cfg_);
  Status err;
  // With membership on etcd the hosts table changes while running: every
  // context takes set_peer/drop_peer (a fast provider links the hosts it
  // started with; one that joins later links to this daemon over TCP).
  net_ = transport::make_context(o, cfg_.transport != "tcp", &err);
  if (!net_) return err;
  transport::Handlers h;
  h.on_control = [this](int peer, std::string_view msg) { on_control(peer, msg); };
  h.on_write = [this](int peer, uint32_t region, uint64_t off, uint64_t len, uint64_t imm) {
    // The immediate's tag (and the cookie's) says whose a write is.
    if (CrossHostService* s = services_.for_write(imm)) s->on_write(peer, region, off, len, imm);
  };
  h.on_write_done = [this](int peer, uint64_t cookie, const Status& st) {
    if (CrossHostService* s = services_.for_write(cookie)) s->on_write_done(peer, cookie, st);
  };
  h.on_peer_up = [this](int peer) { on_peer_up(peer); };
  h.on_peer_down = [this](int peer, const Status& why) { on_peer_down(peer, why); };
  if (Status st = net_->start(std::move(h)); !st) return st;
  loop_.add(net_->event_fd(), EPOLLIN, [this](uint32_t) { net_->poll(); });
  if (cfg_.poll_us > 0) {
    // While the loop polls, a peer's message is seen on the completion
    // ring itself: no eventfd write in the sender's path, no epoll_wait
    // and eventfd read in ours.
    loop_.add_looker(
        [this] {
          if (!net_->pending()) return false;
          net_->poll();
          return true;
        },
        [this](bool on) {
          net_->set_polled(on);
          std::atomic_thread_fence(std::memory_order_seq_cst);
        });
  }
  if (auto tick = net_->tick(); tick.count() > 0) {
    // A polled port (DPDK) is looked at on the loop's timer, which opens no
    // polling window: between ops an idle daemon sleeps. Timers are in
    // milliseconds, so the tick is 1 ms at least.
    loop_.every(std::max(std::chrono::ceil<std::chrono::milliseconds>(tick),
                         std::chrono::milliseconds(1)),
                [this] { net_->poll(); }, "transport tick");
  }
  loop_.every(std::chrono::milliseconds(1000), [this] {
    sample_rates();
    early_.expire(Clock::now());
  });
  loop_.every(
      std::chrono::milliseconds(50),
      [this] {
        if (prober_->running()) prober_->tick(Clock::now());
      },
      "probe deadlines");
  if (registry_) start_registry();
  log_started();
  return Status::ok();
}

void ControlPlane::log_started() const {
  const auto& me = cluster_.hosts[size_t(cluster_.self)];
  spdlog::info("cluster {}: this daemon is {} ({}:{}, rack {}), {} hosts, links over {}, {} tcp "
               "streams per peer in the rack, {} across racks",
               cluster_.name, me.id, me.address, me.port, me.rack, members(),
               net_->summary(),
               cfg_.tcp_streams,
               cfg_.tcp_streams_cross_rack ? cfg_.tcp_streams_cross_rack : cfg_.tcp_streams);
}

std::string ControlPlane::transport_summary() const { return net_ ? net_->summary() : "tcp"; }

bool ControlPlane::peer_up(int host) const { return net_->peer_up(host); }

void ControlPlane::send(int host, std::string_view msg) {
  if (host != cluster_.self && is_member(host)) net_->send_control(host, msg);
}

void ControlPlane::send_all(std::string_view msg) {
  for (int h = 0; h < static_cast<int>(cluster_.hosts.size()); h++)
    if (h != cluster_.self && is_member(h) && net_->peer_up(h)) net_->send_control(h, msg);
}

// ---------------------------------------------------------------- jobs

void ControlPlane::local_job_complete(const std::string& job, int world, std::vector<int> ranks,
                                      uint32_t tuning) {
  send_all(encode_announce(job, world, ranks, tuning));
  members_.set_local(job, world, std::move(ranks));
  members_.set_tuning(job, cluster_.self, tuning);
  if (job_ready(job, world) && on_job_ready) on_job_ready(job);
}

void ControlPlane::local_rank_left(const std::string& job, int rank, pid_t pid,
                                   const std::string& reason) {
  members_.clear_local(job);
  JobLeave m;
  m.rank = rank;
  m.pid = pid;
  set_field(m.job, sizeof m.job, job);
  set_field(m.reason, sizeof m.reason, reason);
  std::vector<proto::OpId> open;
  for (CrossHostService* s : services_.all())
    for (const auto& k : s->open_ops(job)) open.push_back(k);
  send_all(encode_leave(m, open));
}

bool ControlPlane::job_ready(const std::string& job, int world) const {
  return members_.ready(job, world);
}

std::string ControlPlane::job_missing(const std::string& job, int world,
                                      const std::vector<int>& live) const {
  std::vector<int> hosts;
  std::string missing = members_.missing(job, world, live, &hosts);
  std::string names = self_id();
  for (int h : hosts) names += ", " + host_id(h);
  // A rank that never arrives is often a host this one cannot reach: say
  // which links are not up (at most 8), and why they last went down.
  std::string down;
  int n_down = 0;
  for (int h = 0; h < static_cast<int>(cluster_.hosts.size()); h++) {
    if (h == cluster_.self || !is_member(h)) continue;
    const auto st = net_->stats(h);
    if (st.state == transport::PeerState::kUp) continue;
    if (n_down++ < 8)
      down += fmt::format("{}{} ({}{})", down.empty() ? "" : ", ", host_id(h),
                          st.state == transport::PeerState::kDown ? "down" : "connecting",
                          st.last_error.empty() ? "" : ": " + st.last_error);
  }
  if (n_down > 8) down += fmt::format(", and {} more", n_down - 8);
  return fmt::format("ranks not on any host yet: {}; hosts with ranks so far: {}{}",
                     missing.empty() ? "none" : missing, names,
                     down.empty() ? "" : "; links from " + self_id() + " not up: " + down);
}

std::vector<int> ControlPlane::participants(const std::string& job) const {
  return members_.participants(job);
}

int ControlPlane::host_of(const std::string& job, int rank) const {
  return members_.host_of(job, rank);
}

// ---------------------------------------------------------------- messages

void ControlPlane::on_control(int peer, std::string_view msg) {
  if (msg.empty()) return;
  switch (static_cast<uint8_t>(msg[0])) {
    case kJobAnnounce:
      on_announce(peer, msg);
      return;
    case kJobLeave:
      on_leave(peer, msg);
      return;
    case kHostInfo:
      on_host_info(peer, msg);
      return;
    case kProbe:
    case kProbeReply:
      prober_->on_message(peer, msg);
      return;
    case kElasticJoin:
      on_elastic_join(peer, msg);
      return;
    case kElasticWorld:
      on_elastic_world(peer, msg);
      return;
    default:
      if (CrossHostService* s = services_.for_message(static_cast<uint8_t>(msg[0]))) {
        s->on_message(peer, msg);
        return;
      }
      break;
  }
  spdlog::error("host {}: control message of unknown type {} ({} bytes); ignored", host_id(peer),
                static_cast<int>(static_cast<uint8_t>(msg[0])), msg.size());
}

void ControlPlane::on_announce(int peer, std::string_view msg) {
  JobAnnounce a;
  std::vector<int> ranks;
  if (!decode_announce(msg, &a, &ranks)) {
    spdlog::error("host {}: malformed JobAnnounce ({} bytes); ignored", host_id(peer), msg.size());
    return;
  }
  std::string job = field(a.job, sizeof a.job);
  if (stale_world(job)) {
    spdlog::debug("job {}: host {} announced a world this host has left behind; ignored", job,
                  host_id(peer));
    return;
  }
  spdlog::info("job {}: host {} has {} ranks of {}", job, host_id(peer), ranks.size(),
               a.world_size);
  members_.set_remote(job, peer, a.world_size, std::move(ranks));
  members_.set_tuning(job, peer, announce_tuning(a));
  if (members_.has_local(job) && on_job_ready) on_job_ready(job);
}

void ControlPlane::on_leave(int peer, std::string_view msg) {
  JobLeave m;
  std::vector<proto::OpId> open;
  if (!decode_leave(msg, &m, &open)) {
    spdlog::error("host {}: malformed JobLeave ({} bytes); ignored", host_id(peer), msg.size());
    return;
  }
  std::string job = field(m.job, sizeof m.job);
  members_.clear_remote(job, peer);
  Status st(GSYNC_ERR_RANK_DEAD, fmt::format("job {}: rank {} (pid {}) on host {} {}", job, m.rank,
                                             m.pid, host_id(peer),
                                             field(m.reason, sizeof m.reason)));
  std::sort(open.begin(), open.end());
  for (CrossHostService* s : services_.all()) s->on_peer_left_job(job, peer, open, st);
  if (on_job_broken) on_job_broken(job, st);
}

void ControlPlane::bump_epoch() {
  epoch_++;
  if (on_epoch) on_epoch(epoch_);
}

void ControlPlane::on_peer_up(int peer) {
  bump_epoch();
  const auto& h = cluster_.hosts[size_t(peer)];
  spdlog::info("peer {} ({}:{}, rack {}) is up; cluster epoch {}", h.id, h.address, h.port, h.rack,
               epoch_);
  send_host_info(peer);
  // Again with the job's table: a peer that came back must not read "none".
  for (const auto& [job, wr] : members_.local())
    net_->send_control(peer, encode_announce(job, wr.first, wr.second,
                                             members_.tuning_of(job, cluster_.self)));
  elastic_peer_up(peer);
}

void ControlPlane::on_peer_down(int peer, const Status& why) {
  bump_epoch();
  const auto& h = cluster_.hosts[size_t(peer)];
  std::string what = fmt::format("lost host {} ({}:{}, rack {}): {}; cluster epoch {}", h.id,
                                 h.address, h.port, h.rack, why.message(), epoch_);
  spdlog::warn("{}", what);
  prober_->peer_down(peer, Status(GSYNC_ERR_HOST_LOST, what));
  for (CrossHostService* s : services_.all()) s->on_peer_lost(peer, Status(GSYNC_ERR_HOST_LOST, what));
  for (const auto& job : members_.remove_host(peer))
    if (on_job_broken)
      on_job_broken(job, Status(GSYNC_ERR_HOST_LOST, fmt::format("job {}: {}", job, what)));
  // After the ops failed naming the host: the next world is formed without it.
  elastic_peer_down(peer);
}

void ControlPlane::hold_early(const EarlyMessages::Key& key, int peer, std::string_view msg,
                              Clock::time_point at, Clock::time_point expires) {
  if (early_.hold(key, peer, msg, at, expires)) return;
  // One line for the first and every 1000th after: a flood says so once.
  if (early_dropped_++ % 1000 == 0)
    spdlog::error("host {}: a control message (type {}) came before its op began, and the buffer "
                  "of such messages is full ({} messages, {} bytes); "
                  "dropped ({} so far)",
                  host_id(peer), msg.empty() ? 0 : int(uint8_t(msg[0])), early_.messages(),
                  early_.bytes(), early_dropped_);
}

}  // namespace gsync::cluster
