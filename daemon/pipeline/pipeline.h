// SPDX-License-Identifier: Apache-2.0
//
// The op pipeline: one owner for every operation's life (UCC's schedule of
// tasks). An op is a list of stages (stage.h), built when the jobs layer
// starts it: a job on this host alone is LocalReduce; a job on several
// hosts is Fold -> CrossHost -> Store (each omitted where it has nothing to
// do). The pipeline begins the stages, passes each one's finished ranges
// to the next, and is the one place where an op completes or fails: on a
// failure it aborts every stage still running and reports the op only once
// all of them are quiet (no buffer in use, no peer write can land), so the
// client never gets its buffer back while anything still writes into it.
//
// Every callback finds its op by the op's serial, unique for the daemon's
// life: pool events carry it in their tag, transport events in the token
// of their immediates (its low 31 bits, op_token), timers ask by serial. A step
// resubmitted after a failure is a new op with a new serial, so a stale
// callback of the failed one can never reach it. Ops are reported done
// from the event loop's next turn (defer), never from inside a stage's
// own call, so no stage is destroyed while it runs. docs/architecture.md,
// "The op pipeline", has the state diagram.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "daemon/core/clock.h"
#include "daemon/core/event_loop.h"
#include "daemon/core/status.h"
#include "daemon/core/guard_book.h"
#include "daemon/core/host_arrivals.h"
#include "daemon/core/wire_log.h"
#include "daemon/pipeline/op.h"
#include "daemon/pipeline/stage.h"
#include "daemon/pipeline/staging_pool.h"
#include "daemon/pipeline/work_pool.h"

// The layers below that the pipeline drives; the layers above (jobs) see
// the pipeline only.
namespace gsync::collective {
class Engine;
struct PlanInputs;
}
namespace gsync::cluster {
class ControlPlane;
}
namespace gsync::ps {
class Service;
}

namespace gsync::pipeline {

class GpuWork;
class PlanCache;

struct PipelineOptions {
  uint64_t inline_bytes = 256 << 10;  // local work up to this runs on the event thread
  std::string algorithm = "auto";     // cross-host algorithm, or auto
  uint64_t chunk_bytes = 0;           // cross-host chunk size; 0 picks per tensor
  bool record = true;                 // stage times kept ([trace] record); else OpTimes has none
};

// The moments of its own a stage marks (the cross-host stage:
// "rendezvous", when every peer's part was known), held inline so that
// recording them allocates nothing: at most kMax, later ones dropped.
struct StageMarks {
  static constexpr size_t kMax = 2;
  std::array<std::pair<const char*, Clock::time_point>, kMax> at{};
  size_t n = 0;
  void add(const char* name, Clock::time_point t) {
    if (n < kMax) at[n++] = {name, t};
  }
  auto begin() const { return at.begin(); }
  auto end() const { return at.begin() + static_cast<std::ptrdiff_t>(n); }
};

// Times of one stage of one op, for the trace and the metrics: the three
// every stage has, and its marks.
struct StageTimes {
  Clock::time_point begun{}, first_input{}, finished{};
  StageMarks marks;
};

// How an op crossed between hosts, for the metrics' labels (both come
// from enums, so the label sets stay bounded).
struct OpRoute {
  const char* algorithm = nullptr;  // its plan's (collective::algo_name); null: no cross-host plan
  proto::Codec codec = proto::Codec::kNone;  // what it moved in between hosts
};

// An op's life as the pipeline saw it, handed to whoever started it when it
// ends (the jobs layer keeps the recent ones: gsyncctl ops, the breakdown of
// a training step in docs/performance.md).
struct OpTimes {
  Clock::time_point started{}, ended{};
  struct Stage {
    const char* name;
    StageTimes times;
  };
  std::vector<Stage> stages;
  uint64_t value = 0;  // the op's result beside its data (StageLink::set_value)
  OpRoute route;       // kept whether or not ops are recorded
  // A cross-host op's plan and who chose it: "ring, 8 chunks of 1048576
  // bytes; tuned" (job, config, tuned or rule); "" for an op on one host.
  std::string plan;
  // Its transfers on each peer link (recorded ops only; empty otherwise).
  WireLog wire;
  // When this host's part and each peer's were ready (the straggler
  // report's host lags): every cross-host op, recorded or not.
  HostArrivals hosts;
};

// What the admin reports show of a running op.
struct OpView {
  uint64_t serial = 0;
  std::string stage;  // the first stage not finished
  std::string waiting_for;
  Clock::time_point started{};
};

class Pipeline {
 public:
  using Done = std::function<void(uint64_t serial, const Status&, const OpTimes&)>;

  // engine and control: null on a daemon without a cluster; ps: the
  // parameter server (every daemon has one; null refuses its ops).
  Pipeline(EventLoop& loop, WorkPool& pool, PipelineOptions options,
           collective::Engine* engine, cluster::ControlPlane* control, ps::Service* ps = nullptr);
  ~Pipeline();
  Pipeline(const Pipeline&) = delete;
  Pipeline& operator=(const Pipeline&) = delete;

  // Starts the op; done runs once, from a later turn of the event loop.
  // Returns the op's serial.
  uint64_t start(OpRequest request, Done done);
  // Fails the op (timeout, a rank died); done runs once it is quiet.
  void abort(uint64_t serial, const Status& why);
  // An op this host fails before starting it (a remote rank had left):
  // the hosts that began it hear of it now rather than at their timeout.
  void abort_unbegun(const std::string& job, const proto::OpId& id, const Status& why);
  // Whether the op's current stage waits on other hosts.
  bool waits_on_peers(uint64_t serial) const;
  // Whether it waits for its pinned memory (made on the GPU worker, which
  // may be held up behind the driver): an abort then ends it at once.
  bool waits_for_staging(uint64_t serial) const;
  std::string waiting_for(uint64_t serial) const;
  // An op `late` past its deadline: what it hangs on, when it may be
  // timed out for it ("in the cross-host step: ...", after the stage's
  // grace; "waiting for pinned host memory ..."); "" when not (a local
  // stage ends on its own).
  std::string overdue(uint64_t serial, std::chrono::milliseconds late) const;
  OpView view(uint64_t serial) const;

