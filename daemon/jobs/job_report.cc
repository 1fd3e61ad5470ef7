// SPDX-License-Identifier: Apache-2.0
//
// gsyncctl jobs: each job, its ranks and op counters.
#include <nlohmann/json.hpp>

#include "daemon/jobs/job_manager.h"

namespace gsync {

nlohmann::json JobManager::jobs_report() const {
  using nlohmann::json;
  auto now = Clock::now();
  json list = json::array();
  for (const auto& [name, job] : jobs_) {
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
    size_t running = 0;
    for (const auto& [id, op] : job->ops) running += op->running();
    list.push_back({{"job", name},
                    {"world_size", job->world_size},
                    {"local_size", job->local_size},
                    {"sync", job->policy->name()},
                    {"ranks", ranks},
                    {"ops_completed", job->ops_completed},
                    {"ops_failed", job->ops_failed},
                    {"ops_in_flight", job->ops.size()},
                    {"ops_running", running},
                    {"ready", !job->multi_host() ||
                                  (control_ && control_->job_ready(job->id, job->world_size))},
                    {"remote_departures", job->remote_departures},
                    {"bytes_reduced", job->bytes_reduced},
                    {"throughput_gbps", job->meter.rate(now) / 1e9},
                    {"last_error", job->last_error}});
  }
  return json{{"jobs", list}};
}

}  // namespace gsync
