// SPDX-License-Identifier: Apache-2.0
#include "daemon/pipeline/cross_stage.h"

#include "daemon/pipeline/local_stages.h"
#include "daemon/pipeline/op.h"

namespace gsync::pipeline {

CrossStage::CrossStage(StageLink link, collective::Engine& engine, PlanCache& plans,
                       PlanLease lease, WireLog* wire, HostArrivals* hosts)
    : Stage(link),
      engine_(engine),
      plans_(plans),
      lease_(std::move(lease)),
      wire_(wire),
      hosts_(hosts) {}

CrossStage::~CrossStage() {
  // An op that never began (it failed before) still gives its plan back.
  if (lease_) plans_.give_back(std::move(lease_), false, nullptr);
}

uint32_t CrossStage::token() const { return op_token(link_.serial()); }

uint64_t CrossStage::unit() const {
  const collective::Plan& p = *lease_.plan;
  return !p.eager && p.nchunks > 1 ? p.chunk_elems : 0;
}

void CrossStage::begin() {
  const OpRequest& r = link_.request();
  collective::EngineOp op;
  op.job = r.job;
  op.id = r.id;
  op.token = token();
  op.plan = lease_.plan;
  op.data = wire_buffer(r).ptr;
  op.wire = wire_;
  op.hosts = hosts_;
  for (const auto& c : r.locals) op.weight_local += c.weight;
  begun_ = true;
  collective::EngineCallbacks cb;
  cb.running = [this] { link_.mark("rendezvous"); };
  cb.chunk_done = [this](uint64_t b, uint64_t e, double weight_total) {
    link_.set_weight_total(weight_total);
    link_.emit(b, e);
  };
  cb.done = [this](const Status& st, double weight_total) { on_done(st, weight_total); };
  engine_.begin(op, std::move(cb));
}

void CrossStage::ready(uint64_t, uint64_t end) {
  if (ended_ || end <= ready_upto_) return;
  ready_upto_ = end;
  engine_.local_ready_upto(token(), end);
}

void CrossStage::input_done() {
  if (ended_) return;
  ready_upto_ = link_.request().shape.count;
  engine_.local_ready_upto(token(), ready_upto_);
}

void CrossStage::abort(const Status& why) {
  if (!begun_) {
    ended_ = true;
    plans_.give_back(std::move(lease_), false, [link = link_]() mutable { link.quiet(); });
    return;
  }
  if (!ended_) {
    engine_.abort(token(), why);  // on_done follows, with why
    return;
  }
  // Ended with a failure of its own: quiet once its plan is retired.
}

void CrossStage::on_done(const Status& st, double weight_total) {
  ended_ = true;
  link_.set_weight_total(weight_total);
  if (st) {
    plans_.give_back(std::move(lease_), true, nullptr);
    link_.finished();
    return;
  }
  // A peer may still write into the plan's regions: the op ends only once
  // they are retired (verbs: every peer acknowledged).
  plans_.give_back(std::move(lease_), false, [link = link_]() mutable { link.quiet(); });
  link_.failed(st);
}

std::string CrossStage::waiting_for() const {
  if (ended_) return "its regions to be retired";
  return engine_.waiting_for(token());
}

std::chrono::milliseconds CrossStage::timeout_grace() const {
  return ended_ ? std::chrono::milliseconds(0) : engine_.timeout_grace(token());
}

}  // namespace gsync::pipeline
