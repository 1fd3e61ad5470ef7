// SPDX-License-Identifier: Apache-2.0
//
// Human-readable text for the admin replies (status, jobs, clients); the
// documents are shown in docs/operations.md. A field that is missing, null or
// of another type prints as "-" instead of failing, so gsyncctl stays useful
// against an older or newer daemon.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace gsync::cli {

// "key: value" lines, then the config in force by section.
std::string render_status(const nlohmann::json& reply);
// One row per job; "no jobs" when there are none.
std::string render_jobs(const nlohmann::json& reply);
// gsyncctl jobs --stragglers: per job, each local rank's arrival lag.
std::string render_stragglers(const nlohmann::json& reply);
// peers: the cluster's other daemons, link state and traffic each way.
std::string render_peers(const nlohmann::json& reply);
// One row per client session; "no clients connected" when there are none.
std::string render_clients(const nlohmann::json& reply);
// gsyncctl ops: the ops in flight and the timelines of the recent ones.
std::string render_ops(const nlohmann::json& reply);

}  // namespace gsync::cli
