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

}  // namespace

Reproducible::Reproducible(std::shared_ptr<Session> s, const OpArgs& user)
    : session_(std::move(s)), user_(user), outer_(std::make_shared<RequestState>()) {
  outer_->key = user.key;
  outer_->step = user.step;
  outer_->opcode = proto::Opcode::kAllreduce;
}

Reproducible::~Reproducible() { release(); }

int Reproducible::start(const std::shared_ptr<Session>& s, const OpArgs& user,
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
    return bad(GSYNC_ERR_INVALID, "key must be below 2^62 - 1 (the keys above carry the mode's "
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
  const repro::Source src{user.buf, user.count, dtype, op, user.weight};
  const bool slots = uint64_t{r->n_} * 4 * static_cast<uint64_t>(world) <= kSlotBytes;
  if (slots) {
    const size_t bytes = r->n_ * 4 * static_cast<size_t>(world);
    if (int rc = r->alloc(&r->values_, bytes); rc != GSYNC_OK) return rc;
    auto* values = static_cast<float*>(r->values_.p);
    std::memset(values, 0, bytes);
    repro::contributions(src, values + static_cast<size_t>(r->rank_) * r->n_);
  } else {
    // The codes now, the grid values once the codes are agreed: both read
    // the tensor where it lies, which the caller keeps until the end.
    if (int rc = r->alloc(&r->codes_, r->n_); rc != GSYNC_OK) return rc;
    repro::exponent_codes(src, static_cast<uint8_t*>(r->codes_.p));
  }
  if (int rc = r->submit(slots ? Phase::kSlots : Phase::kExponents); rc != GSYNC_OK) return rc;
  *out = std::move(r);
  return GSYNC_OK;
}

int Reproducible::submit(const std::shared_ptr<Session>& s, const OpArgs& user,
                         gsync_request** req) {
  *req = nullptr;
  auto handle = std::make_unique<gsync_request>();
  std::unique_ptr<Reproducible> r;
  if (int rc = start(s, user, &r); rc != GSYNC_OK) return rc;
  handle->session = s;
  handle->state = r->outer();
  handle->repro = std::move(r);
  *req = handle.release();
  return GSYNC_OK;
}

int Reproducible::alloc(Scratch* s, size_t bytes) {
  if (bytes == 0) return GSYNC_OK;
  // The arena first: the inner op then needs no staging copy. A full arena
  // is not an error here: the heap works, through the staging blocks.
  if (session_->try_alloc(bytes, &s->p)) {
    s->arena = true;
    return GSYNC_OK;
  }
  s->heap.resize(bytes);
  s->p = s->heap.data();
  return GSYNC_OK;
}

void Reproducible::drop(Scratch* s) {
  if (s->arena) session_->free(s->p);
  s->arena = false;
  s->p = nullptr;
  s->heap = {};
}

int Reproducible::submit(Phase phase) {
  phase_ = phase;
  OpArgs a;
  a.api = user_.api;
  a.opcode = proto::Opcode::kAllreduce;
  a.step = user_.step;
  a.timeout_ms = user_.timeout_ms;
  a.redop = static_cast<int>(phase == Phase::kExponents ? proto::RedOp::kMax : proto::RedOp::kSum);
  a.key = (phase == Phase::kExponents ? proto::kReproExponents : proto::kReproSums) | user_.key;
  switch (phase) {
    case Phase::kSlots:
      a.buf = values_.p;
      a.count = n_ * static_cast<size_t>(world_);
      a.dtype = GSYNC_INT32;
      break;
    case Phase::kExponents:
      a.buf = codes_.p;
      a.count = n_;
      a.dtype = GSYNC_UINT8;
      break;
    default:
      a.buf = ints_.p;
      a.count = n_;
      a.dtype = GSYNC_INT32;
      break;
  }
  inner_.reset();
  return session_->submit(a, &inner_);
}

int Reproducible::advance(int rc) {
  const char* what = phase_ == Phase::kExponents ? "exponents" : "sums";
  if (rc != GSYNC_OK) return end(rc, format("%s: %s", what, session_->request_error(*inner_)));
  proto::DType dtype{};
  proto::RedOp op{};
  proto::dtype_from_wire(user_.dtype, &dtype);
  proto::redop_from_wire(user_.redop, &op);
  session_->release(*inner_);
  if (phase_ == Phase::kExponents) {
    if (int r = alloc(&ints_, n_ * 4); r != GSYNC_OK) return end(r, "scratch");
    const repro::Source src{user_.buf, user_.count, dtype, op, user_.weight};
    repro::quantise(src, static_cast<const uint8_t*>(codes_.p), world_,
                    static_cast<int32_t*>(ints_.p));
    if (int r = submit(Phase::kSums); r != GSYNC_OK) return end(r, last_error());
    return GSYNC_ERR_AGAIN;
  }
  if (phase_ == Phase::kSlots) {
    std::vector<uint8_t> codes(n_);
    std::vector<int32_t> sums(n_);
    repro::fold_slots(static_cast<const float*>(values_.p), n_, world_, codes.data(), sums.data());
    repro::finish(sums.data(), codes.data(), user_.count, world_, dtype, op, user_.buf);
  } else {
    repro::finish(static_cast<const int32_t*>(ints_.p), static_cast<const uint8_t*>(codes_.p),
                  user_.count, world_, dtype, op, user_.buf);
  }
  return end(GSYNC_OK, "");
}

int Reproducible::end(int rc, const std::string& why) {
  phase_ = Phase::kDone;
  if (inner_) session_->release(*inner_);
  inner_.reset();
  drop(&values_);
  drop(&codes_);
  drop(&ints_);
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
    const int rc = session_->test(*inner_);
    if (rc == GSYNC_ERR_AGAIN) return rc;
    advance(rc);  // the end, or the next inner op, looked at next
  }
  return outer_->status == GSYNC_OK ? GSYNC_OK : fail(outer_->status, outer_->error);
}

int Reproducible::wait(int timeout_ms) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    if (outer_->done)
      return outer_->status == GSYNC_OK ? GSYNC_OK : fail(outer_->status, outer_->error);
    int left = -1;  // forever
    if (timeout_ms >= 0) {
      const auto ms =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      left = ms > 0 ? static_cast<int>(ms) : 0;
    }
    const int rc = session_->wait(*inner_, left);
    if (rc == GSYNC_ERR_AGAIN) return rc;
    advance(rc);
  }
}

void Reproducible::release() {
  if (inner_ && !inner_->done) {
    // The daemon may still write the inner op's buffer: its arena scratch
    // goes when its completion comes. Heap scratch was staged, so it may go.
    for (Scratch* s : {&values_, &codes_, &ints_}) {
      if (s->arena) session_->free_on_completion(*inner_, s->p);
      s->arena = false;
    }
  }
  if (inner_) session_->release(*inner_);
  inner_.reset();
  drop(&values_);
  drop(&codes_);
  drop(&ints_);
}

}  // namespace gsync::client
