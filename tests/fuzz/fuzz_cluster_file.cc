// SPDX-License-Identifier: Apache-2.0
//
// The cluster file's parser (daemon/cluster/cluster_file.h) on any text.
// Properties: a file that parses names a cluster of 1 to 1024 hosts with
// unique ids, unique address:port pairs, non-zero ports, every name
// printable, and each host can be found as this daemon by its id; one that
// does not says why.
#include <set>
#include <utility>

#include "daemon/cluster/cluster_file.h"
#include "daemon/core/text.h"
#include "tests/fuzz/fuzz_target.h"

GSYNC_FUZZ_TARGET(cluster_file) {
  using namespace gsync;
  ClusterFile cf;
  Status st = parse_cluster_text(fuzz::text_of(data, size), "fuzz.toml", &cf);
  if (!st) {
    FUZZ_CHECK(!st.message().empty());
    return 0;
  }
  FUZZ_CHECK(is_printable(cf.name) && !cf.name.empty() && cf.name.size() <= kMaxClusterName);
  FUZZ_CHECK(!cf.hosts.empty() && cf.hosts.size() <= kMaxClusterHosts);
  std::set<std::string> ids;
  std::set<std::pair<std::string, uint16_t>> endpoints;
  for (const auto& h : cf.hosts) {
    FUZZ_CHECK(h.port != 0);
    FUZZ_CHECK(is_printable(h.id) && is_printable(h.rack) && is_printable(h.address));
    FUZZ_CHECK(ids.insert(h.id).second);
    FUZZ_CHECK(endpoints.insert({h.address, h.port}).second);
  }
  ClusterFile copy = cf;
  FUZZ_CHECK(find_self(cf.hosts.back().id, &copy));
  FUZZ_CHECK(copy.self == static_cast<int>(cf.hosts.size()) - 1);
  return 0;
}
