// SPDX-License-Identifier: Apache-2.0
//
// The parameter server's stages (daemon/ps/service.h,
// docs/parameter-server.md):
//   a declaration   [broadcast of rank 0's values] -> PsDeclare -> Store
//   a push or pull  Fold (pushes: the ranks' gradients, weighed) -> PsRequest
//                   -> Store (pulls: the parameters into every rank)
// PsDeclare takes the whole tensor once it is in (input_done) and makes
// this host's shard and regions; PsRequest hands the host's op to the
// service and emits the tensor when the parameters are in.
#pragma once

#include <memory>
#include <string>

#include "daemon/pipeline/stage.h"
#include "daemon/ps/service.h"

namespace gsync::pipeline {

class PsDeclareStage final : public Stage {
 public:
  PsDeclareStage(StageLink link, ps::Service& service, int self_host)
      : Stage(link), service_(service), self_host_(self_host) {}
  ~PsDeclareStage() override { state_->gone = true; }
  // A declaration that resumed from a checkpoint (docs/fault-tolerance.md)
  // pulls the parameters of the clock it resumed from into the ranks'
  // buffers, and completes with that clock as its value.
  const char* name() const override { return "ps-declare"; }
  void ready(uint64_t, uint64_t) override {}
  void input_done() override;
  void abort(const Status& why) override;
  bool waits_on_peers() const override { return true; }
  std::string waiting_for() const override;

 private:
  ps::Service& service_;
  int self_host_;
  // Shared with the declaration's callback, which may come after the op
  // was aborted and this stage destroyed (a host that never declares).
  struct State {
    bool waiting = false, gone = false;
  };
  std::shared_ptr<State> state_ = std::make_shared<State>();
  void pull(uint64_t clock);
  void on_pulled(const Status& st);
  bool pulling_ = false, aborting_ = false;
};

class PsRequestStage final : public Stage {
 public:
  PsRequestStage(StageLink link, ps::Service& service) : Stage(link), service_(service) {}
  const char* name() const override { return "ps"; }
  void ready(uint64_t, uint64_t) override {}
  void input_done() override;
  void abort(const Status& why) override;
  bool waits_on_peers() const override { return true; }
  std::string waiting_for() const override;

 private:
  void on_done(const Status& st);

  ps::Service& service_;
  bool begun_ = false, ended_ = false, aborting_ = false;
};

}  // namespace gsync::pipeline
