// SPDX-License-Identifier: Apache-2.0
//
// Checks an admin reply against its schema (protocol/admin_jobs.h): the
// fields a live daemon wrote that the schema does not name, so a field
// written by string, outside the one vocabulary, fails the test that
// fetched it.
#pragma once

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "protocol/admin_jobs.h"

namespace gsync::test {

// Every object key in a "jobs" reply that admin::jobs::kAll lacks, as
// "path.key"; the keys of the per-host maps are host ids, not names.
inline void unknown_jobs_fields(const nlohmann::json& v, const std::string& path,
                                std::vector<std::string>* out) {
  namespace k = admin::jobs;
  if (v.is_array()) {
    for (const auto& e : v) unknown_jobs_fields(e, path + "[]", out);
    return;
  }
  if (!v.is_object()) return;
  for (auto it = v.begin(); it != v.end(); ++it) {
    const std::string& key = it.key();
    if (std::find(k::kAll.begin(), k::kAll.end(), std::string_view(key)) == k::kAll.end())
      out->push_back(path + "." + key);
    if (std::find(k::kHostMaps.begin(), k::kHostMaps.end(), std::string_view(key)) ==
        k::kHostMaps.end())
      unknown_jobs_fields(it.value(), path + "." + key, out);
  }
}

inline std::string unknown_jobs_fields(const nlohmann::json& reply) {
  std::vector<std::string> found;
  unknown_jobs_fields(reply, "", &found);
  std::string out;
  for (const auto& f : found) out += (out.empty() ? "" : ", ") + f;
  return out;
}

}  // namespace gsync::test
