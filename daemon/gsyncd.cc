// SPDX-License-Identifier: Apache-2.0
#include "daemon/gsyncd.h"

#include <sys/signalfd.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <ctime>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "daemon/config/config_json.h"
#include "daemon/core/json_text.h"
#include "daemon/core/notify.h"
#include "daemon/pipeline/plan_cache.h"
#include "daemon/reduce/reduce.h"
#include "daemon/reports/job_report.h"
#include "gsync_build_config.h"

namespace gsync {

namespace {
constexpr auto kTick = std::chrono::milliseconds(20);

unsigned pool_threads(const DaemonConfig& cfg) {
  if (cfg.reduce_threads) return cfg.reduce_threads;
  return std::max(1u, std::thread::hardware_concurrency());
}
}  // namespace

Gsyncd::Gsyncd(DaemonConfig cfg)
    : cfg_(std::move(cfg)),
      admin_(loop_),
      pool_(pool_threads(cfg_)),
      started_at_(std::chrono::steady_clock::now()) {}

Gsyncd::~Gsyncd() {
  // The services go before the control plane: nothing reaches them from
  // its teardown.
  if (control_) control_->remove_services();
  if (signal_fd_ >= 0) close(signal_fd_);
}

// The cross-host services and what each owns (cluster/services.h): the
// one place a layer is plugged into the control plane. The order is the
// order they hear of a lost peer.
Status Gsyncd::add_services() {
  if (!control_) return Status::ok();
  const std::pair<cluster::CrossHostService*, cluster::ServiceClaim> services[] = {
      {engine_.get(), collective::Engine::claim()},
      {ps_.get(), ps::Service::claim()},
      {&jobs_->leases(), leases::LeaseService::claim()},
  };
  for (const auto& [service, claim] : services)
    if (Status st = control_->add_service(service, claim); !st) return st;
  return Status::ok();
}

void Gsyncd::block_stop_signals() {
  sigset_t mask = stop_signals();
  pthread_sigmask(SIG_BLOCK, &mask, nullptr);
  signal(SIGPIPE, SIG_IGN);
}

sigset_t Gsyncd::stop_signals() {
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGTERM);
  sigaddset(&mask, SIGINT);
  return mask;
}

Status Gsyncd::start_cluster() {
  ClusterFile cluster;
  std::unique_ptr<cluster::etcd::Registry> registry;
  if (!cfg_.etcd_endpoints.empty()) {
    if (Status st = cluster::ControlPlane::join_etcd(cfg_, &registry, &cluster); !st) return st;
  } else if (Status st = load_cluster_file(cfg_.cluster_file, cfg_.host_id, &cluster); !st) {
    return st;
  }
  control_ = std::make_unique<cluster::ControlPlane>(cfg_, std::move(cluster), loop_,
                                                     std::move(registry));
  if (Status st = control_->start(); !st) return st;
  engine_ = std::make_unique<collective::Engine>(*control_);
  return Status::ok();
}

