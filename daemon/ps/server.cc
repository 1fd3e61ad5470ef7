// SPDX-License-Identifier: Apache-2.0
#include "daemon/ps/server.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "daemon/reduce/optimizer.h"

namespace gsync::ps {

ParamServer::ParamServer(const proto::PsOptions& opts, proto::Sync sync, proto::DType dtype,
                         Shard shard, int workers, const void* init)
    : opts_(opts), sync_(sync), dtype_(dtype), shard_(shard) {
  if (sync_.mode == proto::SyncMode::kSsp && sync_.staleness == 0) sync_ = proto::Sync{};
  size_t n = static_cast<size_t>(shard_.count());
  p_.resize(n);
  reduce::to_f32(init, dtype_, n, p_.data());
  if (opts_.optimizer != proto::Optimizer::kSgd || opts_.momentum != 0) m_.assign(n, 0.0f);
  if (opts_.optimizer != proto::Optimizer::kSgd) v_.assign(n, 0.0f);
  grad_.resize(n);
  next_.assign(static_cast<size_t>(std::max(workers, 1)), 0);
  last_weight_.assign(next_.size(), 0.0);
  pending_.resize(next_.size());
}

Status ParamServer::push(int w, uint64_t clock, double weight, float lr, const void* data,
                         const std::string& who) {
  if (w < 0 || w >= workers())
    return Status(GSYNC_ERR_PROTOCOL, fmt::format("{}: worker {} of {}", who, w, workers()));
  if (!(std::isfinite(weight) && weight > 0))
    return Status(GSYNC_ERR_INVALID,
                  fmt::format("{}: weight {} must be finite and > 0", who, weight));
  if (clock != next_[size_t(w)])
    return Status(GSYNC_ERR_INVALID,
                  fmt::format("{}: clock {} {}; this worker's next clock is {} (clocks go up by "
                              "one from 0)",
                              who, clock, clock < next_[size_t(w)] ? "goes backwards" : "skips ahead",
                              next_[size_t(w)]));
  if (sync_.mode == proto::SyncMode::kBsp && clock != bsp_clock_)
    // Its previous push has not been applied yet (the other workers have
    // not all pushed that clock): its data is still in the slot this one
    // would take. A worker waits for its push's answer before the next.
    return Status(GSYNC_ERR_INVALID,
                  fmt::format("{}: clock {} before clock {} is complete (bsp)", who, clock,
                              bsp_clock_));
  next_[size_t(w)]++;
  last_weight_[size_t(w)] = weight;
  if (sync_.mode == proto::SyncMode::kBsp) {
    pending_[size_t(w)] = Pending{data, weight, lr, true};
    if (std::all_of(pending_.begin(), pending_.end(), [](const Pending& p) { return p.in; }))
      apply_bsp_clock();
    return Status::ok();
  }
  // asp, ssp: applied now, as one worker's share of a step.
  double step_weight = 0;
  for (double lw : last_weight_) step_weight += lw > 0 ? lw : weight;
  reduce::to_f32(data, dtype_, grad_.size(), grad_.data());
  apply(grad_.data(), static_cast<float>(1.0 / step_weight), lr);
  updates_++;
  return Status::ok();
}

void ParamServer::apply_bsp_clock() {
  // In worker order, so every run gives the same bits.
  reduce::to_f32(pending_[0].data, dtype_, grad_.size(), grad_.data());
  double total = pending_[0].weight;
  float lr = pending_[0].lr;
  for (size_t w = 1; w < pending_.size(); w++) {
    reduce::add_f32(pending_[w].data, dtype_, grad_.size(), grad_.data());
    total += pending_[w].weight;
    if (lr == 0) lr = pending_[w].lr;
  }
  apply(grad_.data(), static_cast<float>(1.0 / total), lr);
  updates_ += pending_.size();
  for (auto& p : pending_) p = Pending{};
  bsp_clock_++;
}

void ParamServer::apply(const float* grad, float scale, float lr) {
  const float rate = lr > 0 ? lr : opts_.lr;
  t_++;
  size_t n = p_.size();
  if (opts_.optimizer == proto::Optimizer::kSgd) {
    reduce::SgdArgs a;
    a.lr = rate;
    a.momentum = opts_.momentum;
    a.weight_decay = opts_.weight_decay;
    a.first = t_ == 1;
    reduce::sgd_step(p_.data(), m_.data(), grad, scale, n, a);
    return;
  }
  reduce::AdamArgs a;
  a.lr = rate;
  a.beta1 = opts_.beta1;
  a.beta2 = opts_.beta2;
  a.eps = opts_.eps;
  a.weight_decay = opts_.weight_decay;
  a.decoupled = opts_.optimizer == proto::Optimizer::kAdamW;
  a.t = t_;
  reduce::adam_step(p_.data(), m_.data(), v_.data(), grad, scale, n, a);
}

bool ParamServer::may_pull(uint64_t step) const {
  switch (sync_.mode) {
    case proto::SyncMode::kAsp:
      return true;
    case proto::SyncMode::kBsp:
      return bsp_clock_ >= step;
    case proto::SyncMode::kSsp: {
      uint64_t s = sync_.staleness;
      if (step <= s) return true;
      uint64_t need = step - s;  // every push up to clock step - 1 - s
      return std::all_of(next_.begin(), next_.end(), [need](uint64_t n) { return n >= need; });
    }
  }
  return false;
}

bool ParamServer::applied(int w, uint64_t clock) const {
  if (sync_.mode == proto::SyncMode::kBsp) return bsp_clock_ > clock;
  return next_[size_t(w)] > clock;
}

void ParamServer::read(void* dst) const { reduce::from_f32(p_.data(), p_.size(), dtype_, dst); }

}  // namespace gsync::ps
