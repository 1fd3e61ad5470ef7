// SPDX-License-Identifier: Apache-2.0
//
// The extern "C" surface: argument checks that need no session, then a call
// into Comm. No C++ exception may cross this boundary: each entry point
// converts them to GSYNC_ERR_NOMEM (allocation) or GSYNC_ERR_INTERNAL.
#include <algorithm>
#include <cstddef>
#include <cstring>
#include <new>
#include <stdexcept>

// The library is built with hidden visibility; exactly the declarations of
// the public header are exported (and libgsync.map versions them).
#pragma GCC visibility push(default)
#include "gsync/gsync.h"
#pragma GCC visibility pop

#include "libclient/comm.h"
#include "libclient/error.h"
#include "libclient/format.h"
#include "libclient/connect.h"
#include "libclient/reproducible.h"
#include "protocol/compression.h"
#include "protocol/ps.h"
#include "protocol/wire.h"

namespace gc = gsync::client;

namespace {

#define GSYNC_STR2(x) #x
#define GSYNC_STR(x) GSYNC_STR2(x)
constexpr const char kVersionString[] = GSYNC_STR(GSYNC_VERSION_MAJOR) "." GSYNC_STR(
    GSYNC_VERSION_MINOR) "." GSYNC_STR(GSYNC_VERSION_PATCH);

// gsync_barrier passes its timeout to the daemon, which reports who is
// missing; the client waits this much longer before giving up on the report.
constexpr int kBarrierGraceMs = 2000;

template <typename F>
int guarded(const char* api, F&& f) noexcept {
  try {
    return f();
  } catch (const std::bad_alloc&) {
    return gc::fail(GSYNC_ERR_NOMEM, gc::format("%s: out of host memory", api));
  } catch (const std::exception& e) {
    return gc::fail(GSYNC_ERR_INTERNAL, gc::format("%s: unexpected exception: %s", api, e.what()));
  } catch (...) {
    return gc::fail(GSYNC_ERR_INTERNAL, gc::format("%s: unexpected exception", api));
  }
}

int null_arg(const char* api, const char* what) {
  return gc::fail(GSYNC_ERR_INVALID, gc::format("%s: %s is NULL", api, what));
}

int submit(gsync_comm_t* comm, const gc::OpArgs& args, gsync_request_t** req);

// An options struct the caller may have built against an older header:
// its fields up to its struct_size over the defaults in *out.
template <class T>
int copy_opts(const char* api, const T* opts, T* out) {
  if (opts == nullptr) return GSYNC_OK;
  if (opts->struct_size < sizeof(uint32_t) * 2 || opts->struct_size > 4096)
    return gc::fail(GSYNC_ERR_INVALID,
                    gc::format("%s: opts->struct_size is %u, expected %zu; initialize the options "
                               "with their _init function",
                               api, opts->struct_size, sizeof(T)));
  std::memcpy(static_cast<void*>(out), opts, std::min<size_t>(opts->struct_size, sizeof(T)));
  out->struct_size = sizeof(T);
  return GSYNC_OK;
}

// Both allreduce entry points: o holds every option, defaults filled.
int allreduce(const char* api, gsync_comm_t* comm, uint64_t key, uint64_t step, void* buf,
              size_t count, int dtype, int op, const gsync_allreduce_opts_t& o,
              gsync_request_t** req) {
  return guarded(api, [&] {
    gsync::proto::Compression c;
    const bool own = o.compression.codec != GSYNC_CODEC_JOB;
    if (own) {
      std::string where = std::string(api) + ": opts.compression";
      if (int rc = gc::compression_from_public(o.compression, where.c_str(), &c); rc != GSYNC_OK)
        return rc;
    }
    const gc::OpArgs args{.api = api,
                          .opcode = gsync::proto::Opcode::kAllreduce,
                          .key = key,
                          .step = step,
                          .buf = buf,
                          .count = count,
                          .dtype = dtype,
                          .redop = op,
                          .weight = o.weight,
                          .timeout_ms = o.timeout_ms,
                          .compress = own ? &c : nullptr};
    if (o.reproducible < -1 || o.reproducible > 1)
      return gc::fail(GSYNC_ERR_INVALID, gc::format("%s: opts.reproducible %d is not -1, 0 or 1",
                                                    api, o.reproducible));
    if (comm != nullptr && req != nullptr &&
        (o.reproducible == 1 || (o.reproducible == -1 && comm->impl->reproducible()))) {
      return gc::Reproducible::submit(comm->impl, args, req);
    }
    return submit(comm, args, req);
  });
}

int submit(gsync_comm_t* comm, const gc::OpArgs& args, gsync_request_t** req) {
  if (req == nullptr) return null_arg(args.api, "req");
  *req = nullptr;
  if (comm == nullptr) return null_arg(args.api, "comm");
  std::shared_ptr<gc::RequestState> state;
  // Allocate the handle first so that no failure can strand a submitted op.
  auto handle = std::make_unique<gsync_request>();
  if (int rc = comm->impl->submit(args, &state); rc != GSYNC_OK) return rc;
  handle->comm = comm->impl;
  handle->state = std::move(state);
  *req = handle.release();
  return GSYNC_OK;
}

}  // namespace