Status Gsyncd::start() {
  // Their answers come back by eventfd; without one a checkpoint, an
  // import or pinned memory would be made on the event thread and never
  // answered. Only a process out of file descriptors gets here.
  if (writer_.done_fd() < 0 || gpu_worker_.done_fd() < 0)
    return Status(GSYNC_ERR_INTERNAL,
                  "cannot make the eventfds of the checkpoint and GPU threads "
                  "(out of file descriptors?)");
  sigset_t mask = stop_signals();
  signal_fd_ = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
  loop_.add(signal_fd_, EPOLLIN, [this](uint32_t) {
    signalfd_siginfo si{};
    if (read(signal_fd_, &si, sizeof si) == sizeof si)
      spdlog::info("signal {} received; stopping", strsignal(static_cast<int>(si.ssi_signo)));
    loop_.stop();
  });
  if (!cfg_.cluster_file.empty() || !cfg_.etcd_endpoints.empty())
    if (Status st = start_cluster(); !st) return st;

  pipeline::PipelineOptions po;
  po.inline_bytes = cfg_.inline_reduce_bytes;
  po.algorithm = cfg_.algorithm;
  po.chunk_bytes = cfg_.chunk_bytes;
  po.record = cfg_.trace_record;
  ps::CheckpointConfig ckpt{cfg_.checkpoint_dir, static_cast<int>(cfg_.checkpoint_keep)};
  ps_ = std::make_unique<ps::Service>(control_.get(), ckpt, &writer_);
  loop_.add(writer_.done_fd(), EPOLLIN, [this](uint32_t) { ps_->on_checkpoints_written(writer_.take()); });
  pipeline_ = std::make_unique<pipeline::Pipeline>(loop_, pool_, po, engine_.get(), control_.get(),
                                                   ps_.get());
  if (control_)
    control_->on_epoch = [this](uint64_t epoch) { pipeline_->plans()->epoch_changed(epoch); };
  loop_.add(pool_.done_fd(), EPOLLIN, [this](uint32_t) { pipeline_->on_pool_events(); });

  jobs_ = std::make_unique<JobManager>(cfg_, *pipeline_, control_.get());
  if (Status st = add_services(); !st) return st;
  clients_ = std::make_unique<ClientListener>(cfg_, loop_, *jobs_, &gpu_worker_);
  pipeline_->staging().make_on(&gpu_worker_);
  // Device memory imported (and pinned staging made) off the event thread
  // is answered on it.
  loop_.add(gpu_worker_.done_fd(), EPOLLIN, [this](uint32_t) { gpu_worker_.run_done(); });
  // Closing a session from inside a completion would pull jobs out from
  // under the loop that is completing ops: defer it to the next iteration.
  jobs_->on_broken_session = [this](const std::shared_ptr<Session>& s, const Status& err) {
    spdlog::error("{}", err.message());
    loop_.defer([this, s, msg = err.message()] {
      clients_->close_session(s, "broke the ring protocol: " + msg);
    });
  };
  if (Status st = load_tuning(); !st) return st;
  if (Status st = clients_->start(); !st) return st;
  register_reports();
  if (Status st = admin_.listen({cfg_.admin_socket_path, cfg_.admin_socket_mode, cfg_.admin_group});
      !st)
    return st;
  if (!cfg_.metrics_listen.empty()) {
    metrics_ = std::make_unique<metrics::MetricsServer>(loop_, [this] { return metrics_text(); });
    if (Status st = metrics_->start(cfg_.metrics_listen); !st) return st;
  }
  loop_.set_poll(std::chrono::microseconds(cfg_.poll_us), cfg_.poll_mode == "auto");
  loop_.every(kTick, [this] { tick(); });
  watchdog_period_ = watchdog_period();
  return Status::ok();
}

void Gsyncd::register_reports() {
  admin_.add("status", [this] { return status_report(); });
  // The daemon's CPU time so far, every thread: read before and after a
  // benchmark's timed ops (gsync-perf --cpu), so kept to the one reading.
  admin_.add("cpu", [] {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return json_text(nlohmann::json{{"cpu_s", double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9},
                                    {"pid", getpid()}});
  });
  admin_.add("jobs", [this] {
    return json_text(reports::jobs(*jobs_, *pipeline_, control_.get()));
  });
  admin_.add("ops", [this] { return json_text(reports::ops(*jobs_, *pipeline_, control_.get())); });
  admin_.add_with_argument("checkpoint", [this](const std::string& job) {
    Status st = ps_->request_checkpoint(job);
    if (!st) return json_text(nlohmann::json{{"error", st.message()}});
    return json_text(nlohmann::json{
        {"job", job},
        {"requested", "every key of the job that keeps checkpoints takes one at the next clock all its shards reach"}});
  });
  admin_.add("clients", [this] { return json_text(clients_->clients_report()); });
  admin_.add("peers", [this] {
    if (control_) return json_text(control_->peers_report());
    return json_text(
        nlohmann::json{{"cluster", nullptr}, {"epoch", 0}, {"peers", nlohmann::json::array()}});
  });
  // gsyncctl doctor's latency, bandwidth and clock figures: answered once
  // every up peer has (cluster/probe.h), never blocking the loop.
  admin_.add_async("probe", [this](const std::string& arg, AdminServer::Reply reply) {
    if (!arg.empty())
      return reply(json_text(nlohmann::json{{"error", "probe takes no argument"}}));
    if (!control_)
      return reply(json_text(nlohmann::json{{"probe", nullptr}, {"self", nullptr},
                                            {"peers", nlohmann::json::array()}}));
    control_->probe({}, [reply](const nlohmann::json& report) { reply(json_text(report)); });
  });
  register_tuning();
}

