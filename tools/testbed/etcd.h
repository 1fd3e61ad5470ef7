// SPDX-License-Identifier: Apache-2.0
//
// A real etcd member (on loopback) for the tests and the test bed, alone or
// one of a cluster of three or five (EtcdServer::start_cluster):
// membership on etcd is tested against the server the daemons meet in
// production, not a fake. The binary is $GSYNC_ETCD, else "etcd" on PATH
// (Debian's etcd-server, 3.4). No etcd client here: readiness is a plain
// HTTP GET /health, so the bed links no libcurl.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "daemon/core/status.h"

namespace gsync::testbed {

class EtcdServer {
 public:
  EtcdServer() = default;
  ~EtcdServer();  // stops it; its directory stays
  EtcdServer(const EtcdServer&) = delete;
  EtcdServer& operator=(const EtcdServer&) = delete;

  // Starts etcd with its data in dir/data and its log in dir/etcd.log (dir
  // must exist), on a client and a peer port picked free on 127.0.0.1, and
  // waits (up to 20 s) until it answers /health. etcd is killed when the
  // thread that started it ends (PR_SET_PDEATHSIG), so a test that dies
  // leaves no etcd behind: start it from a thread that outlives it.
  // taken: ports not to use (the bed's hosts'); the member's are added.
  Status start(const std::string& dir, std::set<uint16_t>* taken = nullptr);
  // The same for n members, dir/1 .. dir/n (which it makes), named m1 ..
  // mn: all are launched before any is waited for, since a member answers
  // /health only once a quorum of them is up.
  static Status start_cluster(const std::string& dir, int n, std::set<uint16_t>* taken,
                              std::vector<std::unique_ptr<EtcdServer>>* out);
  // SIGTERM, SIGKILL if it has not exited 10 s later; reaped either way.
  void stop();
  // Stops it and starts it again on the same ports with the same data.
  Status restart();

  // "http://127.0.0.1:PORT"; "" before start().
  std::string endpoint() const;
  pid_t pid() const { return pid_; }
  uint16_t client_port() const { return client_port_; }
  uint16_t peer_port() const { return peer_port_; }
  // The end of its log, for failure messages.
  std::string log_tail(size_t bytes = 4000) const;

 private:
  // Picks the member's two ports.
  Status prepare(const std::string& dir, const std::string& name, std::set<uint16_t>* taken);
  std::string peer_url() const;
  Status spawn();
  Status wait_healthy();
  Status launch();

  std::string dir_;
  std::string name_ = "gsync";
  std::string initial_cluster_;  // "name=peer-url,..." of every member
  uint16_t client_port_ = 0, peer_port_ = 0;
  pid_t pid_ = -1;
};

}  // namespace gsync::testbed
