// SPDX-License-Identifier: Apache-2.0
//
// The anomaly guard's stage (docs/fault-tolerance.md): after the reduction
// (on one host, the local reduce; on several, the cross-host stage) and
// before the result is stored into the other ranks, the norm of the
// reduced values as this host holds them, and the book's verdict
// (guard_book.h). The norm is summed on the work pool in grains of fixed
// size, each in double in index order, and the grains' sums added in grain
// order: the same bits on every host whatever thread ran which grain. An
// anomaly fails the op with GSYNC_ERR_ANOMALY on this host's ranks; every
// other host reaches the same verdict on its own.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "daemon/core/guard_book.h"
#include "daemon/pipeline/stage.h"
#include "daemon/pipeline/work_pool.h"

namespace gsync::pipeline {

class GuardStage final : public Stage {
 public:
  GuardStage(StageLink link, WorkPool& pool, GuardBook& book) : Stage(link), pool_(pool), book_(book) {}
  const char* name() const override { return "guard"; }
  void ready(uint64_t, uint64_t) override {}
  void input_done() override;
  void abort(const Status& why) override;
  void task_done(uint64_t task) override;
  std::string waiting_for() const override { return "the anomaly guard's norm of the result"; }

  // Whether an op is guarded: a job with the guard on, an allreduce that
  // sums or averages floating-point values.
  static bool wanted(const OpRequest& r);
  // Whether the fold marks a local rank's non-finite values with the rank
  // (reduce/nonfinite.h): for this stage's verdict, and for a guarded bsp
  // parameter server's (ps/guard.cc), which reads the marks of a push.
  static bool marks_ranks(const OpRequest& r);

 private:
  void decide();

  WorkPool& pool_;
  GuardBook& book_;
  std::shared_ptr<std::vector<double>> sums_;
  bool running_ = false, aborting_ = false;
};

}  // namespace gsync::pipeline
