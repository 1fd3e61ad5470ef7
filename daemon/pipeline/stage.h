// SPDX-License-Identifier: Apache-2.0
//
// A stage of the op pipeline: one step of an op's life (the local fold, the
// cross-host schedule, the store into the ranks' buffers, and later codecs,
// the parameter server's apply, the anomaly check). Stages form a chain;
// each is told which ranges of the tensor its upstream has finished and
// tells its downstream in turn, so stages overlap chunk by chunk
// (docs/architecture.md, "The op pipeline").
//
// The contract, all on the event thread:
//   begin()          once, before anything else; every stage of the op is
//                    begun, last first, before the first gets input
//   ready(b, e)      upstream finished elements [b, e); ranges come in
//                    order and never overlap
//   input_done()     upstream finished everything
//   abort(st)        the op fails: stop, and call link.quiet() once none
//                    of the stage's work still touches a buffer (at once
//                    or later, exactly once)
// and the stage reports through its StageLink: emit(b, e) for what it
// finished, finished() once it has handled all its input and nothing of
// its own is in flight, failed(st) to fail the op (abort follows).
//
// GPU work that follows GPU work need not wait for a round trip through
// the event thread: a stage whose downstream takes_queued() may pass a
// range on as soon as its GPU work for it is queued (emit_queued, naming
// those GPU tasks), and the downstream orders its own GPU work after them
// on the device (gpu_work.h). The range's own end still comes to the
// upstream as task_done, which it needs to finish.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "daemon/core/status.h"

namespace gsync::pipeline {

class GpuWork;
class Op;
struct OpRequest;

// The token that names an op in the immediates and cookies of its writes:
// its serial's low 31 bits (bit 31 of the immediate's upper half, bit 63,
// tells the parameter server's writes from the engine's; cluster/messages.h).
constexpr uint32_t op_token(uint64_t serial) { return static_cast<uint32_t>(serial & 0x7fffffffu); }

// What a stage sees of its op and how it reports progress.
class StageLink {
 public:
  StageLink(Op& op, int index) : op_(op), index_(index) {}
  const OpRequest& request() const;
  uint64_t serial() const;
  int index() const { return index_; }
  // The sum of all ranks' weights, set by the stage that learns it (the
  // cross-host stage), read by the store (weighted average).
  double weight_total() const;
  void set_weight_total(double w);
  // The op's result beside its data, in its completion (a declaration's
  // resume clock).
  void set_value(uint64_t v);
  // A word beside a completion that is not a failure (a push whose clock
  // the anomaly guard rolled back): the client's text of the request.
  void note(std::string text);
  // The pool tag of this stage's tasks (Pipeline::on_pool_events, and
  // on_gpu_events for the GPU's).
  uint64_t pool_tag() const;
  // The GPU work of the daemon (made at first use).
  GpuWork* gpu() const;

  void emit(uint64_t begin, uint64_t end);
  // Whether the next stage takes ranges whose GPU work is queued, not
  // ended (Stage::takes_queued).
  bool next_takes_queued() const;
  // [begin, end) is queued on the GPU as tasks gpu_tasks: the next stage
  // orders its GPU work after them (only where next_takes_queued()).
  void emit_queued(uint64_t begin, uint64_t end, const std::vector<uint64_t>& gpu_tasks);
  // A moment of the stage's own, kept in its StageTimes (name: a literal).
  void mark(const char* name);
  void finished();
  void failed(const Status& st);
  void quiet();

 private:
  Op& op_;
  int index_;
};

class Stage {
 public:
  explicit Stage(StageLink link) : link_(link) {}
  virtual ~Stage() = default;
  Stage(const Stage&) = delete;
  Stage& operator=(const Stage&) = delete;

  virtual const char* name() const = 0;
  virtual void begin() {}
  virtual void ready(uint64_t begin, uint64_t end) = 0;
  virtual void input_done() = 0;
  virtual void abort(const Status& why) = 0;
  // A pool task of this stage made progress ([0, done) of it) or ended.
  virtual void task_progress(uint64_t task, uint64_t done) {
    (void)task;
    (void)done;
  }
  virtual void task_done(uint64_t task) { (void)task; }
  // A stage whose work on a range runs on the GPU: it takes ranges whose
  // upstream GPU work is queued and not ended (ready_queued).
  virtual bool takes_queued() const { return false; }
  virtual void ready_queued(uint64_t begin, uint64_t end, const std::vector<uint64_t>& gpu_tasks) {
    (void)gpu_tasks;
    ready(begin, end);
  }

  // The granularity in elements this stage wants its input in (0: all of
  // it at once); the upstream reports progress in steps of it.
  virtual uint64_t unit() const { return 0; }
  // Whether this stage, while it is the op's current one, waits on other
  // hosts (and so may be timed out); a local stage ends on its own.
  virtual bool waits_on_peers() const { return false; }
  // For timeouts and gsyncctl: what the stage waits for now.
  virtual std::string waiting_for() const = 0;
  virtual std::chrono::milliseconds timeout_grace() const { return {}; }

 protected:
  StageLink link_;
};

}  // namespace gsync::pipeline
