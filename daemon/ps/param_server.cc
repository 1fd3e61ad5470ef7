// SPDX-License-Identifier: Apache-2.0
#include "daemon/ps/param_server.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "daemon/reduce/nonfinite.h"
#include "daemon/reduce/optimizer.h"

namespace gsync::ps {

namespace {
// Elements summed and stepped at a time: 64 KiB of fp32, in L2 beside the
// inputs' and the state's lines.
constexpr size_t kBlock = 16384;
}  // namespace

ParamServer::ParamServer(const proto::PsOptions& opts, proto::Sync sync, proto::DType dtype,
                         Shard shard, int workers, const void* init)
    : opts_(opts), sync_(sync), dtype_(dtype), shard_(shard) {
  if (sync_.mode == proto::SyncMode::kSsp && sync_.staleness == 0) sync_ = proto::Sync{};
  size_t n = static_cast<size_t>(shard_.count());
  p_.resize(n);
  reduce::to_f32(init, dtype_, n, p_.data());
  if (opts_.optimizer != proto::Optimizer::kSgd || opts_.momentum != 0) m_.assign(n, 0.0f);
  if (opts_.optimizer != proto::Optimizer::kSgd) v_.assign(n, 0.0f);
  grad_.resize(std::min(n, kBlock));
  next_.assign(static_cast<size_t>(std::max(workers, 1)), 0);
  last_weight_.assign(next_.size(), 0.0);
  pending_.resize(next_.size());
}

ParamServer::~ParamServer() {
  // The checkpoint writer may still be copying from these arrays: it gets
  // the rest of the copy before they go.
  before_write(0, p_.size());
}

void ParamServer::before_write(uint64_t begin, uint64_t end) {
  if (!snapshot_) return;
  snapshot_->before_write(begin, end);
  if (snapshot_->complete()) snapshot_.reset();
}

uint64_t ParamServer::checkpoint_clock() const {
  if (sync_.mode == proto::SyncMode::kBsp) return bsp_clock_;
  return *std::min_element(next_.begin(), next_.end());
}

std::shared_ptr<storage::Snapshot> ParamServer::snapshot() {
  // A snapshot still being copied is finished first: one at a time.
  before_write(0, p_.size());
  std::vector<const float*> arrays{p_.data()};
  if (!m_.empty()) arrays.push_back(m_.data());
  if (!v_.empty()) arrays.push_back(v_.data());
  snapshot_ = std::make_shared<storage::Snapshot>(std::move(arrays), p_.size());
  return snapshot_;
}

void ParamServer::set_guard(bool on) {
  guard_ = on && sync_.mode == proto::SyncMode::kBsp;
  if (!guard_) return;
  prev_p_.resize(p_.size());
  prev_m_.resize(m_.size());
  prev_v_.resize(v_.size());
}

void ParamServer::guard_block(size_t at, size_t len, const float* g, float scale) {
  std::copy(p_.begin() + long(at), p_.begin() + long(at + len), prev_p_.begin() + long(at));
  if (!m_.empty()) std::copy(m_.begin() + long(at), m_.begin() + long(at + len), prev_m_.begin() + long(at));
  if (!v_.empty()) std::copy(v_.begin() + long(at), v_.begin() + long(at + len), prev_v_.begin() + long(at));
  // Eight running sums pipeline; added in their order, the bits are the
  // same on every run.
  double s[8] = {};
  size_t i = 0;
  for (; i + 8 <= len; i += 8)
    for (int j = 0; j < 8; j++) {
      const double v = double(g[i + j] * scale);
      s[j] += v * v;
    }
  for (; i < len; i++) {
    const double v = double(g[i] * scale);
    s[0] += v * v;
  }
  double block = 0;
  for (double x : s) block += x;
  sumsq_ += block;
  // Whose gradient it was: the first rank a host's fold marked (its NaN's
  // payload survives the sum over workers and the widening to fp32).
  if (marked_ < 0 && !std::isfinite(block)) marked_ = reduce::marked_rank_widened(g, len, dtype_);
}

void ParamServer::rollback() {
  before_write(0, p_.size());
  std::copy(prev_p_.begin(), prev_p_.end(), p_.begin());
  std::copy(prev_m_.begin(), prev_m_.end(), m_.begin());
  std::copy(prev_v_.begin(), prev_v_.end(), v_.begin());
  t_ = prev_t_;
  updates_ = prev_updates_;
}

void ParamServer::restore(uint64_t clock, uint64_t steps, uint64_t updates, const float* payload) {
  before_write(0, p_.size());
  const size_t n = p_.size();
  std::copy(payload, payload + n, p_.begin());
  if (!m_.empty()) std::copy(payload + n, payload + 2 * n, m_.begin());
  if (!v_.empty()) std::copy(payload + 2 * n, payload + 3 * n, v_.begin());
  t_ = steps;
  updates_ = updates;
  std::fill(next_.begin(), next_.end(), clock);
  bsp_clock_ = clock;
  bsp_applied_ = 0;
  bsp_begun_ = false;
  for (auto& p : pending_) p = Pending{};
}

Status ParamServer::push(int w, uint64_t clock, double weight, float lr, const void* data,
                         const std::string& who) {
  if (w < 0 || w >= workers())
    return Status(GSYNC_ERR_PROTOCOL, fmt::format("{}: worker {} of {}", who, w, workers()));
  if (!(std::isfinite(weight) && weight >= 0))
    return Status(GSYNC_ERR_INVALID,
                  fmt::format("{}: weight {} must be finite and >= 0", who, weight));
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
  if (sync_.mode == proto::SyncMode::kBsp) {
    pending_[size_t(w)] = Pending{data, weight, lr, true};
    return Status::ok();
  }
  // A push of weight 0 is a step without data (a worker that leased no
  // batch): its clock counts, nothing changes, and the expected weight of
  // a step keeps the worker's last real one.
  if (weight == 0) return Status::ok();
  last_weight_[size_t(w)] = weight;
  // asp, ssp: applied now, as one worker's share of a step.
  double step_weight = 0;
  for (double lw : last_weight_) step_weight += lw > 0 ? lw : weight;
  t_++;
  apply(&data, 1, static_cast<float>(1.0 / step_weight), lr, 0, p_.size());
  updates_++;
  return Status::ok();
}

bool ParamServer::gathered() const {
  return sync_.mode == proto::SyncMode::kBsp &&
         std::all_of(pending_.begin(), pending_.end(), [](const Pending& p) { return p.in; });
}

void ParamServer::apply_upto(uint64_t end) {
  if (!gathered()) return;
  end = std::min<uint64_t>(end, p_.size());
  if (end <= bsp_applied_ && end < p_.size()) return;
  // In worker order, so every run gives the same bits.
  std::vector<const void*> inputs;
  double total = 0;
  float lr = 0;
  for (const Pending& p : pending_) {
    inputs.push_back(p.data);
    total += p.weight;
    if (lr == 0) lr = p.lr;
  }
  if (total == 0) {
    // Every worker pushed a step without data: the clock passes with no
    // update (an optimizer step on nothing would still move momentum).
    empty_clock();
    return;
  }
  if (!bsp_begun_) {  // the clock's one optimizer step begins
    prev_t_ = t_;
    prev_updates_ = updates_;
    sumsq_ = 0;
    marked_ = -1;
    t_++;
  }
  bsp_begun_ = true;
  apply(inputs.data(), inputs.size(), static_cast<float>(1.0 / total), lr, bsp_applied_, end);
  bsp_applied_ = end;
  if (end < p_.size()) return;
  updates_ += pending_.size();
  for (auto& p : pending_) p = Pending{};
  bsp_applied_ = 0;
  bsp_begun_ = false;
  bsp_clock_++;
  last_empty_ = false;
}

void ParamServer::empty_clock() {
  last_empty_ = true;
  prev_t_ = t_;
  prev_updates_ = updates_;
  sumsq_ = 0;
  marked_ = -1;
  for (auto& p : pending_) p = Pending{};
  bsp_applied_ = 0;
  bsp_begun_ = false;
  bsp_clock_++;
}

void ParamServer::apply(const void* const* inputs, size_t n_inputs, float scale, float lr,
                        uint64_t begin, uint64_t end) {
  const float rate = lr > 0 ? lr : opts_.lr;
  reduce::SgdArgs sgd;
  sgd.lr = rate;
  sgd.momentum = opts_.momentum;
  sgd.weight_decay = opts_.weight_decay;
  sgd.first = t_ == 1;
  reduce::AdamArgs adam;
  adam.lr = rate;
  adam.beta1 = opts_.beta1;
  adam.beta2 = opts_.beta2;
  adam.eps = opts_.eps;
  adam.weight_decay = opts_.weight_decay;
  adam.decoupled = opts_.optimizer == proto::Optimizer::kAdamW;
  adam.t = t_;
  const size_t elem = proto::dtype_size(dtype_);
  float* g = grad_.data();
  for (size_t at = begin; at < end; at += kBlock) {
    const size_t len = std::min<size_t>(kBlock, end - at);
    reduce::to_f32(static_cast<const uint8_t*>(inputs[0]) + at * elem, dtype_, len, g);
    for (size_t i = 1; i < n_inputs; i++)
      reduce::add_f32(static_cast<const uint8_t*>(inputs[i]) + at * elem, dtype_, len, g);
    float* m = m_.empty() ? nullptr : m_.data() + at;
    // A block at a time, as it is about to change: the event thread's share
    // of a snapshot's copy is spread over the update instead of in front.
    before_write(at, at + len);
    if (guard_) guard_block(at, len, g, scale);
    if (opts_.optimizer == proto::Optimizer::kSgd)
      reduce::sgd_step(p_.data() + at, m, g, scale, len, sgd);
    else
      reduce::adam_step(p_.data() + at, m, v_.data() + at, g, scale, len, adam);
  }
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

void ParamServer::read(void* dst) const { read(dst, 0, p_.size()); }

void ParamServer::read(void* dst, uint64_t begin, uint64_t end) const {
  reduce::from_f32(p_.data() + begin, end - begin, dtype_,
                   static_cast<uint8_t*>(dst) + begin * proto::dtype_size(dtype_));
}

}  // namespace gsync::ps
