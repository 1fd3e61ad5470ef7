// SPDX-License-Identifier: Apache-2.0
#include "daemon/pipeline/guard_stage.h"

#include <cmath>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "daemon/pipeline/local_stages.h"
#include "daemon/reduce/nonfinite.h"
#include "daemon/pipeline/op.h"
#include "daemon/reduce/optimizer.h"

namespace gsync::pipeline {

namespace {
// Elements per grain: 256 KiB of fp32, a grain of pool work.
constexpr uint64_t kGrain = 65536;

// The sum of squares of n values in dtype, in double: eight running sums
// (independent, so they pipeline), added in their order at the end.
double sum_squares(const void* data, proto::DType dtype, uint64_t n, std::vector<float>* scratch) {
  const float* v = static_cast<const float*>(data);
  if (dtype != proto::DType::kF32) {
    scratch->resize(n);
    reduce::to_f32(data, dtype, n, scratch->data());
    v = scratch->data();
  }
  double s[8] = {};
  uint64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; j++) s[j] += double(v[i + j]) * double(v[i + j]);
  for (; i < n; i++) s[0] += double(v[i]) * double(v[i]);
  double total = 0;
  for (double x : s) total += x;
  return total;
}

// The dtypes the guard judges (a norm of integers means nothing).
bool floating(proto::DType d) {
  return d == proto::DType::kF32 || d == proto::DType::kF16 || d == proto::DType::kBF16;
}
}  // namespace

bool GuardStage::wanted(const OpRequest& r) {
  const proto::OpShape& s = r.shape;
  return r.guard.on && s.opcode == proto::Opcode::kAllreduce && s.count > 0 && floating(s.dtype) &&
         (s.redop == proto::RedOp::kSum || s.redop == proto::RedOp::kAvg ||
          s.redop == proto::RedOp::kWeightedAvg);
}

bool GuardStage::marks_ranks(const OpRequest& r) {
  if (wanted(r)) return true;
  const proto::OpShape& s = r.shape;
  return r.guard.on && proto::is_push(s.opcode) && r.sync.mode == proto::SyncMode::kBsp &&
         s.count > 0 && floating(s.dtype);
}

void GuardStage::input_done() {
  const OpRequest& r = link_.request();
  const uint64_t n = r.shape.count;
  const uint8_t* data = static_cast<const uint8_t*>(host_buffer(r).ptr);
  const proto::DType dtype = r.shape.dtype;
  const size_t elem = proto::dtype_size(dtype);
  sums_ = std::make_shared<std::vector<double>>((n + kGrain - 1) / kGrain, 0.0);
  auto sums = sums_;
  running_ = true;
  pool_.submit(n, kGrain, [sums, data, dtype, elem](size_t b, size_t e) {
    std::vector<float> scratch;
    (*sums)[b / kGrain] = sum_squares(data + b * elem, dtype, e - b, &scratch);
  }, 0, link_.pool_tag());
}

void GuardStage::task_done(uint64_t) {
  running_ = false;
  if (aborting_) {
    link_.quiet();
    return;
  }
  decide();
}

void GuardStage::decide() {
  const OpRequest& r = link_.request();
  double total = 0;
  for (double s : *sums_) total += s;
  const double norm = std::sqrt(total);
  Status st = book_.check(r.job, r.id.key, r.id.step, r.guard, norm);
  if (!st) {
    std::string from;
    // Whose gradient it was: the mark the folds put in (nonfinite.h), the
    // same bits on every host. A multi-host op only: one host's reduce
    // writes the sum over its ranks' own tensors.
    if (!std::isfinite(norm) && r.multi_host()) {
      from = reduce::nonfinite_origin(
          reduce::marked_rank(host_buffer(r).ptr, r.shape.dtype, r.shape.count));
    }
    Status named(st.code(), fmt::format("{}: {}{}", r.describe(), st.message(), from));
    spdlog::warn("{}", named.message());
    link_.failed(named);
    return;
  }
  link_.emit(0, r.shape.count);
  link_.finished();
}

void GuardStage::abort(const Status&) {
  aborting_ = true;
  if (!running_) link_.quiet();
}

}  // namespace gsync::pipeline
