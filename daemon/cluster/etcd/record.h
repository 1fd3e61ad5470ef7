// SPDX-License-Identifier: Apache-2.0
//
// What a daemon writes about itself in etcd, and where (docs/membership.md,
// "Keys"). Under the cluster's prefix P = etcd_prefix + name + "/":
//
//   P hosts/<id>        this host's record (JSON), under its lease: the key
//                       is there while the daemon lives
//   P slots/id/<id>     the host's slot (decimal), for good: its index in the
//   P slots/n/<slot>    cluster's order on every daemon, and the way back
//
// A record read from etcd is outside input: decode_record checks every
// field, and a record that fails is ignored with a log line naming the key.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "daemon/core/status.h"

namespace gsync::cluster::etcd {

// Slots a cluster hands out: the transport's host table holds this many.
constexpr int kMaxSlots = 4096;

struct HostRecord {
  std::string id;       // "h11"
  std::string address;  // "10.0.1.11"
  uint16_t port = 0;
  std::string rack;
  int slot = -1;
  std::string version, build_id;
  uint32_t pid = 0;
  // etcd's: when the key was written, and its lease (not in the JSON).
  int64_t create_revision = 0;
  int64_t lease = 0;
};

std::string encode_record(const HostRecord& r);
// The JSON of encode_record. A record whose fields are missing, of the
// wrong type, out of range or not printable is refused, naming the field.
Status decode_record(std::string_view json, HostRecord* out);

// The keys (P is cluster_prefix(etcd_prefix, name)).
std::string cluster_prefix(std::string_view etcd_prefix, std::string_view name);
std::string hosts_prefix(std::string_view cluster);
std::string host_key(std::string_view cluster, std::string_view id);
std::string slot_by_id_key(std::string_view cluster, std::string_view id);
std::string slot_by_number_key(std::string_view cluster, int slot);
// The id a hosts/ key names ("" when the key is not under hosts/).
std::string id_of_host_key(std::string_view cluster, std::string_view key);

}  // namespace gsync::cluster::etcd
