// SPDX-License-Identifier: Apache-2.0
//
// The cross-host stage: this host's contribution reduced with every other
// host's by the schedule engine (daemon/collective/engine.h), in place, with
// the plan leased from the plan cache. Its input is the local fold, chunk by
// chunk; it emits each chunk as the engine finishes it. On success the plan
// goes back to the cache with its regions registered, so the next step of
// the tensor pays no registration and no retirement; on failure the plan
// is evicted and the stage is quiet only once its regions are retired, so
// no late write of a peer can land in a buffer the client has back.
#pragma once

#include <memory>

#include "daemon/collective/engine.h"
#include "daemon/pipeline/plan_cache.h"
#include "daemon/pipeline/stage.h"

namespace gsync::pipeline {

class CrossStage final : public Stage {
 public:
  // wire: where the engine records the op's transfers (null: not
  // recorded); hosts: when each host's part was ready (null: not kept).
  CrossStage(StageLink link, collective::Engine& engine, PlanCache& plans, PlanLease lease,
             WireLog* wire = nullptr, HostArrivals* hosts = nullptr);
  ~CrossStage() override;
  const char* name() const override { return "cross-host"; }
  void begin() override;
  void ready(uint64_t begin, uint64_t end) override;
  void input_done() override;
  void abort(const Status& why) override;
  uint64_t unit() const override;
  bool waits_on_peers() const override { return true; }
  std::string waiting_for() const override;
  std::chrono::milliseconds timeout_grace() const override;

 private:
  void on_done(const Status& st, double weight_total);
  uint32_t token() const;

  collective::Engine& engine_;
  PlanCache& plans_;
  PlanLease lease_;
  WireLog* wire_;
  HostArrivals* hosts_;
  bool begun_ = false, ended_ = false;
  uint64_t ready_upto_ = 0;
};

}  // namespace gsync::pipeline