extern "C" {

const char* gsync_version(void) { return kVersionString; }

const char* gsync_strerror(int code) { return gc::error_name(code); }

const char* gsync_last_error(void) { return gc::last_error(); }

}  // extern "C"

namespace {
// gsync_config_init writes the whole struct its caller was compiled with:
// a program built against 0.1 passes a struct that ends at timeout_ms, and
// must keep the 0.1 function, which writes no further (rdma-core's habit:
// one symbol version per struct size, .symver binding each). New programs
// link the 0.2 one; the library's own exported name is the default, @@.
void config_init(gsync_config_t* cfg, size_t size) {
  if (cfg == nullptr) return;
  gsync_config_t c{};
  c.struct_size = static_cast<uint32_t>(size);
  c.world_size = 1;
  c.local_size = 1;
  c.compression.codec = GSYNC_CODEC_NONE;
  c.compression.hops = GSYNC_HOPS_CROSS_RACK;
  c.compression.error_feedback = 1;
  c.sync_mode = GSYNC_SYNC_BSP;
  std::memcpy(static_cast<void*>(cfg), &c, size);
}
constexpr size_t kConfigSize01 = offsetof(gsync_config_t, timeout_ms) + sizeof(uint32_t);
// The 0.2 struct ends at staleness (its size rounded to the struct's
// 8-byte alignment, as the compiler laid it out).
constexpr size_t kConfigSize02 = (offsetof(gsync_config_t, staleness) + sizeof(uint32_t) + 7) / 8 * 8;
// The 0.3 struct ends at anomaly_window, the same way.
constexpr size_t kConfigSize03 =
    (offsetof(gsync_config_t, anomaly_window) + sizeof(uint32_t) + 7) / 8 * 8;
// The 0.4 struct ends at chunk_bytes.
constexpr size_t kConfigSize04 = offsetof(gsync_config_t, chunk_bytes) + sizeof(uint64_t);
// The 0.5 struct ends at max_hosts (then 4 bytes of padding).
constexpr size_t kConfigSize05 = (offsetof(gsync_config_t, max_hosts) + sizeof(int32_t) + 7) / 8 * 8;
// gsync_allreduce_opts_t before 0.8 ended at compression.
constexpr size_t kOptsSize02 = (offsetof(gsync_allreduce_opts_t, compression) +
                                sizeof(gsync_compression_t) + 7) / 8 * 8;

void opts_init(gsync_allreduce_opts_t* opts, size_t size) {
  if (opts == nullptr) return;
  gsync_allreduce_opts_t o{};
  o.struct_size = static_cast<uint32_t>(size);
  o.compression.codec = GSYNC_CODEC_JOB;
  o.compression.hops = GSYNC_HOPS_CROSS_RACK;
  o.compression.error_feedback = 1;
  o.reproducible = -1;
  std::memcpy(static_cast<void*>(opts), &o, size);
}
}  // namespace

