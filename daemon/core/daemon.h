// SPDX-License-Identifier: Apache-2.0
//
// gsyncd: wires the client socket, sessions, jobs, the work pool and the
// admin socket onto one event loop. Lifetimes in one place: the constructor
// order below is the acquisition order, destruction is its reverse.
#pragma once

#include <signal.h>

#include <chrono>
#include <map>
#include <memory>
#include <string>

#include "daemon/admin/admin_server.h"
#include "daemon/collective/local_executor.h"
#include "daemon/collective/work_pool.h"
#include "daemon/config/config.h"
#include "daemon/core/event_loop.h"
#include "daemon/jobs/job_manager.h"

namespace gsync {

class Daemon {
 public:
  // Must run before any thread exists (the Daemon's workers included):
  // threads inherit the mask, and SIGTERM must reach only the signalfd.
  static void block_stop_signals();

  explicit Daemon(DaemonConfig cfg);
  ~Daemon();

  // Opens the sockets. Then run() serves until SIGTERM/SIGINT.
  Status start();
  int run();

  // For the admin reports.
  const DaemonConfig& config() const { return cfg_; }
  const std::map<uint64_t, std::shared_ptr<Session>>& sessions() const { return sessions_; }
  JobManager& jobs() { return jobs_; }
  CrossHost* cross_host() { return cross_.get(); }
  unsigned reduce_threads() const { return pool_.threads(); }
  std::chrono::steady_clock::time_point started_at() const { return started_at_; }

 private:
  void accept_clients();
  void on_hello(int fd);
  void open_session(int fd, const Peer& peer, const proto::HelloRequest& hello);
  void on_doorbell(const std::shared_ptr<Session>& s);
  void take_submissions(const std::shared_ptr<Session>& s);
  // Every session's pending submissions; whether there were any.
  bool take_all_submissions();
  void close_session(const std::shared_ptr<Session>& s, const std::string& reason);
  bool allowed(const Peer& peer) const;
  void reap_stale_holder(const JoinRequest& join);
  void tick();
  static sigset_t stop_signals();

  DaemonConfig cfg_;
  EventLoop loop_;
  WorkPool pool_;
  LocalExecutor executor_;
  JobManager jobs_;
  AdminServer admin_;
  std::unique_ptr<CrossHost> cross_;
  int listen_fd_ = -1;
  int signal_fd_ = -1;
  uint64_t next_session_ = 1;
  std::map<uint64_t, std::shared_ptr<Session>> sessions_;
  std::map<int, std::chrono::steady_clock::time_point> handshakes_;  // fd -> deadline
  std::chrono::steady_clock::time_point started_at_;
  std::chrono::steady_clock::time_point next_watchdog_{};
  std::chrono::milliseconds watchdog_period_{0};
};

}  // namespace gsync