// The event loop's polling (docs/operations.md, "Polling"): its window, its
// mode, and in mode auto what the last look at the CPUs found.
nlohmann::json Gsyncd::polling_report() const {
  nlohmann::json j{{"window_us", cfg_.poll_us},
                   {"mode", cfg_.poll_mode},
                   {"windows", loop_.poll_windows()},
                   {"windows_skipped", loop_.poll_windows_skipped()}};
  if (const SpareCpu* s = loop_.spare_cpu()) {
    j["cpu_spare"] = s->last();
    j["runnable_others"] = s->runnable();
    j["cpus"] = s->cpus();
  }
  return j;
}

std::string Gsyncd::status_report() const {
  using nlohmann::json;
  auto now = std::chrono::steady_clock::now();
  auto& g = jobs_->stats();
  json plans = nullptr;
  if (pipeline_->plans()) {
    auto s = pipeline_->plans()->stats();
    plans = {{"idle", s.idle}, {"leased", s.leased}, {"hits", s.hits}, {"misses", s.misses},
             {"evictions", s.evictions}, {"retiring", s.retiring}};
  }
  return json_text(json{
      {"version", GSYNC_VERSION_STRING},
      {"protocol", proto::kVersion},
      {"pid", getpid()},
      {"uptime_s", std::chrono::duration<double>(now - started_at_).count()},
      {"isa", reduce::isa_name(reduce::active_isa())},
      {"reduce_threads", pool_.threads()},
      {"config_source", cfg_.source},
      {"config", config_to_json(cfg_)},
      {"clients", clients_->sessions().size()},
      {"jobs", jobs_->jobs().size()},
      {"ops",
       {{"completed", g.ops_completed}, {"failed", g.ops_failed}, {"in_flight", jobs_->in_flight()}}},
      {"bytes_reduced", g.bytes_reduced},
      {"throughput_gbps", g.meter.rate(now) / 1e9},
      {"transport", control_ ? fmt::format("{} (cluster {}, host {}, {} hosts)",
                                           control_->transport_summary(), control_->cluster().name,
                                           control_->self_id(), control_->members())
                             : "local (single host)"},
      {"epoch", control_ ? control_->epoch() : 0},
      {"membership", control_ ? control_->membership_report() : nlohmann::json(nullptr)},
      {"plans", plans},
      {"device_memory",
       {{"ops_on_gpu", pipeline_->device_paths().on_gpu},
        {"ops_through_host", pipeline_->device_paths().through_host},
        {"last_through_host", pipeline_->device_paths().last_refusal},
        {"gpu_tasks_in_flight", pipeline_->gpu_tasks_in_flight()},
        {"pinned_bytes", pipeline_->pinned_bytes()}}},
      {"event_loop_exceptions", loop_.exceptions_caught()},
      {"polling", polling_report()},
      {"tuning", tuning_report()},
  });
}

int Gsyncd::run() {
  spdlog::info("gsyncd {} serving clients on {} (admin {}), protocol {}, reduce kernels {}, {} "
               "reduce threads, config from {}",
               GSYNC_VERSION_STRING, cfg_.socket_path, cfg_.admin_socket_path, proto::kVersion,
               reduce::isa_name(reduce::active_isa()), pool_.threads(), cfg_.source);
  notify_ready(fmt::format("serving on {}", cfg_.socket_path));
  loop_.run();
  notify_stopping();
  spdlog::info("gsyncd stopping: {} sessions, {} jobs", clients_->sessions().size(),
               jobs_->jobs().size());
  return 0;
}

void Gsyncd::tick() {
  auto now = std::chrono::steady_clock::now();
  jobs_->check_timeouts(now);
  clients_->tick(now);
  // Pinged from the loop thread on purpose: a wedged loop stops the pings
  // and systemd restarts the daemon.
  if (watchdog_period_.count() && now >= next_watchdog_) {
    notify_watchdog();
    next_watchdog_ = now + watchdog_period_;
  }
}

}  // namespace gsync
