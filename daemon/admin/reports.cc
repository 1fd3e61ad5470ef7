// SPDX-License-Identifier: Apache-2.0
#include "daemon/admin/reports.h"

#include <unistd.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "daemon/config/config_json.h"
#include "daemon/core/daemon.h"
#include "daemon/reduce/reduce.h"
#include "gsync_build_config.h"

namespace gsync {

namespace {

using nlohmann::json;

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

json status(Daemon& d) {
  auto now = std::chrono::steady_clock::now();
  auto& g = d.jobs().stats();
  return json{
      {"version", GSYNC_VERSION_STRING},
      {"protocol", proto::kVersion},
      {"pid", getpid()},
      {"uptime_s", seconds_since(d.started_at())},
      {"isa", reduce::isa_name(reduce::active_isa())},
      {"reduce_threads", d.reduce_threads()},
      {"config_source", d.config().source},
      {"config", config_to_json(d.config())},
      {"clients", d.sessions().size()},
      {"jobs", d.jobs().jobs().size()},
      {"ops",
       {{"completed", g.ops_completed}, {"failed", g.ops_failed}, {"in_flight", d.jobs().in_flight()}}},
      {"bytes_reduced", g.bytes_reduced},
      {"throughput_gbps", g.meter.rate(now) / 1e9},
      {"transport", d.cross_host() ? fmt::format("{} (cluster {}, host {}, {} hosts)",
                                                 d.cross_host()->transport_summary(),
                                                 d.cross_host()->cluster().name,
                                                 d.cross_host()->self_id(),
                                                 d.cross_host()->cluster().hosts.size())
                                   : "local (single host)"},
      {"epoch", d.cross_host() ? d.cross_host()->epoch() : 0},
  };
}

json jobs(Daemon& d) {
  auto now = std::chrono::steady_clock::now();
  json list = json::array();
  for (const auto& [name, job] : d.jobs().jobs()) {
    json ranks = json::array();
    for (size_t l = 0; l < job->slots.size(); l++) {
      const auto& slot = job->slots[l];
      if (slot.session)
        ranks.push_back({{"rank", slot.session->rank}, {"local_rank", l},
                         {"pid", slot.session->peer.pid}, {"uid", slot.session->peer.uid},
                         {"state", "connected"}});
      else if (slot.dead)
        ranks.push_back({{"rank", slot.dead_rank}, {"local_rank", l}, {"pid", slot.dead_pid},
                         {"uid", nullptr}, {"state", "dead"}});
    }
    list.push_back({{"job", name},
                    {"world_size", job->world_size},
                    {"local_size", job->local_size},
                    {"ranks", ranks},
                    {"ops_completed", job->ops_completed},
                    {"ops_failed", job->ops_failed},
                    {"ops_in_flight", job->ops.size()},
                    {"bytes_reduced", job->bytes_reduced},
                    {"throughput_gbps", job->meter.rate(now) / 1e9},
                    {"last_error", job->last_error}});
  }
  return json{{"jobs", list}};
}

json clients(Daemon& d) {
  json list = json::array();
  for (const auto& [id, s] : d.sessions()) {
    list.push_back({{"session", id},
                    {"pid", s->peer.pid},
                    {"uid", s->peer.uid},
                    {"gid", s->peer.gid},
                    {"job", s->job_id},
                    {"rank", s->rank},
                    {"local_rank", s->local_rank},
                    {"arena_bytes", s->arena_bytes()},
                    {"ops_submitted", s->stats.ops_submitted},
                    {"ops_completed", s->stats.ops_completed},
                    {"ops_failed", s->stats.ops_failed},
                    {"bytes", s->stats.bytes},
                    {"connected_s", seconds_since(s->connected_at)}});
  }
  return json{{"clients", list}};
}

}  // namespace

std::string admin_reply(Daemon& d, const std::string& command) {
  if (command == "status") return status(d).dump();
  if (command == "jobs") return jobs(d).dump();
  if (command == "clients") return clients(d).dump();
  if (command == "peers") {
    if (d.cross_host()) return d.cross_host()->peers_json();
    return json{{"cluster", nullptr}, {"epoch", 0}, {"peers", json::array()}}.dump();
  }
  return json{{"error", "unknown admin command '" + command + "'; known: status, jobs, clients, peers"}}
      .dump();
}

}  // namespace gsync
