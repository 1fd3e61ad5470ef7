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

}  // namespace gsync
