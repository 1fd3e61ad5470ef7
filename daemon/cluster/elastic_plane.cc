// SPDX-License-Identifier: Apache-2.0
//
// The control plane's part in elastic jobs (docs/membership.md, "Elastic
// jobs"): it tells every peer when this host has all its ranks of a job
// (ElasticJoin), and as the job's leader forms each world and sends it
// (ElasticWorld). A world adopted is announced under the world's own name,
// the one its ops go by (JobAnnounce, as for a fixed job), so every host's
// ops of an epoch meet only each other and a world runs once every host of
// it holds it; the jobs layer hears of it through on_world.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "daemon/cluster/control_plane.h"

namespace gsync::cluster {

namespace {
// "h1 ranks 0-1, h3 ranks 2-3"
std::string world_message(const std::string& job, const ElasticWorldView& w) {
  ElasticWorld m;
  m.epoch = w.epoch;
  m.failed = w.failed ? 1 : 0;
  set_field(m.job, sizeof m.job, job);
  set_field(m.reason, sizeof m.reason, w.reason);
  return encode_elastic_world(m, w.hosts);
}

std::string rank_map(const ElasticWorldView& w, const std::function<std::string(int)>& name) {
  std::string out;
  int r = 0;
  for (const auto& h : w.hosts) {
    out += fmt::format("{}{} rank{} {}", out.empty() ? "" : ", ", name(h.host),
                       h.local_size == 1 ? "" : "s",
                       h.local_size == 1 ? std::to_string(r)
                                         : fmt::format("{}-{}", r, r + h.local_size - 1));
    r += h.local_size;
  }
  return out;
}
}  // namespace

void ControlPlane::elastic_local_complete(const std::string& job, int local_size, int min_hosts,
                                          int max_hosts) {
  ElasticJobState& j = elastic_.job(job);
  j.min_hosts = min_hosts;
  j.max_hosts = max_hosts;
  j.local_size = local_size;
  spdlog::info("job {}: elastic, {} ranks on this host, min_hosts {}, max_hosts {}: joined", job,
               local_size, min_hosts,
               max_hosts == 0 ? std::string("none") : std::to_string(max_hosts));
  send_all(encode_elastic_join(job, local_size, min_hosts, max_hosts));
  elastic_evaluate(job);
}

void ControlPlane::elastic_local_left(const std::string& job) {
  const ElasticJobState* found = elastic_.find(job);
  if (!found || found->local_size == 0) return;
  ElasticJobState& j = elastic_.job(job);
  j.local_size = 0;
  send_all(encode_elastic_join(job, 0, j.min_hosts, j.max_hosts));
  if (j.world.formed())
    members_.clear_local(ElasticBook::world_name(job, j.world.epoch));
}

const ElasticWorldView* ControlPlane::elastic_world(const std::string& job) const {
  const ElasticJobState* j = elastic_.find(job);
  return j ? &j->world : nullptr;
}

bool ControlPlane::elastic_world_linked(const std::string& job) const {
  const ElasticJobState* j = elastic_.find(job);
  if (!j || !j->world.formed()) return false;
  for (const auto& h : j->world.hosts)
    if (h.host != cluster_.self && !(is_member(h.host) && net_ && net_->peer_up(h.host)))
      return false;
  return true;
}

void ControlPlane::on_elastic_join(int peer, std::string_view msg) {
  ElasticJoin m;
  if (!decode_elastic_join(msg, &m)) {
    spdlog::error("host {}: malformed ElasticJoin ({} bytes); ignored", host_id(peer), msg.size());
    return;
  }
  std::string job = field(m.job, sizeof m.job);
  ElasticJobState& j = elastic_.job(job);
  if (m.local_size == 0) {
    if (j.joined.erase(peer))
      spdlog::info("job {}: host {} no longer has all its ranks of the elastic job", job,
                   host_id(peer));
  } else if (j.min_hosts != 0 && (m.min_hosts != j.min_hosts || m.max_hosts != j.max_hosts)) {
    spdlog::error("job {}: host {} says min_hosts {} max_hosts {}, but this host's ranks say {} "
                  "and {}; it is not admitted (every rank of an elastic job must say the same)",
                  job, host_id(peer), m.min_hosts, m.max_hosts, j.min_hosts, j.max_hosts);
    return;
  } else {
    j.joined[peer] = m.local_size;
    spdlog::info("job {}: host {} has its {} ranks of the elastic job", job, host_id(peer),
                 m.local_size);
  }
  elastic_evaluate(job);
}

void ControlPlane::on_elastic_world(int peer, std::string_view msg) {
  ElasticWorld m;
  std::vector<ElasticMember> hosts;
  // A world may name a host this daemon has not heard of yet (on etcd the
  // leader may see a host join first): its link is not up, so the world
  // waits for it (elastic_world_linked) like for any host not linked yet.
  if (!decode_elastic_world(msg, &m, &hosts)) {
    spdlog::error("host {}: malformed ElasticWorld ({} bytes); ignored", host_id(peer), msg.size());
    return;
  }
  ElasticWorldView w;
  w.epoch = m.epoch;
  w.hosts = std::move(hosts);
  w.failed = m.failed != 0;
  w.reason = field(m.reason, sizeof m.reason);
  std::string job = field(m.job, sizeof m.job);
  elastic_adopt(job, std::move(w));
  // A leader that sees what the sender did not (a host gone since) forms
  // the next one.
  elastic_evaluate(job);
}

void ControlPlane::elastic_evaluate(const std::string& job) {
  auto up = [this](int h) { return is_member(h) && net_ && net_->peer_up(h); };
  auto name = [this](int h) { return elastic_host_name(h); };
  std::optional<ElasticWorldView> w = elastic_.propose(job, up, name);
  if (!w) return;
  send_all(world_message(job, *w));
  elastic_adopt(job, std::move(*w));
}

void ControlPlane::elastic_adopt(const std::string& job, ElasticWorldView w) {
  if (!elastic_.adopt(job, std::move(w))) return;
  const ElasticJobState& j = *elastic_.find(job);
  forget_worlds_before(job, j.world.epoch);
  auto name = [this](int h) { return elastic_host_name(h); };
  if (j.world.failed) {
    spdlog::error("job {}: elastic job ended at epoch {:x}: {}", job, j.world.epoch,
                  j.world.reason);
  } else {
    // This host's ranks go to the others under the world's name, as a fixed
    // job's do; the world is ready (its ranks answered, its ops run) once
    // every host of it has announced it. Two leaders that formed worlds of
    // the same counter while their links came up never run an op in the
    // world that the larger epoch replaced: no other host announced it.
    const std::string wname = ElasticBook::world_name(job, j.world.epoch);
    const int world = j.world.world_size();
    const int offset = j.world.offset_of(cluster_.self);
    const auto self = std::find_if(j.world.hosts.begin(), j.world.hosts.end(),
                                   [&](const ElasticMember& h) { return h.host == cluster_.self; });
    // The world says this host's ranks as they were when it was formed.
    if (self != j.world.hosts.end() && self->local_size == j.local_size) {
      std::vector<int> ranks;
      for (int r = offset; r < offset + j.local_size; r++) ranks.push_back(r);
      local_job_complete(wname, world, std::move(ranks), 0);
    }
    spdlog::info("job {}: world epoch {:x} ({}): {} hosts, {} ranks: {}{}", job, j.world.epoch,
                 j.world.reason, j.world.hosts.size(), world, rank_map(j.world, name),
                 offset >= 0 ? "" : "; this host is not in it");
  }
  if (on_world) on_world(job, j.world);
}

void ControlPlane::forget_worlds_before(const std::string& job, uint64_t epoch) {
  for (const auto& n : members_.names()) {
    std::string base;
    uint64_t e = 0;
    if (ElasticBook::parse_world_name(n, &base, &e) && base == job && e < epoch)
      members_.forget(n);
  }
}

bool ControlPlane::stale_world(const std::string& name) const {
  std::string job;
  uint64_t epoch = 0;
  if (!ElasticBook::parse_world_name(name, &job, &epoch)) return false;
  const ElasticJobState* j = elastic_.find(job);
  return j && (j->world.failed || epoch < j->world.epoch);
}

std::string ControlPlane::elastic_host_name(int host) const {
  return size_t(host) < cluster_.hosts.size() ? host_id(host) : fmt::format("host #{}", host);
}

void ControlPlane::elastic_peer_up(int peer) {
  std::vector<std::string> linked;
  for (const auto& [job, j] : elastic_.jobs()) {
    if (j.local_size > 0)
      net_->send_control(peer, encode_elastic_join(job, j.local_size, j.min_hosts, j.max_hosts));
    // The world as this host has it: the peer may have missed it (its link
    // was down when the leader sent it); it takes it only if newer.
    if (j.world.formed()) net_->send_control(peer, world_message(job, j.world));
    if (j.world.formed() && j.world.has(peer)) linked.push_back(job);
  }
  // A world whose last link came up: its ranks may be answered now.
  for (const auto& job : linked)
    if (on_job_ready && elastic_world_linked(job))
      on_job_ready(ElasticBook::world_name(job, elastic_.find(job)->world.epoch));
}

void ControlPlane::elastic_peer_down(int peer) {
  for (const auto& job : elastic_.host_gone(peer)) elastic_evaluate(job);
}

}  // namespace gsync::cluster
