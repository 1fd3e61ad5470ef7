// SPDX-License-Identifier: Apache-2.0
#include "daemon/pipeline/ps_stages.h"

#include "daemon/pipeline/local_stages.h"
#include "daemon/pipeline/op.h"

namespace gsync::pipeline {

namespace {
// A request of the op's tensor, as this host's ranks hand it (the opcode,
// clock, weight and learning rate are the caller's).
ps::Request request_of(const OpRequest& r, uint64_t serial) {
  ps::Request q;
  q.job = r.job;
  q.key = r.id.key;
  q.count = r.shape.count;
  q.dtype = r.shape.dtype;
  q.data = host_buffer(r).ptr;
  q.owner = host_buffer(r).owner;
  q.token = op_token(serial);
  return q;
}

// A service request's end as its stage takes it: quiet when the op is
// being aborted, failed when the request failed; true when that was all.
bool ended_early(StageLink& link, bool aborting, const Status& st) {
  if (aborting) {
    link.quiet();
    return true;
  }
  if (!st) {
    link.failed(st);  // which aborts the stage; the service is done with the op
    return true;
  }
  return false;
}

// The job's hosts; a job on this host alone has just this one.
std::vector<int> hosts_of(const OpRequest& r, int self_host) {
  return r.multi_host() ? r.hosts : std::vector<int>{self_host};
}
}  // namespace

// ---------------------------------------------------------------- declare

void PsDeclareStage::input_done() {
  const OpRequest& r = link_.request();
  ps::Declaration d;
  d.job = r.job;
  d.key = r.id.key;
  d.count = r.shape.count;
  d.dtype = r.shape.dtype;
  d.opts = r.shape.ps;
  d.sync = r.sync;
  d.hosts = hosts_of(r, self_host_);
  d.init = host_buffer(r).ptr;
  d.guard = r.guard;
  state_->waiting = true;
  service_.declare(d, [this, link = link_, state = state_](const Status& st) mutable {
    state->waiting = false;
    if (state->gone) return;
    if (!st) {
      link.failed(st);
      return;
    }
    const OpRequest& r = link.request();
    if (uint64_t clock = service_.resumed_clock(r.job, r.id.key); clock != 0) {
      pull(clock);
      return;
    }
    link.emit(0, r.shape.count);
    link.finished();
  });
}

void PsDeclareStage::pull(uint64_t clock) {
  const OpRequest& r = link_.request();
  link_.set_value(clock);
  ps::Request q = request_of(r, link_.serial());
  q.clock = clock;
  q.opcode = proto::Opcode::kPull;
  pulling_ = true;
  service_.begin(q, [this](const Status& st) { on_pulled(st); });
}

void PsDeclareStage::on_pulled(const Status& st) {
  pulling_ = false;
  if (ended_early(link_, aborting_, st)) return;
  link_.emit(0, link_.request().shape.count);
  link_.finished();
}

void PsDeclareStage::abort(const Status& why) {
  if (pulling_) {
    aborting_ = true;
    service_.abort(op_token(link_.serial()), why);  // on_pulled follows, once quiet
    return;
  }
  // The declaration goes on (its key stays half made until the job
  // closes); the op is quiet at once: the declaration copied what it needed
  // of the rank's buffer.
  state_->gone = true;
  link_.quiet();
}

std::string PsDeclareStage::waiting_for() const {
  if (pulling_) return service_.waiting_for(op_token(link_.serial()));
  return state_->waiting ? "the job's other hosts to declare the key" : "the initial values";
}

// ---------------------------------------------------------------- requests

void PsRequestStage::input_done() {
  const OpRequest& r = link_.request();
  ps::Request q = request_of(r, link_.serial());
  q.clock = r.id.step;
  q.opcode = r.shape.opcode;
  for (const auto& c : r.locals) q.weight += c.weight;
  q.lr = r.shape.lr;
  begun_ = true;
  service_.begin(q, [this](const Status& st) { on_done(st); });
}

void PsRequestStage::on_done(const Status& st) {
  ended_ = true;
  if (ended_early(link_, aborting_, st)) return;
  if (!st.message().empty()) {
    // The clock was rolled back (ps/guard.cc): gsync_ps_rolled_back.
    link_.set_value(1);
    link_.note(st.message());
  }
  if (link_.request().shape.opcode != proto::Opcode::kPush)
    link_.emit(0, link_.request().shape.count);
  link_.finished();
}

void PsRequestStage::abort(const Status& why) {
  if (!begun_ || ended_) {
    link_.quiet();
    return;
  }
  aborting_ = true;
  service_.abort(op_token(link_.serial()), why);  // on_done follows, once quiet
}

std::string PsRequestStage::waiting_for() const {
  if (!begun_) return "the fold of this host's ranks";
  return service_.waiting_for(op_token(link_.serial()));
}

}  // namespace gsync::pipeline
