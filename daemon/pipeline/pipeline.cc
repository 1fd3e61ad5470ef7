// SPDX-License-Identifier: Apache-2.0
#include "daemon/pipeline/pipeline.h"

#include <sys/epoll.h>

#include <algorithm>

#include <fmt/format.h>

#include "daemon/cluster/control_plane.h"
#include "daemon/collective/engine.h"
#include "daemon/pipeline/copy_stage.h"
#include "daemon/pipeline/cross_stage.h"
#include "daemon/pipeline/gpu_work.h"
#include "daemon/pipeline/guard_stage.h"
#include "daemon/pipeline/plan_cache.h"
#include "daemon/pipeline/local_stages.h"
#include "daemon/pipeline/op_record.h"
#include "daemon/pipeline/ps_stages.h"
#include "daemon/ps/service.h"

namespace gsync::pipeline {

namespace {
// Wire logs kept for reuse: as many as cross-host ops usually end in one
// turn of the loop; more in flight at once take fresh ones.
constexpr size_t kSpareWireLogs = 64;
// What an op waits for before its stages are built (device_memory.cc).
constexpr const char* kStagingWait = "pinned host memory";
}  // namespace

std::string OpRequest::describe() const {
  return proto::describe_op(job, shape.opcode, id);
}

// ---------------------------------------------------------------- StageLink

const OpRequest& StageLink::request() const { return op_.req; }
uint64_t StageLink::serial() const { return op_.serial; }
double StageLink::weight_total() const { return op_.weight_total; }
void StageLink::set_weight_total(double w) { op_.weight_total = w; }
void StageLink::set_value(uint64_t v) { op_.value = v; }
void StageLink::note(std::string text) {
  if (!op_.failing) op_.status = Status(GSYNC_OK, std::move(text));
}
uint64_t StageLink::pool_tag() const { return (op_.serial << 8) | static_cast<uint64_t>(index_); }
GpuWork* StageLink::gpu() const { return op_.pipeline.gpu_work(); }
void StageLink::emit(uint64_t begin, uint64_t end) { op_.pipeline.emit(op_, index_, begin, end); }
bool StageLink::next_takes_queued() const {
  const size_t next = size_t(index_) + 1;
  return next < op_.stages.size() && op_.stages[next]->takes_queued();
}
void StageLink::emit_queued(uint64_t begin, uint64_t end, const std::vector<uint64_t>& gpu_tasks) {
  op_.pipeline.emit(op_, index_, begin, end, &gpu_tasks);
}
void StageLink::finished() { op_.pipeline.stage_finished(op_, index_); }
void StageLink::mark(const char* name) {
  if (op_.pipeline.options_.record)
    op_.states[size_t(index_)].times.marks.add(name, Clock::now());
}
void StageLink::failed(const Status& st) { op_.pipeline.stage_failed(op_, index_, st); }
void StageLink::quiet() { op_.pipeline.stage_quiet(op_, index_); }

// ---------------------------------------------------------------- Pipeline

Pipeline::Pipeline(EventLoop& loop, WorkPool& pool, PipelineOptions options,
                   collective::Engine* engine, cluster::ControlPlane* control, ps::Service* ps)
    : loop_(loop), pool_(pool), options_(std::move(options)), engine_(engine), control_(control),
      ps_(ps) {
  if (engine_) {
    plans_ = std::make_unique<PlanCache>(*engine_);
    plans_->epoch_changed(control_->epoch());
  }
}

Pipeline::~Pipeline() = default;

// A stage's times are taken only while ops are recorded ([trace] record).
Clock::time_point Pipeline::stamp() const {
  return options_.record ? Clock::now() : Clock::time_point{};
}

Op* Pipeline::find(uint64_t serial) const {
  auto it = ops_.find(serial);
  return it == ops_.end() ? nullptr : it->second.get();
}

uint64_t Pipeline::start(OpRequest request, Done done) {
  // Serials stay below 2^56 (a pool tag keeps the stage in the low byte)
  // and their low 31 bits, the token in the immediates (op_token), are
  // never 0.
  uint64_t serial = next_serial_++;
  if (op_token(serial) == 0) serial = next_serial_++;
  auto owned = std::make_unique<Op>(*this, serial, std::move(request), std::move(done));
  Op& op = *owned;
  ops_.emplace(serial, std::move(owned));
  op.staging = 1;
  stage_device_memory(op);
  staging_arrived(op);
  return serial;
}

void Pipeline::staging_arrived(Op& op) {
  if (--op.staging > 0 || op.ended) return;  // ended: failed while it waited
  if (!op.failing) build_stages(op);
  run(op);
}

void Pipeline::build_stages(Op& op) {
  const OpRequest& r = op.req;
  uint64_t inline_bytes = options_.inline_bytes;
  // Through host memory: the ranks' device buffers copied to their pinned
  // stand-ins first and back last, the usual stages between (their links
  // one further on).
  const bool through_host = !r.device_locals.empty();
  if (through_host) {
    op.link_offset = 1;
    op.stages.push_back(std::make_unique<CopyStage>(StageLink(op, 0), CopyStage::Way::kToHost,
                                                    CopyStage::local_pairs(r, CopyStage::Way::kToHost),
                                                    0, false));
  }
  if (proto::is_ps(r.shape.opcode)) {
    add_ps_stages(op);
  } else if (!r.multi_host()) {
    op.stages.push_back(std::make_unique<LocalReduceStage>(op.link(0), pool_, inline_bytes));
    if (GuardStage::wanted(r))
      op.stages.push_back(std::make_unique<GuardStage>(op.link(1), pool_, guards_));
  } else {
    add_cross_stage(op);
  }
  if (through_host && !op.failing) {
    const int last = static_cast<int>(op.stages.size());
    op.stages.push_back(std::make_unique<CopyStage>(StageLink(op, last), CopyStage::Way::kToDevice,
                                                    CopyStage::local_pairs(r, CopyStage::Way::kToDevice),
                                                    0, false));
  }
  op.states.resize(op.stages.size());
}

// The parameter server's stage lists (ps_stages.h).
void Pipeline::add_ps_stages(Op& op) {
  const OpRequest& r = op.req;
  const int self = control_ ? control_->self() : 0;
  uint64_t inline_bytes = options_.inline_bytes;
  if (!ps_) {
    op.failing = true;
    op.status = Status(GSYNC_ERR_UNSUPPORTED, fmt::format("{}: this daemon has no parameter server",
                                                          r.describe()));
    return;
  }
  if (r.shape.opcode == proto::Opcode::kPsDeclare) {
    if (r.multi_host()) {
      add_cross_stage(op);  // the broadcast, then the declaration before the store
      return;
    }
    op.stages.push_back(std::make_unique<LocalReduceStage>(op.link(0), pool_, inline_bytes));
    op.stages.push_back(std::make_unique<PsDeclareStage>(op.link(1), *ps_, self));
    return;
  }
  int at = 0;
  if (FoldStage::needed(r))
    op.stages.push_back(std::make_unique<FoldStage>(op.link(at++), pool_, inline_bytes, 0));
  op.stages.push_back(std::make_unique<PsRequestStage>(op.link(at++), *ps_));
  if (r.shape.opcode != proto::Opcode::kPush)
    op.stages.push_back(std::make_unique<StoreStage>(op.link(at++), pool_, inline_bytes));
}

// First the job's own choice, then the daemon's config, then the tuning
// table the job started with, then the built-in rule (build_plan). Every
// host of the op sees the same job, config and table, so they agree; if
// they do not, the op fails naming both plans (collective/op_checks.cc).
const char* Pipeline::choose_plan(const OpRequest& r, collective::PlanInputs* in) const {
  in->algorithm = options_.algorithm;
  in->chunk_bytes = options_.chunk_bytes;
  if (r.plan.any()) {
    if (r.plan.algo != proto::kAlgoAuto) in->algorithm = proto::kAlgoNames[r.plan.algo];
    if (r.plan.chunk_bytes != 0) in->chunk_bytes = r.plan.chunk_bytes;
    return "job";
  }
  if (in->algorithm != "auto" || in->chunk_bytes != 0) return "config";
  if (!r.tuning || r.tuning->empty()) return "rule";
  // A host whose job holds another table (loaded on some hosts only, or a
  // job made again on one host after a new load): all plan by the rule.
  if (!control_->job_tuning_agrees(r.job)) return "rule (the hosts' tuning tables differ)";
  std::vector<std::string> hosts;
  for (const auto& p : in->parts) hosts.push_back(control_->host_id(p.host));
  auto tuned = r.tuning->lookup(hosts, in->shape.bytes());
  if (!tuned) return "rule";
  in->algorithm = proto::kAlgoNames[tuned->algo];
  in->chunk_bytes = tuned->chunk_bytes;
  return "tuned";
}

void Pipeline::add_cross_stage(Op& op) {
  const OpRequest& r = op.req;
  const bool declare = r.shape.opcode == proto::Opcode::kPsDeclare;
  collective::PlanInputs in;
  in.shape = r.shape;
  if (declare) {
    // A declaration moves as the broadcast of rank 0's values.
    in.shape.opcode = proto::Opcode::kBroadcast;
    in.shape.ps = {};
  }
  for (int h : r.hosts) {
    if (h == control_->self()) in.self = static_cast<int>(in.parts.size());
    if (h == r.root_host) in.root_participant = static_cast<int>(in.parts.size());
    in.parts.push_back({h, control_->rack_of(h)});
  }
  const char* source = choose_plan(r, &in);
  PlanKey key{r.job, r.id.key, in.shape, r.epoch};
  Status err;
  PlanLease lease = plans_->lease(key, in, wire_buffer(r), &err);
  if (!lease) {
    op.failing = true;
    op.status = Status(err.code(), fmt::format("{}: {}", r.describe(), err.message()));
    return;
  }
  const collective::Plan& plan = *lease.plan;
  // Compressed only when packed: a small op that goes eagerly goes raw.
  op.route = {collective::algo_name(plan.algo),
              plan.packed ? plan.codec.codec : proto::Codec::kNone};
  op.plan = fmt::format("{}; {}", plan.describe(), source);
  bool fold = FoldStage::needed(r);
  bool store = r.shape.opcode != proto::Opcode::kBarrier && r.shape.count > 0;
  int at = 0;
  uint64_t unit = !plan.eager && plan.nchunks > 1 ? plan.chunk_elems : 0;
  if (fold)
    op.stages.push_back(
        std::make_unique<FoldStage>(op.link(at++), pool_, options_.inline_bytes, unit));
  const bool staged = r.staging.ptr != nullptr;
  // A broadcast's root host sends its data and gets nothing back; the
  // others receive only (copy_stage.h).
  const bool root_here = r.root_host == control_->self();
  if (staged)
    op.stages.push_back(std::make_unique<CopyStage>(op.link(at++), CopyStage::Way::kToHost,
                                                    CopyStage::wire_pair(r), unit,
                                                    copies_from_root(r) && !root_here));
  WireLog* wire = nullptr;
  if (options_.record) {
    if (!spare_wire_.empty()) {
      op.wire = std::move(spare_wire_.back());
      spare_wire_.pop_back();
    }
    op.wire.reset();
    wire = &op.wire;
  }
  op.stages.push_back(
      std::make_unique<CrossStage>(op.link(at++), *engine_, *plans_, std::move(lease), wire,
                                   &op.hosts));
  if (staged)
    op.stages.push_back(std::make_unique<CopyStage>(op.link(at++), CopyStage::Way::kToDevice,
                                                    CopyStage::wire_pair(r), 0,
                                                    copies_from_root(r) && root_here));
  if (declare) op.stages.push_back(std::make_unique<PsDeclareStage>(op.link(at++), *ps_, control_->self()));
  if (GuardStage::wanted(r))
    op.stages.push_back(std::make_unique<GuardStage>(op.link(at++), pool_, guards_));
  if (store)
    op.stages.push_back(std::make_unique<StoreStage>(op.link(at++), pool_, options_.inline_bytes));
}

void Pipeline::run(Op& op) {
  // Last first: each stage's downstream is ready before it produces (the
  // cross-host stage's rendezvous goes out before the fold starts). The
  // stages begin when the pipeline took the op: its start time, read once
  // (now, for an op that waited for its pinned memory).
  const Clock::time_point now = !options_.record ? Clock::time_point{}
                                : op.waited     ? Clock::now()
                                                : op.started;
  for (int i = static_cast<int>(op.stages.size()) - 1; i >= 0 && !op.failing; i--) {
    op.states[size_t(i)].state = Op::State::kActive;
    op.states[size_t(i)].times.begun = now;
    op.stages[size_t(i)]->begin();
  }
  if (!op.failing && !op.stages.empty()) {
    op.states[0].times.first_input = now;
    op.stages[0]->ready(0, op.req.shape.count);
    if (!op.failing) op.stages[0]->input_done();
  }
  maybe_end(op);
}

void Pipeline::emit(Op& op, int stage, uint64_t begin, uint64_t end,
                    const std::vector<uint64_t>* gpu_tasks) {
  size_t next = size_t(stage) + 1;
  if (op.failing || next >= op.stages.size()) return;
  auto& times = op.states[next].times;
  if (times.first_input == Clock::time_point{}) times.first_input = stamp();
  if (gpu_tasks != nullptr)
    op.stages[next]->ready_queued(begin, end, *gpu_tasks);
  else
    op.stages[next]->ready(begin, end);
}

void Pipeline::stage_finished(Op& op, int stage) {
  auto& st = op.states[size_t(stage)];
  if (st.state != Op::State::kActive && st.state != Op::State::kAborting) return;
  st.state = op.failing ? Op::State::kQuiet : Op::State::kFinished;
  st.times.finished = stamp();
  size_t next = size_t(stage) + 1;
  if (!op.failing && next < op.stages.size()) op.stages[next]->input_done();
  maybe_end(op);
}

void Pipeline::stage_failed(Op& op, int stage, const Status& st) {
  (void)stage;
  if (!op.failing) {
    op.failing = true;
    op.status = st;
  }
  for (size_t i = 0; i < op.stages.size(); i++) {
    if (op.states[i].state != Op::State::kActive) continue;
    op.states[i].state = Op::State::kAborting;
    op.stages[i]->abort(op.status);
  }
  maybe_end(op);
}

void Pipeline::stage_quiet(Op& op, int stage) {
  auto& st = op.states[size_t(stage)];
  if (st.state == Op::State::kFinished) return;
  st.state = Op::State::kQuiet;
  maybe_end(op);
}

void Pipeline::maybe_end(Op& op) {
  // An op waiting for pinned memory ends then (staging_arrived), unless it
  // fails first: nothing of it runs yet, and what comes later is released.
  if (op.ended || (op.staging > 0 && !op.failing)) return;
  for (const auto& s : op.states) {
    if (op.failing ? s.state == Op::State::kActive || s.state == Op::State::kAborting
                   : s.state != Op::State::kFinished)
      return;
  }
  op.ended = true;
  ended_.push_back(op.serial);
  if (!reap_scheduled_) {
    reap_scheduled_ = true;
    loop_.defer([this] { reap(); });
  }
}

void Pipeline::reap() {
  reap_scheduled_ = false;
  std::vector<uint64_t> ended;
  ended.swap(ended_);
  for (uint64_t serial : ended) {
    auto it = ops_.find(serial);
    if (it == ops_.end()) continue;
    std::unique_ptr<Op> op = std::move(it->second);
    ops_.erase(it);
    Done done = std::move(op->done);
    Status st = op->status;
    // One OpTimes for every op, each field set here: the memory of its
    // stages stays, so recording allocates nothing for them per op.
    OpTimes& times = reaped_;
    times.started = op->started;
    times.ended = Clock::now();
    times.value = op->value;
    times.route = op->route;
    times.plan = std::move(op->plan);
    // Moved, not copied: the op goes next.
    times.stages.clear();
    for (size_t i = 0; i < op->stages.size() && options_.record; i++)
      times.stages.push_back({op->stages[i]->name(), std::move(op->states[i].times)});
    times.wire = std::move(op->wire);
    times.hosts = op->hosts;
    release_staging(op->req);
    op.reset();  // stages go first: a cached plan is back before the next step starts
    if (done) done(serial, st, times);
    // Kept, not freed: the next cross-host op records into it.
    if (times.wire.reserved() && spare_wire_.size() < kSpareWireLogs)
      spare_wire_.push_back(std::move(times.wire));
  }
}

void Pipeline::abort(uint64_t serial, const Status& why) {
  Op* op = find(serial);
  if (op == nullptr) return;
  if (op->staging > 0)
    fail_staging(*op, why);
  else
    stage_failed(*op, -1, why);
}

void Pipeline::abort_unbegun(const std::string& job, const proto::OpId& id, const Status& why) {
  if (engine_) engine_->abort_unbegun(job, id, why);
}

bool Pipeline::waits_on_peers(uint64_t serial) const {
  Op* op = find(serial);
  if (!op || op->failing) return false;
  int c = op->current();
  return c >= 0 && op->stages[size_t(c)]->waits_on_peers();
}

bool Pipeline::waits_for_staging(uint64_t serial) const {
  Op* op = find(serial);
  return op && !op->failing && op->staging > 0;
}

std::string Pipeline::waiting_for(uint64_t serial) const {
  Op* op = find(serial);
  if (!op) return "";
  if (op->staging > 0) return kStagingWait;
  int c = op->current();
  return c < 0 ? "nothing" : op->stages[size_t(c)]->waiting_for();
}

std::string Pipeline::overdue(uint64_t serial, std::chrono::milliseconds late) const {
  if (waits_for_staging(serial))
    return fmt::format("waiting for {} (made on the GPU thread)", kStagingWait);
  if (!waits_on_peers(serial)) return "";
  const Op& op = *find(serial);
  const Stage& s = *op.stages[size_t(op.current())];
  return late < s.timeout_grace() ? "" : "in the cross-host step: " + s.waiting_for();
}

OpView Pipeline::view(uint64_t serial) const {
  OpView v;
  Op* op = find(serial);
  if (!op) return v;
  v.serial = serial;
  v.started = op->started;
  int c = op->current();
  v.stage = op->failing ? "failing"
            : op->staging > 0 ? "staging"
            : c < 0 ? "done"
                    : op->stages[size_t(c)]->name();
  v.waiting_for = op->staging > 0 ? kStagingWait
                  : c < 0         ? ""
                                  : op->stages[size_t(c)]->waiting_for();
  return v;
}

Stage* Pipeline::stage_of(uint64_t tag, Op** op) const {
  *op = find(tag >> 8);
  const size_t stage = tag & 0xff;
  return *op && stage < (*op)->stages.size() ? (*op)->stages[stage].get() : nullptr;
}

void Pipeline::on_pool_events() {
  pool_.take_events(&progress_, &finished_);
  Op* op = nullptr;
  for (const auto& p : progress_)
    if (Stage* s = stage_of(p.tag, &op)) s->task_progress(p.task, p.done);
  for (const auto& f : finished_)
    if (Stage* s = stage_of(f.tag, &op)) s->task_done(f.task);
}

GpuWork* Pipeline::gpu_work() {
  if (!gpu_) {
    gpu_ = std::make_unique<GpuWork>();
    // Without its pipe (no fd left) every task fails to queue and ends
    // through the fault check below.
    if (gpu_->done_fd() >= 0)
      loop_.add(gpu_->done_fd(), EPOLLIN, [this](uint32_t) { on_gpu_events(false); });
    // A kernel's fault stops its stream's notes: looked for while tasks
    // are in flight, often enough that a failed op ends well within a step.
    loop_.every(std::chrono::milliseconds(100), [this] {
      if (gpu_->in_flight() > 0) on_gpu_events(true);
    }, "gpu fault check");
  }
  return gpu_.get();
}

void Pipeline::on_gpu_events(bool check_faults) {
  Op* op = nullptr;
  for (const auto& f : gpu_->take(check_faults)) {
    Stage* s = stage_of(f.tag, &op);
    if (s == nullptr) continue;
    if (!f.status) stage_failed(*op, static_cast<int>(f.tag & 0xff), f.status);
    s->task_done(f.task);
  }
}

void Pipeline::arena_closed(uint64_t arena) {
  if (plans_) plans_->arena_closed(arena);
}

void Pipeline::job_closed(const std::string& job) {
  staging_.job_closed(job);
  if (plans_) plans_->job_closed(job);
  if (ps_) ps_->job_closed(job);
  guards_.job_closed(job);
}

uint64_t Pipeline::error_feedback_bytes(const std::string& job) const {
  return plans_ ? plans_->error_feedback_bytes(job) : 0;
}

}  // namespace gsync::pipeline
