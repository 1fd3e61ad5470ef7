// SPDX-License-Identifier: Apache-2.0
//
// The static cluster file: the cluster's name and every daemon in it, with
// its address, port and rack. Every daemon of a cluster reads the same file;
// the order of [[hosts]] is the cluster's order (ring order, tie-breaks).
//
//   name = "prod-a"
//   [[hosts]]
//   id = "h11"
//   address = "10.0.1.11"
//   port = 7700
//   rack = "r1"
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/core/status.h"

namespace gsync {

struct ClusterHost {
  std::string id;
  std::string address;
  uint16_t port = 0;
  std::string rack;
};

struct ClusterFile {
  std::string name;
  std::vector<ClusterHost> hosts;
  int self = -1;  // index of this daemon
  std::string path;
};

// Loads path; finds this daemon by host_id, or, when host_id is empty, as the
// one host whose address belongs to this machine. Errors name file and line.
Status load_cluster_file(const std::string& path, const std::string& host_id, ClusterFile* out);
// The file's text alone (path names it in errors); self stays -1.
Status parse_cluster_text(std::string_view text, const std::string& path, ClusterFile* out);
// Finds this daemon in cf as load_cluster_file does.
Status find_self(const std::string& host_id, ClusterFile* cf);

// Ids, racks and the cluster's name are printable text of 1 to this many
// bytes: they travel in every link's HELLO and in every error that names a
// host.
constexpr size_t kMaxClusterName = 255;
// More hosts than this is a typo, not a cluster.
constexpr size_t kMaxClusterHosts = 1024;

}  // namespace gsync