extern "C" {

// Not named gsync_*: the version script keeps them local; only the
// versioned aliases below are exported.
#pragma GCC visibility push(default)
void libgsync_config_init_0_1(gsync_config_t* cfg);
void libgsync_config_init_0_2(gsync_config_t* cfg);
void libgsync_config_init_0_3(gsync_config_t* cfg);
void libgsync_config_init_0_4(gsync_config_t* cfg);
void libgsync_config_init_0_5(gsync_config_t* cfg);
void libgsync_config_init_0_8(gsync_config_t* cfg);
void libgsync_allreduce_opts_init_0_2(gsync_allreduce_opts_t* opts);
void libgsync_allreduce_opts_init_0_8(gsync_allreduce_opts_t* opts);
#pragma GCC visibility pop
void libgsync_config_init_0_1(gsync_config_t* cfg) {
  config_init(cfg, (kConfigSize01 + 7) / 8 * 8);
}
void libgsync_config_init_0_2(gsync_config_t* cfg) { config_init(cfg, kConfigSize02); }
void libgsync_config_init_0_3(gsync_config_t* cfg) { config_init(cfg, kConfigSize03); }
void libgsync_config_init_0_4(gsync_config_t* cfg) { config_init(cfg, kConfigSize04); }
void libgsync_config_init_0_5(gsync_config_t* cfg) { config_init(cfg, kConfigSize05); }
void libgsync_config_init_0_8(gsync_config_t* cfg) { config_init(cfg, sizeof(gsync_config_t)); }
void libgsync_allreduce_opts_init_0_2(gsync_allreduce_opts_t* opts) { opts_init(opts, kOptsSize02); }
void libgsync_allreduce_opts_init_0_8(gsync_allreduce_opts_t* opts) {
  opts_init(opts, sizeof(gsync_allreduce_opts_t));
}
__asm__(".symver libgsync_config_init_0_1,gsync_config_init@GSYNC_0.1");
__asm__(".symver libgsync_config_init_0_2,gsync_config_init@GSYNC_0.2");
__asm__(".symver libgsync_config_init_0_3,gsync_config_init@GSYNC_0.3");
__asm__(".symver libgsync_config_init_0_4,gsync_config_init@GSYNC_0.4");
__asm__(".symver libgsync_config_init_0_5,gsync_config_init@GSYNC_0.5");
__asm__(".symver libgsync_config_init_0_8,gsync_config_init@@GSYNC_0.8");
__asm__(".symver libgsync_allreduce_opts_init_0_2,gsync_allreduce_opts_init@GSYNC_0.2");
__asm__(".symver libgsync_allreduce_opts_init_0_8,gsync_allreduce_opts_init@@GSYNC_0.8");


int gsync_compression_parse(const char* text, gsync_compression_t* out) {
  return guarded("gsync_compression_parse", [&] {
    if (text == nullptr) return null_arg("gsync_compression_parse", "text");
    if (out == nullptr) return null_arg("gsync_compression_parse", "out");
    gsync::proto::Compression c;
    if (std::string why = gsync::proto::parse(text, &c); !why.empty())
      return gc::fail(GSYNC_ERR_INVALID, "gsync_compression_parse: " + why);
    *out = gsync_compression_t{};
    out->codec = c.codec == gsync::proto::Codec::kNone ? GSYNC_CODEC_NONE
                                                       : static_cast<int32_t>(c.codec);
    out->hops = static_cast<int32_t>(c.hops);
    out->block = c.block;
    out->topk_fraction = c.topk_fraction;
    out->error_feedback = c.error_feedback ? 1 : 0;
    return static_cast<int>(GSYNC_OK);
  });
}

int gsync_connect(const gsync_config_t* cfg, gsync_comm_t** out) {
  return guarded("gsync_connect", [&] {
    if (out == nullptr) return null_arg("gsync_connect", "out");
    *out = nullptr;
    auto comm = std::make_unique<gsync_comm>();
    if (int rc = gc::Comm::open(cfg, &comm->impl); rc != GSYNC_OK) return rc;
    *out = comm.release();
    return static_cast<int>(GSYNC_OK);
  });
}

int gsync_close(gsync_comm_t* comm) {
  return guarded("gsync_close", [&] {
    if (comm == nullptr) return null_arg("gsync_close", "comm");
    const int rc = comm->impl->close();
    delete comm;
    return rc;
  });
}

int gsync_alloc(gsync_comm_t* comm, size_t bytes, void** out) {
  return guarded("gsync_alloc", [&] {
    if (comm == nullptr) return null_arg("gsync_alloc", "comm");
    return comm->impl->alloc(bytes, out);
  });
}

int gsync_free(gsync_comm_t* comm, void* ptr) {
  return guarded("gsync_free", [&] {
    if (comm == nullptr) return null_arg("gsync_free", "comm");
    return comm->impl->free(ptr);
  });
}

int gsync_alloc_device(gsync_comm_t* comm, size_t bytes, void** out) {
  return guarded("gsync_alloc_device", [&] {
    if (comm == nullptr) return null_arg("gsync_alloc_device", "comm");
    return comm->impl->alloc_device(bytes, out);
  });
}

int gsync_free_device(gsync_comm_t* comm, void* ptr) {
  return guarded("gsync_free_device", [&] {
    if (comm == nullptr) return null_arg("gsync_free_device", "comm");
    return comm->impl->free_device(ptr);
  });
}

int gsync_arena_info(gsync_comm_t* comm, size_t* capacity, size_t* free_bytes) {
  return guarded("gsync_arena_info", [&] {
    if (comm == nullptr) return null_arg("gsync_arena_info", "comm");
    return comm->impl->arena_info(capacity, free_bytes);
  });
}

int gsync_allreduce(gsync_comm_t* comm, uint64_t key, uint64_t step, void* buf, size_t count,
                    int dtype, int op, double weight, gsync_request_t** req) {
  gsync_allreduce_opts_t o;
  opts_init(&o, sizeof o);
  o.weight = weight;
  return allreduce("gsync_allreduce", comm, key, step, buf, count, dtype, op, o, req);
}

int gsync_allreduce_ex(gsync_comm_t* comm, uint64_t key, uint64_t step, void* buf, size_t count,
                       int dtype, int op, const gsync_allreduce_opts_t* opts,
                       gsync_request_t** req) {
  return guarded("gsync_allreduce_ex", [&] {
    gsync_allreduce_opts_t o;
    opts_init(&o, sizeof o);
    if (opts != nullptr) {
      // Fields up to what the caller's struct holds; the rest keep their
      // defaults (the ABI grows by appending).
      if (opts->struct_size < offsetof(gsync_allreduce_opts_t, compression) ||
          opts->struct_size > 4096)
        return gc::fail(GSYNC_ERR_INVALID,
                        gc::format("gsync_allreduce_ex: opts->struct_size is %u, expected %zu; "
                                   "initialize the options with gsync_allreduce_opts_init",
                                   opts->struct_size, sizeof(gsync_allreduce_opts_t)));
      std::memcpy(&o, opts, std::min<size_t>(opts->struct_size, sizeof o));
    }
    return allreduce("gsync_allreduce_ex", comm, key, step, buf, count, dtype, op, o, req);
  });
}

namespace {
// As gsync_config_init: the 0.2 struct ends at eps, and a program built
// against it keeps the 0.2 function, which writes no further.
void ps_opts_init(gsync_ps_opts_t* opts, size_t size) {
  if (opts == nullptr) return;
  const gsync::proto::PsOptions d;
  gsync_ps_opts_t o{};
  o.struct_size = static_cast<uint32_t>(size);
  o.optimizer = GSYNC_OPT_SGD;
  o.lr = d.lr;
  o.momentum = d.momentum;
  o.weight_decay = d.weight_decay;
  o.beta1 = d.beta1;
  o.beta2 = d.beta2;
  o.eps = d.eps;
  o.resume = 1;
  std::memcpy(static_cast<void*>(opts), &o, size);
}
constexpr size_t kPsOptsSize02 = offsetof(gsync_ps_opts_t, eps) + sizeof(float);
}  // namespace

extern "C" {
#pragma GCC visibility push(default)
void libgsync_ps_opts_init_0_2(gsync_ps_opts_t* opts);
void libgsync_ps_opts_init_0_3(gsync_ps_opts_t* opts);
#pragma GCC visibility pop
void libgsync_ps_opts_init_0_2(gsync_ps_opts_t* opts) { ps_opts_init(opts, kPsOptsSize02); }
void libgsync_ps_opts_init_0_3(gsync_ps_opts_t* opts) { ps_opts_init(opts, sizeof(gsync_ps_opts_t)); }
__asm__(".symver libgsync_ps_opts_init_0_2,gsync_ps_opts_init@GSYNC_0.2");
__asm__(".symver libgsync_ps_opts_init_0_3,gsync_ps_opts_init@@GSYNC_0.3");
}

void gsync_push_opts_init(gsync_push_opts_t* opts) {
  if (opts == nullptr) return;
  *opts = gsync_push_opts_t{};
  opts->struct_size = sizeof(gsync_push_opts_t);
  opts->weight = 1.0;
}

int gsync_ps_declare(gsync_comm_t* comm, uint64_t key, void* buf, size_t count, int dtype,
                     const gsync_ps_opts_t* opts, gsync_request_t** req) {
  return guarded("gsync_ps_declare", [&] {
    gsync_ps_opts_t o;
    ps_opts_init(&o, sizeof o);
    if (int rc = copy_opts("gsync_ps_declare", opts, &o); rc != GSYNC_OK) return rc;
    gsync::proto::PsOptions ps;
    if (!gsync::proto::optimizer_from_wire(o.optimizer, &ps.optimizer))
      return gc::fail(GSYNC_ERR_INVALID,
                      gc::format("gsync_ps_declare: opts.optimizer %d is not a gsync_optimizer_t",
                                 o.optimizer));
    ps.lr = o.lr;
    ps.momentum = o.momentum;
    ps.weight_decay = o.weight_decay;
    ps.beta1 = o.beta1;
    ps.beta2 = o.beta2;
    ps.eps = o.eps;
    if (o.struct_size >= offsetof(gsync_ps_opts_t, resume) + sizeof o.resume) {
      ps.checkpoint_clocks = o.checkpoint_clocks;
      ps.checkpoint_ms = o.checkpoint_ms;
      ps.resume = o.resume != 0;
    }
    const gc::OpArgs args{.api = "gsync_ps_declare",
                          .opcode = gsync::proto::Opcode::kPsDeclare,
                          .key = key,
                          .step = gsync::proto::kDeclareStep,
                          .buf = buf,
                          .count = count,
                          .dtype = dtype,
                          .ps = &ps};
    return submit(comm, args, req);
  });
}

namespace {
int ps_op(const char* api, gsync::proto::Opcode opcode, gsync_comm_t* comm, uint64_t key,
          uint64_t clock, void* buf, size_t count, int dtype, const gsync_push_opts_t* opts,
          gsync_request_t** req) {
  return guarded(api, [&] {
    gsync_push_opts_t o;
    gsync_push_opts_init(&o);
    if (int rc = copy_opts(api, opts, &o); rc != GSYNC_OK) return rc;
    if (clock >= gsync::proto::kDeclareStep)
      return gc::fail(GSYNC_ERR_INVALID, gc::format("%s: clock %llu is out of range", api,
                                                    static_cast<unsigned long long>(clock)));
    const gc::OpArgs args{.api = api,
                          .opcode = opcode,
                          .key = key,
                          .step = clock,
                          .buf = buf,
                          .count = count,
                          .dtype = dtype,
                          .weight = o.weight,
                          .timeout_ms = o.timeout_ms,
                          .lr = o.lr};
    if (comm != nullptr && req != nullptr && gsync::proto::is_push(opcode) &&
        comm->impl->reproducible())
      return gc::Reproducible::submit_push(comm->impl, args, req);
    return submit(comm, args, req);
  });
}
}  // namespace

int gsync_ps_push(gsync_comm_t* comm, uint64_t key, uint64_t clock, void* grad, size_t count,
                  int dtype, const gsync_push_opts_t* opts, gsync_request_t** req) {
  return ps_op("gsync_ps_push", gsync::proto::Opcode::kPush, comm, key, clock, grad, count, dtype,
               opts, req);
}

int gsync_ps_pull(gsync_comm_t* comm, uint64_t key, uint64_t clock, void* out, size_t count,
                  int dtype, gsync_request_t** req) {
  return ps_op("gsync_ps_pull", gsync::proto::Opcode::kPull, comm, key, clock, out, count, dtype,
               nullptr, req);
}

int gsync_ps_push_pull(gsync_comm_t* comm, uint64_t key, uint64_t clock, void* buf, size_t count,
                       int dtype, const gsync_push_opts_t* opts, gsync_request_t** req) {
  return ps_op("gsync_ps_push_pull", gsync::proto::Opcode::kPushPull, comm, key, clock, buf, count,
               dtype, opts, req);
}

int gsync_broadcast(gsync_comm_t* comm, uint64_t key, uint64_t step, void* buf, size_t count,
                    int dtype, int root, gsync_request_t** req) {
  return guarded("gsync_broadcast", [&] {
    const gc::OpArgs args{.api = "gsync_broadcast",
                          .opcode = gsync::proto::Opcode::kBroadcast,
                          .key = key,
                          .step = step,
                          .buf = buf,
                          .count = count,
                          .dtype = dtype,
                          .root = root};
    return submit(comm, args, req);
  });
}

int gsync_ibarrier(gsync_comm_t* comm, uint64_t step, gsync_request_t** req) {
  return guarded("gsync_ibarrier", [&] {
    const gc::OpArgs args{.api = "gsync_ibarrier",
                          .opcode = gsync::proto::Opcode::kBarrier,
                          .key = gc::kBarrierKey,
                          .step = step};
    return submit(comm, args, req);
  });
}

int gsync_barrier(gsync_comm_t* comm, uint64_t step, int timeout_ms) {
  return guarded("gsync_barrier", [&] {
    // timeout_ms > 0 becomes the operation's own timeout, so a late rank is
    // reported by the daemon (which knows who is missing); <= 0 leaves the
    // session default in force.
    const uint32_t op_timeout = timeout_ms > 0 ? static_cast<uint32_t>(timeout_ms) : 0;
    const gc::OpArgs args{.api = "gsync_barrier",
                          .opcode = gsync::proto::Opcode::kBarrier,
                          .key = gc::kBarrierKey,
                          .step = step,
                          .timeout_ms = op_timeout};
    gsync_request_t* req = nullptr;
    if (int rc = submit(comm, args, &req); rc != GSYNC_OK) return rc;
    const int wait_ms = timeout_ms > 0 ? timeout_ms + kBarrierGraceMs : -1;
    int rc = req->comm->wait(*req->state, wait_ms);
    if (rc == GSYNC_ERR_AGAIN) {
      rc = gc::fail(GSYNC_ERR_TIMEOUT,
                    gc::format("gsync_barrier: step %llu did not complete within %d ms, and gsyncd "
                               "did not report why within %d ms more (%s)",
                               static_cast<unsigned long long>(step), timeout_ms, kBarrierGraceMs,
                               req->comm->context().c_str()));
    }
    req->comm->release(*req->state);
    delete req;
    return rc;
  });
}

int gsync_test(gsync_request_t* req) {
  return guarded("gsync_test", [&] {
    if (req == nullptr) return null_arg("gsync_test", "req");
    if (req->repro) return req->repro->test();
    return req->comm->test(*req->state);
  });
}

int gsync_wait(gsync_request_t* req, int timeout_ms) {
  return guarded("gsync_wait", [&] {
    if (req == nullptr) return null_arg("gsync_wait", "req");
    if (req->repro) return req->repro->wait(timeout_ms);
    return req->comm->wait(*req->state, timeout_ms);
  });
}

int gsync_ps_resume_clock(gsync_request_t* req, uint64_t* clock) {
  return guarded("gsync_ps_resume_clock", [&] {
    if (req == nullptr || clock == nullptr)
      return gc::fail(GSYNC_ERR_INVALID, "gsync_ps_resume_clock: req and clock must not be NULL");
    uint64_t v = 0;
    if (!req->comm->declared_clock(*req->state, &v))
      return gc::fail(GSYNC_ERR_INVALID,
                      "gsync_ps_resume_clock: the request is not a completed declaration");
    *clock = v;
    return int{GSYNC_OK};
  });
}

int gsync_ps_rolled_back(gsync_request_t* req, const char** why) {
  return guarded("gsync_ps_rolled_back", [&] {
    if (req == nullptr) return null_arg("gsync_ps_rolled_back", "req");
    bool rolled = false;
    const char* text = "";
    if (!req->comm->rolled_back(*req->state, &rolled, &text))
      return gc::fail(GSYNC_ERR_INVALID, "gsync_ps_rolled_back: the request is not a completed "
                                         "gsync_ps_push or gsync_ps_push_pull");
    if (why != nullptr) *why = text;
    return rolled ? 1 : 0;
  });
}

int gsync_world(gsync_comm_t* comm, gsync_world_t* out, int timeout_ms) {
  return guarded("gsync_world", [&] {
    if (comm == nullptr || out == nullptr)
      return gc::fail(GSYNC_ERR_INVALID, "gsync_world: comm and out must not be NULL");
    if (out->struct_size < sizeof(gsync_world_t))
      return gc::fail(GSYNC_ERR_INVALID,
                      gc::format("gsync_world: out->struct_size %u is below %zu (set it to "
                                 "sizeof(gsync_world_t))",
                                 out->struct_size, sizeof(gsync_world_t)));
    return comm->impl->world(out, timeout_ms);
  });
}

int gsync_lease(gsync_comm_t* comm, uint64_t epoch, uint64_t batches, uint64_t clock,
                gsync_request_t** req) {
  return guarded("gsync_lease", [&] {
    const gc::OpArgs args{.api = "gsync_lease",
                          .opcode = gsync::proto::Opcode::kLease,
                          .key = epoch,
                          .step = clock,
                          .count = static_cast<size_t>(batches)};
    if (batches > SIZE_MAX)
      return gc::fail(GSYNC_ERR_INVALID, "gsync_lease: batches does not fit a size_t");
    return submit(comm, args, req);
  });
}

int gsync_lease_batch(gsync_request_t* req, uint64_t* batch) {
  return guarded("gsync_lease_batch", [&] {
    if (req == nullptr || batch == nullptr)
      return gc::fail(GSYNC_ERR_INVALID, "gsync_lease_batch: req and batch must not be NULL");
    uint64_t v = 0;
    if (!req->comm->leased_batch(*req->state, &v))
      return gc::fail(GSYNC_ERR_INVALID,
                      "gsync_lease_batch: the request is not a lease that completed");
    *batch = v;
    return int{GSYNC_OK};
  });
}

const char* gsync_request_error(gsync_request_t* req) {
  if (req == nullptr) return "";
  try {
    return req->comm->request_error(*req->state);
  } catch (...) {
    return "";
  }
}

void gsync_request_free(gsync_request_t* req) {
  if (req == nullptr) return;
  try {
    if (req->repro) req->repro->release();
    req->comm->release(*req->state);
  } catch (...) {
    // Only a failing mutex lock can throw here; the handle goes regardless.
  }
  delete req;
}

int gsync_completion_fd(gsync_comm_t* comm) {
  return guarded("gsync_completion_fd", [&] {
    if (comm == nullptr) return null_arg("gsync_completion_fd", "comm");
    return comm->impl->completion_fd();
  });
}

}  // extern "C"
