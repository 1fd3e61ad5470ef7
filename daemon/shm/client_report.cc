// SPDX-License-Identifier: Apache-2.0
//
// gsyncctl clients: one row per session, with the device memory it shared.
#include <nlohmann/json.hpp>

#include "daemon/shm/client_listener.h"

namespace gsync {

nlohmann::json ClientListener::clients_report() const {
  using nlohmann::json;
  auto now = std::chrono::steady_clock::now();
  json list = json::array();
  for (const auto& [id, s] : sessions_) {
    list.push_back({{"session", id},
                    {"pid", s->peer.pid},
                    {"uid", s->peer.uid},
                    {"gid", s->peer.gid},
                    {"job", s->job_id},
                    {"rank", s->rank},
                    {"local_rank", s->local_rank},
                    {"arena_bytes", s->arena_bytes()},
                    // Device memory it shared (gsync_alloc_device), mapped here.
                    {"device_allocations", s->device_memory.size()},
                    {"device_bytes", s->device_bytes()},
                    {"ops_submitted", s->stats.ops_submitted},
                    {"ops_completed", s->stats.ops_completed},
                    {"ops_failed", s->stats.ops_failed},
                    {"bytes", s->stats.bytes},
                    {"connected_s", std::chrono::duration<double>(now - s->connected_at).count()}});
  }
  return json{{"clients", list}};
}

}  // namespace gsync
