// SPDX-License-Identifier: Apache-2.0
//
// gsyncd's wiring: the layers of daemon/ put together on one event loop.
// Lifetimes in one place: members are acquired in the order below and
// released in reverse; the work pool goes first on the way down, so no
// worker still runs a task of an op whose stages are gone.
//
//   clients (shm/)  ->  jobs (jobs/)  ->  pipeline (pipeline/)
//                                            -> engine (collective/) -> control plane (cluster/)
//                                            -> work pool, reduce kernels
//   admin (admin/): the reports every layer registers
#pragma once

#include <signal.h>

#include <chrono>
#include <memory>

#include <nlohmann/json.hpp>

#include "daemon/admin/admin_server.h"
#include "daemon/cluster/control_plane.h"
#include "daemon/collective/engine.h"
#include "daemon/config/config.h"
#include "daemon/core/event_loop.h"
#include "daemon/core/worker.h"
#include "daemon/jobs/job_manager.h"
#include "daemon/metrics/exposition.h"
#include "daemon/metrics/metrics_server.h"
#include "daemon/pipeline/pipeline.h"
#include "daemon/pipeline/work_pool.h"
#include "daemon/ps/service.h"
#include "daemon/shm/client_listener.h"

namespace gsync {

class Gsyncd {
 public:
  // Must run before any thread exists (the daemon's workers included):
  // threads inherit the mask, and SIGTERM must reach only the signalfd.
  static void block_stop_signals();

  explicit Gsyncd(DaemonConfig cfg);
  ~Gsyncd();
  Gsyncd(const Gsyncd&) = delete;
  Gsyncd& operator=(const Gsyncd&) = delete;

  // Joins the cluster (if one is configured) and opens the sockets. Then
  // run() serves until SIGTERM/SIGINT.
  Status start();
  int run();

 private:
  Status start_cluster();
  Status add_services();
  void register_reports();
  std::string status_report() const;
  // The tuning table (gsyncd_tuning.cc).
  Status load_tuning();
  void register_tuning();
  std::string tune_load(const std::string& path);
  std::string tune_clear();
  nlohmann::json tuning_report() const;
  // /metrics (gsyncd_metrics.cc).
  std::string metrics_text() const;
  void metrics_ops(metrics::Exposition& m) const;
  void metrics_jobs(metrics::Exposition& m) const;
  void metrics_peers(metrics::Exposition& m) const;
  nlohmann::json polling_report() const;
  void tick();
  static sigset_t stop_signals();

  DaemonConfig cfg_;
  // Before everything that holds a client's device memory (sessions, ops,
  // plans, and the loop, whose handlers hold sessions): destroyed after
  // them, it unmaps what they let go, then joins.
  Worker gpu_worker_{"gsync-gpu"};
  EventLoop loop_;
  std::unique_ptr<cluster::ControlPlane> control_;
  std::unique_ptr<collective::Engine> engine_;
  // Before ps_: destroyed after it (a key's server finishes a snapshot's
  // copy when it goes; the thread must still be there to have claimed
  // what it claimed).
  storage::CheckpointWriter writer_;
  std::unique_ptr<ps::Service> ps_;
  std::unique_ptr<pipeline::Pipeline> pipeline_;
  std::unique_ptr<JobManager> jobs_;
  std::unique_ptr<ClientListener> clients_;
  AdminServer admin_;
  std::unique_ptr<metrics::MetricsServer> metrics_;  // [metrics] listen set
  WorkPool pool_;  // declared last: destroyed (its workers joined) first
  int signal_fd_ = -1;
  std::chrono::steady_clock::time_point started_at_;
  std::chrono::steady_clock::time_point next_watchdog_{};
  std::chrono::milliseconds watchdog_period_{0};
};

}  // namespace gsync
