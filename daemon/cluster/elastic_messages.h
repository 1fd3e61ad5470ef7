// SPDX-License-Identifier: Apache-2.0
//
// The two messages of elastic jobs (docs/membership.md, "Elastic jobs";
// docs/protocol.md). ElasticJoin: this host has all its local ranks of the
// job (local_size > 0) or no longer has (0). ElasticWorld: the world the
// job's leader formed, the hosts in rank order with their local sizes; or
// the job's end (failed, no hosts) when fewer than min_hosts are left.
// Decoded from untrusted bytes: every length and count is checked
// (tests/fuzz/fuzz_control_messages.cc).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "daemon/cluster/messages.h"

namespace gsync::cluster {

constexpr size_t kMaxElasticWorldHosts = 4096;

struct ElasticJoin {
  uint8_t type = kElasticJoin;
  uint8_t pad = 0;
  uint16_t min_hosts = 0, max_hosts = 0;
  uint16_t pad2 = 0;
  int32_t local_size = 0;  // 0: this host's ranks of the job are gone
  char job[kJobMax] = {};
};
static_assert(sizeof(ElasticJoin) == 76);

struct ElasticWorld {
  uint8_t type = kElasticWorld;
  uint8_t failed = 0;  // the job ended: fewer hosts than min_hosts
  uint16_t pad = 0;
  uint32_t nhosts = 0;  // followed by nhosts ElasticMember
  uint64_t epoch = 0;
  char job[kJobMax] = {};
  char reason[160] = {};  // why it changed: the log's and the ranks' text
};
static_assert(sizeof(ElasticWorld) == 240);

struct ElasticMember {
  int32_t host = -1;  // index in the cluster's hosts table
  int32_t local_size = 0;
};
static_assert(sizeof(ElasticMember) == 8);

inline std::string encode_elastic_join(const std::string& job, int local_size, int min_hosts,
                                       int max_hosts) {
  ElasticJoin m;
  m.local_size = local_size;
  m.min_hosts = static_cast<uint16_t>(min_hosts);
  m.max_hosts = static_cast<uint16_t>(max_hosts);
  set_field(m.job, sizeof m.job, job);
  return std::string(as_bytes(m));
}

inline bool decode_elastic_join(std::string_view msg, ElasticJoin* m) {
  return decode_exact(msg, m) && m->local_size >= 0 &&
         static_cast<size_t>(m->local_size) <= kMaxRanksPerHost && m->min_hosts > 0 &&
         (m->max_hosts == 0 || m->max_hosts >= m->min_hosts);
}

inline std::string encode_elastic_world(const ElasticWorld& head,
                                        const std::vector<ElasticMember>& hosts) {
  ElasticWorld m = head;
  m.nhosts = static_cast<uint32_t>(hosts.size());
  std::string out(as_bytes(m));
  if (!hosts.empty())
    out.append(reinterpret_cast<const char*>(hosts.data()), hosts.size() * sizeof(ElasticMember));
  return out;
}

// Checks the list too: hosts in increasing index order (rank order), each
// with at least one rank; a failed world lists none.
inline bool decode_elastic_world(std::string_view msg, ElasticWorld* m,
                                 std::vector<ElasticMember>* hosts) {
  if (!decode(msg, m) || m->nhosts > kMaxElasticWorldHosts || m->epoch == 0 ||
      msg.size() != sizeof(ElasticWorld) + sizeof(ElasticMember) * m->nhosts ||
      (m->failed != 0) != (m->nhosts == 0) || m->failed > 1)
    return false;
  hosts->resize(m->nhosts);
  if (!hosts->empty())
    std::memcpy(hosts->data(), msg.data() + sizeof(ElasticWorld),
                hosts->size() * sizeof(ElasticMember));
  for (size_t i = 0; i < hosts->size(); i++) {
    const auto& h = (*hosts)[i];
    if (h.host < 0 || h.local_size < 1 || static_cast<size_t>(h.local_size) > kMaxRanksPerHost ||
        (i > 0 && h.host <= (*hosts)[i - 1].host))
      return false;
  }
  return true;
}

}  // namespace gsync::cluster
