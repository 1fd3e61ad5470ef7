// SPDX-License-Identifier: Apache-2.0
//
// The peer control plane: this daemon's links to the other daemons of the
// cluster (it owns the transport context), which host has which ranks of
// each multi-host job (JobAnnounce / JobLeave), peers coming and going, and
// the membership epoch that every such change bumps. Ops are not its
// business: their messages and one-sided writes go to the cross-host
// service that claimed them (services.h: the collective engine, the
// parameter server, batch leases, each added from gsyncd.cc), and the jobs
// layer hears of jobs that became ready or broke through two callbacks. Runs on the event
// thread; transport handlers are called from the context's poll().
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "daemon/cluster/cluster_file.h"
#include "daemon/cluster/early_messages.h"
#include "daemon/cluster/elastic.h"
#include "daemon/cluster/etcd/registry.h"
#include "daemon/cluster/membership.h"
#include "daemon/cluster/messages.h"
#include "daemon/cluster/probe.h"
#include "daemon/cluster/services.h"
#include "daemon/config/config.h"
#include "daemon/core/clock.h"
#include "daemon/core/event_loop.h"
#include "daemon/core/meter.h"
#include "daemon/transport/transport.h"

namespace gsync::cluster {

class ControlPlane {
 public:
  ControlPlane(const DaemonConfig& cfg, ClusterFile cluster, EventLoop& loop);
  // Membership on etcd (docs/membership.md): cluster is what
  // registry->join() found; the registry's changes keep it current.
  ControlPlane(const DaemonConfig& cfg, ClusterFile cluster, EventLoop& loop,
               std::unique_ptr<etcd::Registry> registry);
  // With [cluster] etcd: registers this daemon and reads who is there
  // (blocking; before the event loop runs).
  static Status join_etcd(const DaemonConfig& cfg, std::unique_ptr<etcd::Registry>* registry,
                          ClusterFile* cluster);
  ~ControlPlane();
  ControlPlane(const ControlPlane&) = delete;
  ControlPlane& operator=(const ControlPlane&) = delete;

  // Opens the transport: listens and starts connecting to every peer.
  Status start();

  const ClusterFile& cluster() const { return cluster_; }
  int self() const { return cluster_.self; }
  const std::string& self_id() const { return host_id(cluster_.self); }
  const std::string& host_id(int host) const { return cluster_.hosts[size_t(host)].id; }
  const std::string& rack_of(int host) const { return cluster_.hosts[size_t(host)].rack; }
  // Bumped by every peer that comes up or goes down.
  uint64_t epoch() const { return epoch_; }
  // Whether host index h is a member now: every host of a cluster file; on
  // etcd, a host whose key is there (a left host keeps its index, unused).
  bool is_member(int h) const {
    return h >= 0 && size_t(h) < present_.size() && present_[size_t(h)];
  }
  // Members, self included.
  int members() const;
  // gsyncctl status: where membership comes from and how that source fares.
  nlohmann::json membership_report() const;
  transport::Context& net() { return *net_; }
  std::string transport_summary() const;

  // A cross-host service and what it owns (services.h), added from
  // gsyncd.cc before the event loop runs; a claim that collides is an
  // error naming both. remove_services(): none is called after (the
  // daemon's teardown, before the services go).
  Status add_service(CrossHostService* service, ServiceClaim claim) {
    return services_.add(service, std::move(claim));
  }
  void remove_services() {
    for (CrossHostService* s : services_.all()) {
      services_.remove(s);
      early_.drop_owner(s);
    }
  }
  // Messages for what this host has not begun yet, held for their service
  // (early_messages.h; key.owner: the service) until `expires`. A message
  // the full buffer cannot take is dropped with an error naming its host.
  void hold_early(const EarlyMessages::Key& key, int peer, std::string_view msg,
                  Clock::time_point at, Clock::time_point expires);
  std::vector<EarlyMessages::Held> take_early(const EarlyMessages::Key& key) {
    return early_.take(key);
  }
  void drop_early(const CrossHostService* owner, std::string_view job) {
    early_.drop_job(owner, job);
  }
  const EarlyMessages& early() const { return early_; }
  // Called after every epoch change (plans built for the old one go).
  std::function<void(uint64_t epoch)> on_epoch;

  // --- Jobs: the cluster-wide rank map.
  // All local ranks of the job are connected: tell every peer.
  // tuning: the digest of the tuning table the job plans with (0: none).
  void local_job_complete(const std::string& job, int world, std::vector<int> ranks,
                          uint32_t tuning = 0);
  // Whether every host of the job plans it with the same tuning table.
  bool job_tuning_agrees(const std::string& job) const { return members_.tuning_agrees(job); }
  // A local rank left (died or closed): tell every peer, with the ops this
  // host has begun and still finishes.
  void local_rank_left(const std::string& job, int rank, pid_t pid, const std::string& reason);
  // Every rank of the world is accounted for by some host.
  bool job_ready(const std::string& job, int world) const;
  // For timeouts: which ranks no host has announced ("ranks not on any
  // host yet: 3; hosts with ranks so far: h1, h2").
  std::string job_missing(const std::string& job, int world, const std::vector<int>& live) const;
  // This host and every host with ranks of the job, in cluster order.
  std::vector<int> participants(const std::string& job) const;
  int host_of(const std::string& job, int rank) const;
  // A job became ready (start its queued ops); a remote rank of a job left
  // or its host was lost (fail its pending ops).
  std::function<void(const std::string& job)> on_job_ready;
  std::function<void(const std::string& job, const Status& why)> on_job_broken;