  // The work pool's done fd is readable.
  void on_pool_events();
  // The GPU work's notes (gpu_work.h); check_faults: also ask the streams
  // whether their work failed.
  void on_gpu_events(bool check_faults);
  // The daemon's GPU work, made (and its fd watched) at first use.
  GpuWork* gpu_work();
  // The mapping named arena (a session's) goes: plans over it are evicted.
  void arena_closed(uint64_t arena);
  void job_closed(const std::string& job);
  // An elastic job's world changed: what the pool kept for the old one
  // (its ops still running hold theirs) goes now, not with the job.
  void world_closed(const std::string& old_world) { staging_.job_closed(old_world); }

  size_t in_flight() const { return ops_.size(); }
  // Where ops over device memory get their pinned memory (gsyncd: made on
  // its GPU worker).
  StagingPool& staging() { return staging_; }
  PlanCache* plans() { return plans_.get(); }
  // What compressed plans of the job hold as error feedback (gsyncctl jobs).
  uint64_t error_feedback_bytes(const std::string& job) const;
  // Pinned host memory of ops over device memory: kept for the job's next
  // steps (gsyncctl jobs), and alive in all (the metrics).
  uint64_t pinned_bytes(const std::string& job) const { return staging_.kept_bytes(job); }
  uint64_t pinned_bytes() const { return staging_.pinned_bytes(); }
  // Which path ops over device memory took (docs/gpu.md): kernels on the
  // GPU, or through pinned host memory and why (the last refusal); and the
  // GPU tasks queued and not ended. gsyncctl status, the metrics, and the
  // GPU tests (which assert the path they mean to test).
  struct DevicePaths {
    uint64_t on_gpu = 0;
    uint64_t through_host = 0;
    std::string last_refusal;
  };
  const DevicePaths& device_paths() const { return device_paths_; }
  size_t gpu_tasks_in_flight() const;
  // The parameter server (gsyncctl jobs reads its keys); null when none.
  const ps::Service* ps() const { return ps_; }

 private:
  friend class StageLink;
  friend class Op;
  Op* find(uint64_t serial) const;
  // The stage a pool or GPU task's tag names (StageLink::pool_tag), and its
  // op; null when the op is gone.
  Stage* stage_of(uint64_t tag, Op** op) const;
  Clock::time_point stamp() const;
  void build_stages(Op& op);
  // Why an op over device buffers cannot run on the GPU path ("": it can);
  // it then goes through host memory (docs/gpu.md).
  std::string gpu_path_refusal(const OpRequest& r) const;
  // An op over device memory: its pinned staging (the wire's, or a stand-in
  // per device buffer), set in its request now or when made (op.staging
  // counts those still being made).
  void stage_device_memory(Op& op);
  // One pinned buffer of the op: slot (StagingPool's) says which; made
  // with `device` (a GPU of the op's) current.
  void lease_staging(Op& op, int slot, uint64_t bytes, int device);
  // A pinned buffer made for the op (or why not): set where slot says.
  // False when the op is gone (b is then its caller's to release).
  bool staging_made(uint64_t serial, int slot, const Status& st, const Buffer& b);
  // One of the op's pinned buffers is there (or the asking is done): with
  // none left to wait for, its stages are built and run.
  void staging_arrived(Op& op);
  // The op fails while it waits for pinned memory: it ends now (what
  // comes later goes back to the pool), its peers are told.
  void fail_staging(Op& op, const Status& st);
  // The op over it is over: its kept staging may serve the next one.
  void release_staging(const OpRequest& r);
  void add_cross_stage(Op& op);
  // Fills in's algorithm and chunk size; says who chose them.
  const char* choose_plan(const OpRequest& r, collective::PlanInputs* in) const;
  void add_ps_stages(Op& op);
  void run(Op& op);
  // gpu_tasks: the range's GPU work is queued as these, not ended
  // (StageLink::emit_queued).
  void emit(Op& op, int stage, uint64_t begin, uint64_t end,
            const std::vector<uint64_t>* gpu_tasks = nullptr);
  void stage_finished(Op& op, int stage);
  void stage_failed(Op& op, int stage, const Status& st);
  void stage_quiet(Op& op, int stage);
  void maybe_end(Op& op);
  void reap();

  EventLoop& loop_;
  WorkPool& pool_;
  PipelineOptions options_;
  collective::Engine* engine_;
  cluster::ControlPlane* control_;
  ps::Service* ps_;
  std::unique_ptr<PlanCache> plans_;
  GuardBook guards_;  // the anomaly guard's norms, per job and key
  uint64_t next_serial_ = 1;
  std::unordered_map<uint64_t, std::unique_ptr<Op>> ops_;
  std::vector<uint64_t> ended_;  // reported on the loop's next turn
  bool reap_scheduled_ = false;
  std::vector<WorkPool::Progress> progress_;
  std::vector<WorkPool::Finished> finished_;
  std::unique_ptr<GpuWork> gpu_;
  DevicePaths device_paths_;
  StagingPool staging_;  // pinned memory of ops over device memory
  OpTimes reaped_;  // what reap() hands on, reused op after op
  // Wire logs of ended ops, their memory reserved, for the next ones
  // (recorded cross-host ops take one each).
  std::vector<WireLog> spare_wire_;
};

}  // namespace gsync::pipeline
