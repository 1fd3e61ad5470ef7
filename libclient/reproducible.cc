// SPDX-License-Identifier: Apache-2.0
#include "libclient/reproducible.h"

#include <chrono>
#include <cmath>
#include <cstring>

#include "libclient/device_memory.h"
#include "libclient/error.h"
#include "libclient/format.h"
#include "libclient/reproducible_math.h"
#include "protocol/reproducible.h"

namespace gsync::client {
namespace {

// A tensor whose slots (world x values x 4 bytes) fit this goes as one
// gather: one op's latency instead of two, for bytes that cost little.
constexpr size_t kSlotBytes = size_t{64} << 10;
// A large tensor goes in segments of this many values (4 MiB of fp32), at
// most kWindow of them in flight: enough to keep a sum on the wire while
// the next segments' codes travel and their grid values are computed.
constexpr size_t kSegmentValues = size_t{1} << 20;
constexpr size_t kWindow = 4;

}  // namespace

Reproducible::Reproducible(std::shared_ptr<Comm> s, const OpArgs& user)
    : session_(std::move(s)), user_(user), outer_(std::make_shared<RequestState>()) {
  outer_->key = user.key;
  outer_->step = user.step;
  outer_->opcode = proto::Opcode::kAllreduce;
  // Only start() reads the caller's codec and declaration options; the
  // pointers would dangle past the call that made them.
  user_.compress = nullptr;
  user_.ps = nullptr;
}

Reproducible::~Reproducible() { release(); }

int Reproducible::start(const std::shared_ptr<Comm>& s, const OpArgs& user,
                        std::unique_ptr<Reproducible>* out) {
  auto bad = [&](int code, const std::string& why) {
    return fail(code, format("%s: reproducible allreduce: %s (key %llu step %llu, %s)", user.api,
                             why.c_str(), static_cast<unsigned long long>(user.key),
                             static_cast<unsigned long long>(user.step), s->context().c_str()));
  };
  proto::DType dtype{};
  proto::RedOp op{};
  if (!proto::dtype_from_wire(user.dtype, &dtype) || !proto::redop_from_wire(user.redop, &op) ||
      !repro::covered(dtype, op))
    return bad(GSYNC_ERR_UNSUPPORTED,
               format("dtype %s op %s: the mode covers sum, avg and weighted avg of float32, "
                      "float16 and bfloat16 (min, max and int32 are order-free already)",
                      proto::dtype_name(user.dtype), proto::redop_name(user.redop)));
  if (user.key >= proto::kReproKeyLimit)
    return bad(GSYNC_ERR_INVALID, "key must be below 2^48 (the keys above carry the mode's "
                                  "own ops)");
  if (user.compress != nullptr && user.compress->codec != proto::Codec::kNone)
    return bad(GSYNC_ERR_INVALID, "a codec changes the values; reproducible ops are not "
                                  "compressed (set compression none, or reproducible 0)");
  if (op == proto::RedOp::kWeightedAvg && !(std::isfinite(user.weight) && user.weight >= 0))
    return bad(GSYNC_ERR_INVALID, format("weight %g must be finite and >= 0", user.weight));
  if (user.buf == nullptr && user.count > 0) return bad(GSYNC_ERR_INVALID, "buf is NULL");
  if (DeviceMemory::is_device_pointer(user.buf))
    return bad(GSYNC_ERR_UNSUPPORTED, "buf is GPU memory; the mode converts on the host: copy "
                                      "the tensor to host memory");
  const int world = s->world_size();
  if (world <= 0)
    return bad(GSYNC_ERR_WORLD_CHANGED, "the job's world is not known yet: call gsync_world");
  if (world > repro::kMaxWorld)
    return bad(GSYNC_ERR_UNSUPPORTED, format("world_size %d is above the mode's %d ranks", world,
                                             repro::kMaxWorld));

  std::unique_ptr<Reproducible> r(new Reproducible(s, user));
  r->world_ = world;
  r->rank_ = s->rank();
  r->n_ = repro::n_values(user.count, op);
  r->slots_ = uint64_t{r->n_} * 4 * static_cast<uint64_t>(world) <= kSlotBytes;
  if (r->slots_) {
    r->segs_.resize(1);
    r->segs_[0].n = r->n_;
  } else {
    size_t per = std::max(kSegmentValues, (r->n_ + proto::kReproMaxSegments - 1) /
                                              proto::kReproMaxSegments);
    for (size_t b = 0; b < r->n_; b += per) {
      Segment seg;
      seg.begin = b;
      seg.n = std::min(per, r->n_ - b);
      r->segs_.push_back(std::move(seg));
    }
  }
  if (int rc = r->fill_window(); rc != GSYNC_OK) return rc;
  *out = std::move(r);
  return GSYNC_OK;
}

int Reproducible::submit(const std::shared_ptr<Comm>& s, const OpArgs& user,
                         gsync_request** req) {
  *req = nullptr;
  auto handle = std::make_unique<gsync_request>();
  std::unique_ptr<Reproducible> r;
  if (int rc = start(s, user, &r); rc != GSYNC_OK) return rc;
  handle->comm = s;
  handle->state = r->outer();
  handle->repro = std::move(r);
  *req = handle.release();
  return GSYNC_OK;
}

int Reproducible::submit_push(const std::shared_ptr<Comm>& s, const OpArgs& push,
                              gsync_request** req) {
  *req = nullptr;
  if (push.key >= proto::kReproPushBit)
    return fail(GSYNC_ERR_INVALID,
                format("%s: reproducible push: key %llu must be below 2^47 (the bit above marks "
                       "its allreduce) (%s)",
                       push.api, static_cast<unsigned long long>(push.key), s->context().c_str()));
  OpArgs ar = push;
  ar.opcode = proto::Opcode::kAllreduce;
  ar.key = push.key | proto::kReproPushBit;
  ar.redop = static_cast<int>(proto::RedOp::kWeightedAvg);
  auto handle = std::make_unique<gsync_request>();
  std::unique_ptr<Reproducible> r;
  if (int rc = start(s, ar, &r); rc != GSYNC_OK) return rc;
  r->has_push_ = true;
  r->push_ = push;
  r->outer_->opcode = push.opcode;
  r->outer_->key = push.key;
  handle->comm = s;
  handle->state = r->outer();
  handle->repro = std::move(r);
  *req = handle.release();
  return GSYNC_OK;
}

void Reproducible::alloc(Scratch* s, size_t bytes) {
  if (bytes == 0) return;
  // The arena first: the inner op then needs no staging copy. A full arena
  // is not an error here: the heap works, through the staging blocks.
  if (session_->try_alloc(bytes, &s->p)) {
    s->arena = true;
    return;
  }
  s->heap.resize(bytes);
  s->p = s->heap.data();
}

void Reproducible::drop(Scratch* s) {
  if (s->arena) session_->free(s->p);
  s->arena = false;
  s->p = nullptr;
  s->heap = {};
}

namespace {
repro::Source source_of(const OpArgs& a) {
  proto::DType dtype{};
  proto::RedOp op{};
  proto::dtype_from_wire(a.dtype, &dtype);
  proto::redop_from_wire(a.redop, &op);
  return {a.buf, a.count, dtype, op, a.weight};
}
}  // namespace

int Reproducible::submit_inner(Segment& seg, size_t index, bool sums) {
  OpArgs a;
  a.api = user_.api;
  a.opcode = proto::Opcode::kAllreduce;
  a.step = user_.step;
  a.timeout_ms = user_.timeout_ms;
  a.redop = static_cast<int>(sums ? proto::RedOp::kSum : proto::RedOp::kMax);
  a.key = proto::repro_key(user_.key, index, sums);
  if (sums) {
    a.buf = seg.ints.p;
    a.count = seg.n * (slots_ ? static_cast<size_t>(world_) : 1);
    a.dtype = GSYNC_INT32;
  } else {
    a.buf = seg.codes.p;
    a.count = seg.n;
    a.dtype = GSYNC_UINT8;
  }
  seg.inner.reset();
  seg.phase = sums ? Phase::kSums : Phase::kExponents;
  return session_->submit(a, &seg.inner);
}

size_t Reproducible::in_flight() const {
  size_t n = 0;
  for (const Segment& s : segs_) n += s.phase == Phase::kExponents || s.phase == Phase::kSums;
  return n;
}

int Reproducible::fill_window() {
  const repro::Source src = source_of(user_);
  while (next_ < segs_.size() && in_flight() < kWindow) {
    Segment& seg = segs_[next_];
    const size_t index = next_++;
    if (slots_) {
      const size_t bytes = seg.n * 4 * static_cast<size_t>(world_);
      alloc(&seg.ints, bytes);
      auto* values = static_cast<float*>(seg.ints.p);
      std::memset(values, 0, bytes);
      repro::contributions(src, values + static_cast<size_t>(rank_) * seg.n);
      if (int rc = submit_inner(seg, index, true); rc != GSYNC_OK) return rc;
      continue;
    }
    alloc(&seg.codes, seg.n);
    repro::exponent_codes(src, seg.begin, seg.n, static_cast<uint8_t*>(seg.codes.p));
    if (int rc = submit_inner(seg, index, false); rc != GSYNC_OK) return rc;
  }
  return GSYNC_OK;
}

int Reproducible::advance(Segment& seg, size_t index, int rc) {
  if (rc != GSYNC_OK) {
    return end(rc, format("segment %zu of %zu, %s: %s", index + 1, segs_.size(),
                          seg.phase == Phase::kExponents ? "exponents" : "sums",
                          session_->request_error(*seg.inner)));
  }
  session_->release(*seg.inner);
  seg.inner.reset();
  const repro::Source src = source_of(user_);
  if (seg.phase == Phase::kExponents) {
    alloc(&seg.ints, seg.n * 4);
    repro::quantise(src, seg.begin, seg.n, static_cast<const uint8_t*>(seg.codes.p), world_,
                    static_cast<int32_t*>(seg.ints.p));
    if (int r = submit_inner(seg, index, true); r != GSYNC_OK) return end(r, last_error());
    return GSYNC_ERR_AGAIN;
  }
  seg.phase = Phase::kDone;
  ++summed_;
  if (slots_) {
    std::vector<uint8_t> codes(seg.n);
    std::vector<int32_t> sums(seg.n);
    repro::fold_slots(static_cast<const float*>(seg.ints.p), seg.n, world_, codes.data(),
                      sums.data());
    repro::finish(sums.data(), codes.data(), user_.count, world_, src.dtype, src.op, user_.buf);
    if (src.op == proto::RedOp::kWeightedAvg)
      total_weight_ = repro::decode_value(sums[seg.n - 1], codes[seg.n - 1], world_);
    return has_push_ ? start_push() : end(GSYNC_OK, "");
  }
  // A weighted average needs the total weight, the last value: its
  // segments are finished together at the end.
  if (src.op != proto::RedOp::kWeightedAvg) {
    const double divisor = src.op == proto::RedOp::kAvg ? world_ : 1.0;
    repro::finish_range(static_cast<const int32_t*>(seg.ints.p),
                        static_cast<const uint8_t*>(seg.codes.p), seg.begin, seg.n, world_,
                        src.dtype, divisor, user_.buf);
    drop(&seg.codes);
    drop(&seg.ints);
  }
  if (summed_ == segs_.size()) return finish_all();
  if (int r = fill_window(); r != GSYNC_OK) return end(r, last_error());
  return GSYNC_ERR_AGAIN;
}

int Reproducible::finish_all() {
  const repro::Source src = source_of(user_);
  if (src.op == proto::RedOp::kWeightedAvg) {
    const Segment& last = segs_.back();
    const double total =
        repro::decode_value(static_cast<const int32_t*>(last.ints.p)[last.n - 1],
                            static_cast<const uint8_t*>(last.codes.p)[last.n - 1], world_);
    for (const Segment& seg : segs_) {
      const size_t n = std::min(seg.n, user_.count - std::min(user_.count, seg.begin));
      repro::finish_range(static_cast<const int32_t*>(seg.ints.p),
                          static_cast<const uint8_t*>(seg.codes.p), seg.begin, n, world_,
                          src.dtype, total, user_.buf);
    }
    total_weight_ = total;
  }
  return has_push_ ? start_push() : end(GSYNC_OK, "");
}

int Reproducible::start_push() {
  release_segments();
  OpArgs a = push_;
  // Rank 0 pushes the average; the others (and rank 0 too when no rank
  // had samples) push zeros with weight 0 - into their own buffers, where
  // a push_pull's parameters come back.
  const bool carries = rank_ == 0 && total_weight_ > 0;
  a.weight = carries ? 1.0 : 0.0;
  if (!carries)
    std::memset(a.buf, 0, a.count * proto::dtype_size(source_of(user_).dtype));
  if (int rc = session_->submit(a, &push_state_); rc != GSYNC_OK) return end(rc, last_error());
  return GSYNC_ERR_AGAIN;
}

int Reproducible::end(int rc, const std::string& why) {
  if (push_state_ && push_state_->done) {
    // What the push answered: gsync_ps_rolled_back reads it here.
    outer_->value = push_state_->value;
    outer_->text = push_state_->text;
  }
  release();
  outer_->done = true;
  outer_->status = rc;
  if (rc != GSYNC_OK) {
    outer_->error = format("%s: reproducible allreduce key %llu step %llu: %s", user_.api,
                           static_cast<unsigned long long>(user_.key),
                           static_cast<unsigned long long>(user_.step), why.c_str());
    return fail(rc, outer_->error);
  }
  return GSYNC_OK;
}

int Reproducible::test() {
  while (!outer_->done) {
    bool moved = false;
    if (push_state_) {
      const int rc = session_->test(*push_state_);
      if (rc == GSYNC_ERR_AGAIN) return rc;
      end(rc, rc == GSYNC_OK ? "" : format("the push: %s", session_->request_error(*push_state_)));
      break;
    }
    for (size_t i = 0; i < segs_.size() && !outer_->done; ++i) {
      Segment& seg = segs_[i];
      if (!seg.inner) continue;
      const int rc = session_->test(*seg.inner);
      if (rc == GSYNC_ERR_AGAIN) continue;
      advance(seg, i, rc);
      moved = true;
    }
    if (!moved && !outer_->done)
      return fail(GSYNC_ERR_AGAIN,
                  format("%s: reproducible allreduce key %llu step %llu is not complete yet "
                         "(%zu of %zu segments summed)",
                         user_.api, static_cast<unsigned long long>(user_.key),
                         static_cast<unsigned long long>(user_.step), summed_, segs_.size()));
  }
  return outer_->status == GSYNC_OK ? GSYNC_OK : fail(outer_->status, outer_->error);
}

int Reproducible::wait(int timeout_ms) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  // The name is made only for a timeout's error, not per wait.
  auto what = [this] {
    return format("reproducible allreduce key %llu step %llu",
                  static_cast<unsigned long long>(user_.key),
                  static_cast<unsigned long long>(user_.step));
  };
  while (!outer_->done) {
    std::vector<RequestState*> pending;
    for (Segment& seg : segs_)
      if (seg.inner) pending.push_back(seg.inner.get());
    if (push_state_) pending.push_back(push_state_.get());
    int left = -1;  // forever
    if (timeout_ms >= 0) {
      const auto ms =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      left = ms > 0 ? static_cast<int>(ms) : 0;
    }
    if (int rc = session_->wait_any(pending, left, what); rc != GSYNC_OK) return rc;
    // Whichever are done, in segment order.
    for (size_t i = 0; i < segs_.size() && !outer_->done; ++i) {
      Segment& seg = segs_[i];
      if (seg.inner && seg.inner->done) advance(seg, i, session_->test(*seg.inner));
    }
    if (push_state_ && push_state_->done && !outer_->done) {
      const int rc = session_->test(*push_state_);
      end(rc, rc == GSYNC_OK ? "" : format("the push: %s", session_->request_error(*push_state_)));
    }
  }
  return outer_->status == GSYNC_OK ? GSYNC_OK : fail(outer_->status, outer_->error);
}

void Reproducible::release() {
  release_segments();
  if (push_state_) session_->release(*push_state_);
  push_state_.reset();
}

void Reproducible::release_segments() {
  for (Segment& seg : segs_) {
    if (seg.inner && !seg.inner->done) {
      // The daemon may still write this op's buffer: its arena scratch goes
      // when its completion comes. Heap scratch was staged, so it may go.
      for (Scratch* s : {&seg.codes, &seg.ints}) {
        if (s->arena) session_->free_on_completion(*seg.inner, s->p);
        s->arena = false;
      }
    }
    if (seg.inner) session_->release(*seg.inner);
    seg.inner.reset();
    drop(&seg.codes);
    drop(&seg.ints);
  }
}

}  // namespace gsync::client