  // --- Elastic jobs (elastic_plane.cc; docs/membership.md, "Elastic
  // jobs"): a job whose world the daemons form from the hosts that have
  // all their ranks of it, and form again when one leaves or joins.
  // All this host's ranks of the job are connected (local_size), or one
  // left.
  void elastic_local_complete(const std::string& job, int local_size, int min_hosts,
                              int max_hosts);
  void elastic_local_left(const std::string& job);
  // The job's last rank here closed: an ended job is forgotten (a new one
  // of the same id starts afresh).
  void elastic_closed(const std::string& job) { elastic_.forget_ended(job); }
  // The job's world now (epoch 0: none yet); null for a job unknown here.
  const ElasticWorldView* elastic_world(const std::string& job) const;
  // Whether this host's links to every other host of the job's world are
  // up: until then its ops would send into links that drop them (hosts
  // link to each other in any order while a world forms).
  bool elastic_world_linked(const std::string& job) const;
  // A newer world of the job was adopted; this host announced its ranks
  // under ElasticBook::world_name, and job_ready of that name holds once
  // every host of the world has too (on_job_ready says when).
  std::function<void(const std::string& job, const ElasticWorldView& w)> on_world;

  // --- Messages to peers (ops use them for their rendezvous and aborts).
  bool peer_up(int host) const;
  void send(int host, std::string_view msg);
  void send_all(std::string_view msg);

  // gsyncctl peers (peer_report.cc).
  nlohmann::json peers_report() const;
  // The admin request `probe` (gsyncctl doctor; probe.h): done gets the
  // report once every up peer answered, failed or the deadline passed.
  void probe(const ProbeOptions& options, Prober::Done done);

 private:
  void on_control(int peer, std::string_view msg);
  void on_announce(int peer, std::string_view msg);
  void on_leave(int peer, std::string_view msg);
  void on_peer_up(int peer);
  void on_peer_down(int peer, const Status& why);
  // HostInfo: ours to a peer whose link came up, theirs into peer_builds_
  // (peer_report.cc).
  void send_host_info(int peer);
  void on_host_info(int peer, std::string_view msg);
  // The cluster key ([cluster] key_file) for the transport.
  Status load_key(std::string* key) const;
  void bump_epoch();
  // Membership on etcd (etcd_members.cc).
  void start_registry();
  void on_registry();
  void host_joined(const etcd::HostRecord& r);
  void host_left(const std::string& id, const std::string& why);
  void hosts_now(const std::vector<etcd::HostRecord>& hosts);
  // Elastic jobs (elastic_plane.cc).
  void on_elastic_join(int peer, std::string_view msg);
  void on_elastic_world(int peer, std::string_view msg);
  void elastic_evaluate(const std::string& job);
  void elastic_adopt(const std::string& job, ElasticWorldView w);
  // The rank maps of the job's worlds older than epoch: gone.
  void forget_worlds_before(const std::string& job, uint64_t epoch);
  // A world's name that an elastic job here has left behind (an
  // announcement of it is late, and ignored).
  bool stale_world(const std::string& name) const;
  void elastic_peer_up(int peer);
  // A host's id, or "host #N" for one this daemon has not heard of yet.
  std::string elastic_host_name(int host) const;
  void elastic_peer_down(int peer);
  void grow(size_t hosts);
  void sample_rates();
  void log_started() const;

  const DaemonConfig& cfg_;
  ClusterFile cluster_;
  EventLoop& loop_;
  std::unique_ptr<transport::Context> net_;
  ServiceRegistry services_{
      std::vector<uint8_t>(std::begin(kControlPlaneTypes), std::end(kControlPlaneTypes))};
  EarlyMessages early_;
  uint64_t early_dropped_ = 0;
  uint64_t epoch_ = 1;
  Membership members_;
  ElasticBook elastic_;
  std::vector<RateMeter> sent_meter_, recv_meter_;
  std::vector<uint64_t> last_sent_, last_recv_;
  // What each peer said it runs (HostInfo); kept after its link goes down.
  struct PeerBuild {
    bool known = false;
    std::string version, build_id;
    uint32_t pid = 0;
  };
  std::vector<PeerBuild> peer_builds_;
  std::unique_ptr<Prober> prober_;
  std::vector<bool> present_;  // is_member, by host index
  std::unique_ptr<etcd::Registry> registry_;
  int registry_fd_ = -1;  // the registry's threads wake the loop through it
};

}  // namespace gsync::cluster
