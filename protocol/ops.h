// SPDX-License-Identifier: Apache-2.0
//
// The wire vocabulary of an operation, written once: opcodes, element types
// and reduction ops as typed enums, their names, and the only conversions
// from the raw bytes of a submission or a peer's message. Shared by
// libgsync, every daemon layer and the tools. A byte off the wire becomes
// one of these through *_from_wire, which refuses values it does not know,
// and is compared as an enum from then on; nothing else casts a raw byte
// into them (NCCL's ncclDataType_t and its one ncclDatatypeToString).
#pragma once

#include <compare>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <string>
#include <string_view>

#include "gsync/gsync.h"

namespace gsync::proto {

// The parameter-server ops (protocol/ps.h, docs/parameter-server.md): a
// tensor declared once, then pushes of gradients and pulls of parameters.
enum class Opcode : uint8_t {
  kAllreduce = 1,
  kBroadcast = 2,
  kBarrier = 3,
  kPsDeclare = 4,
  kPush = 5,
  kPull = 6,
  kPushPull = 7,
  // A batch lease (protocol/lease.h): no tensor, answered by the job's
  // lease keeper, never matched across ranks.
  kLease = 8,
  // An elastic job's world (gsync_world): no tensor; answered by the
  // daemon once the job has a world, the world as text in the completion
  // (protocol/world.h). Never matched across ranks.
  kWorld = 9,
};
constexpr bool is_ps(Opcode o) { return o >= Opcode::kPsDeclare && o <= Opcode::kPushPull; }
constexpr bool is_push(Opcode o) { return o == Opcode::kPush || o == Opcode::kPushPull; }

// A GSYNC_ERR_* code, as a peer's message or the daemon's hello reply may
// carry one: the one place that knows the lowest (a new code moves it).
constexpr int kLowestError = GSYNC_ERR_WORLD_CHANGED;
constexpr bool is_error_code(int c) { return c <= GSYNC_ERR_INVALID && c >= kLowestError; }
// A code's short name, for labels (gsync_op_failures_total{code="timeout"}).
constexpr const char* error_code_name(int c) {
  constexpr const char* kNames[] = {"invalid",  "connect",     "refused",    "version",
                                    "nomem",    "timeout",     "rank_dead",  "mismatch",
                                    "protocol", "closed",      "again",      "busy",
                                    "unsupported", "permission", "internal", "host_lost",
                                    "anomaly", "world_changed"};
  static_assert(std::size(kNames) == size_t(-kLowestError));
  return is_error_code(c) ? kNames[-c - 1] : "unknown";
}
enum class DType : uint8_t { kF32 = 0, kF16 = 1, kBF16 = 2, kF64 = 3, kI32 = 4, kU8 = 5 };
enum class RedOp : uint8_t { kSum = 0, kAvg = 1, kWeightedAvg = 2, kMin = 3, kMax = 4 };
// How fp32 gradients cross between hosts (docs/compression.md).
enum class Codec : uint8_t { kNone = 0, kF16 = 1, kBF16 = 2, kInt8 = 3, kTopk = 4 };

// The public C enums (gsync.h) are the same numbers: checked here, once.
static_assert(static_cast<int>(DType::kF32) == GSYNC_FLOAT32 &&
              static_cast<int>(DType::kF16) == GSYNC_FLOAT16 &&
              static_cast<int>(DType::kBF16) == GSYNC_BFLOAT16 &&
              static_cast<int>(DType::kF64) == GSYNC_FLOAT64 &&
              static_cast<int>(DType::kI32) == GSYNC_INT32 &&
              static_cast<int>(DType::kU8) == GSYNC_UINT8);
static_assert(static_cast<int>(RedOp::kSum) == GSYNC_SUM &&
              static_cast<int>(RedOp::kAvg) == GSYNC_AVG &&
              static_cast<int>(RedOp::kWeightedAvg) == GSYNC_WEIGHTED_AVG &&
              static_cast<int>(RedOp::kMin) == GSYNC_MIN &&
              static_cast<int>(RedOp::kMax) == GSYNC_MAX);
static_assert(static_cast<int>(Codec::kNone) == GSYNC_CODEC_NONE &&
              static_cast<int>(Codec::kF16) == GSYNC_CODEC_FP16 &&
              static_cast<int>(Codec::kBF16) == GSYNC_CODEC_BF16 &&
              static_cast<int>(Codec::kInt8) == GSYNC_CODEC_INT8 &&
              static_cast<int>(Codec::kTopk) == GSYNC_CODEC_TOPK);

// The byte that goes on the wire.
constexpr uint8_t wire(Opcode v) { return static_cast<uint8_t>(v); }
constexpr uint8_t wire(DType v) { return static_cast<uint8_t>(v); }
constexpr uint8_t wire(RedOp v) { return static_cast<uint8_t>(v); }
constexpr uint8_t wire(Codec v) { return static_cast<uint8_t>(v); }

// A byte from the wire (or an int from the C API); false for a value that
// names nothing, and *out is left alone.
constexpr bool opcode_from_wire(int v, Opcode* out) {
  if (v < 1 || v > 9) return false;
  *out = static_cast<Opcode>(v);
  return true;
}
constexpr bool dtype_from_wire(int v, DType* out) {
  if (v < 0 || v > 5) return false;
  *out = static_cast<DType>(v);
  return true;
}
constexpr bool redop_from_wire(int v, RedOp* out) {
  if (v < 0 || v > 4) return false;
  *out = static_cast<RedOp>(v);
  return true;
}

constexpr bool codec_from_wire(int v, Codec* out) {
  if (v < 0 || v > 4) return false;
  *out = static_cast<Codec>(v);
  return true;
}

constexpr const char* name(Opcode v) {
  switch (v) {
    case Opcode::kAllreduce: return "allreduce";
    case Opcode::kBroadcast: return "broadcast";
    case Opcode::kBarrier: return "barrier";
    case Opcode::kPsDeclare: return "ps_declare";
    case Opcode::kPush: return "push";
    case Opcode::kPull: return "pull";
    case Opcode::kPushPull: return "push_pull";
    case Opcode::kLease: return "lease";
    case Opcode::kWorld: return "world";
  }
  return "unknown-op";
}
constexpr const char* name(DType v) {
  switch (v) {
    case DType::kF32: return "float32";
    case DType::kF16: return "float16";
    case DType::kBF16: return "bfloat16";
    case DType::kF64: return "float64";
    case DType::kI32: return "int32";
    case DType::kU8: return "uint8";
  }
  return "unknown-dtype";
}
constexpr const char* name(RedOp v) {
  switch (v) {
    case RedOp::kSum: return "sum";
    case RedOp::kAvg: return "avg";
    case RedOp::kWeightedAvg: return "weighted_avg";
    case RedOp::kMin: return "min";
    case RedOp::kMax: return "max";
  }
  return "unknown-redop";
}
constexpr const char* name(Codec v) {
  switch (v) {
    case Codec::kNone: return "none";
    case Codec::kF16: return "fp16";
    case Codec::kBF16: return "bf16";
    case Codec::kInt8: return "int8";
    case Codec::kTopk: return "topk";
  }
  return "unknown-codec";
}

// The name of a raw value as it came, for messages about bad input.
constexpr const char* opcode_name(int v) {
  Opcode o{};
  return opcode_from_wire(v, &o) ? name(o) : "unknown-op";
}
constexpr const char* dtype_name(int v) {
  DType d{};
  return dtype_from_wire(v, &d) ? name(d) : "unknown-dtype";
}
constexpr const char* redop_name(int v) {
  RedOp r{};
  return redop_from_wire(v, &r) ? name(r) : "unknown-redop";
}
constexpr const char* codec_name(int v) {
  Codec c{};
  return codec_from_wire(v, &c) ? name(c) : "unknown-codec";
}

// A codec as a person writes it (a config file, a command line): one of the
// names above; false for anything else, and *out is left alone.
constexpr bool parse_codec(std::string_view text, Codec* out) {
  for (int v = 0; v <= 4; ++v) {
    const Codec c = static_cast<Codec>(v);
    if (text == name(c)) {
      *out = c;
      return true;
    }
  }
  return false;
}

constexpr size_t dtype_size(DType v) {
  switch (v) {
    case DType::kF32:
    case DType::kI32: return 4;
    case DType::kF16:
    case DType::kBF16: return 2;
    case DType::kF64: return 8;
    case DType::kU8: return 1;
  }
  return 0;
}


// Whether a reduction has a meaning on an element type: a weighted average
// of integers has none, and bytes are summed (mod 256), not averaged.
constexpr bool defined(DType t, RedOp op) {
  if (t == DType::kU8) return op == RedOp::kSum || op == RedOp::kMin || op == RedOp::kMax;
  return !(t == DType::kI32 && op == RedOp::kWeightedAvg);
}

// Which hops of an allreduce a codec applies to (docs/compression.md,
// "Where the codecs apply"): between racks only, every hop between hosts, or
// every hop there is (the cross-host schedule treats the last two alike).
enum class Hops : uint8_t { kCrossRack = 0, kCrossHost = 1, kAll = 2 };
constexpr uint8_t wire(Hops v) { return static_cast<uint8_t>(v); }
constexpr bool hops_from_wire(int v, Hops* out) {
  if (v < 0 || v > 2) return false;
  *out = static_cast<Hops>(v);
  return true;
}
constexpr const char* name(Hops v) {
  switch (v) {
    case Hops::kCrossRack: return "cross_rack";
    case Hops::kCrossHost: return "cross_host";
    case Hops::kAll: return "all";
  }
  return "unknown-hops";
}

// How an allreduce's data crosses between hosts (protocol/compression.h
// has its rules, its place in a submission and its text form).
struct Compression {
  Codec codec = Codec::kNone;
  Hops hops = Hops::kCrossRack;
  bool error_feedback = true;
  uint32_t block = 0;       // int8: values per scale; 0 for every other codec
  float topk_fraction = 0;  // topk: the share of values sent; 0 for the others
  bool on() const { return codec != Codec::kNone; }
  bool operator==(const Compression& o) const {
    return codec == o.codec && hops == o.hops && error_feedback == o.error_feedback &&
           block == o.block && std::memcmp(&topk_fraction, &o.topk_fraction, sizeof topk_fraction) == 0;
  }
};

// The optimizer a parameter server applies to its shard (protocol/ps.h).
enum class Optimizer : uint8_t { kSgd = 0, kAdam = 1, kAdamW = 2 };
constexpr const char* name(Optimizer o) {
  switch (o) {
    case Optimizer::kSgd: return "sgd";
    case Optimizer::kAdam: return "adam";
    case Optimizer::kAdamW: return "adamw";
  }
  return "unknown-optimizer";
}
constexpr bool optimizer_from_wire(int v, Optimizer* out) {
  if (v < 0 || v > 2) return false;
  *out = static_cast<Optimizer>(v);
  return true;
}

// A parameter's options (protocol/ps.h: their rules and their place in
// a declaration).
struct PsOptions {
  Optimizer optimizer = Optimizer::kSgd;
  float lr = 0.01f, momentum = 0, weight_decay = 0, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;
  // Checkpoints of the servers' state (docs/fault-tolerance.md); both 0: none.
  uint32_t checkpoint_clocks = 0, checkpoint_ms = 0;
  bool resume = true;  // a declaration resumes from the newest checkpoint all hosts hold
  bool checkpoints() const { return checkpoint_clocks != 0 || checkpoint_ms != 0; }
  // The optimizer alone: what a checkpoint must match to be loaded.
  PsOptions optimizer_only() const {
    PsOptions o = *this;
    o.checkpoint_clocks = o.checkpoint_ms = 0;
    o.resume = true;
    return o;
  }
  bool operator==(const PsOptions&) const = default;
};

// What every rank and every host of an op must agree on before any data
// moves.
struct OpShape {
  Opcode opcode = Opcode::kAllreduce;
  DType dtype = DType::kF32;
  RedOp redop = RedOp::kSum;
  uint64_t count = 0;  // elements; 0 for a barrier
  int32_t root = -1;   // broadcast: the root's rank
  Compression compress;  // allreduce of float32 between hosts
  // Parameter-server ops: a declaration's options; a push's learning rate
  // (0: the declared one).
  PsOptions ps;
  float lr = 0;
  size_t elem() const { return dtype_size(dtype); }
  uint64_t bytes() const { return count * elem(); }
  bool operator==(const OpShape&) const = default;
};

// Ops of a job are matched across ranks and hosts by (tensor key, step).
struct OpId {
  uint64_t key = 0;
  uint64_t step = 0;
  auto operator<=>(const OpId&) const = default;
};
struct OpIdHash {
  size_t operator()(const OpId& o) const { return o.key * 0x9e3779b97f4a7c15ull ^ o.step; }
};

// An op as errors and logs name it, in every layer: "job j allreduce key 3
// step 7" (job: its name between hosts).
inline std::string describe_op(std::string_view job, Opcode op, const OpId& id) {
  std::string out = "job ";
  out.append(job).append(" ").append(name(op));
  out.append(" key ").append(std::to_string(id.key));
  out.append(" step ").append(std::to_string(id.step));
  return out;
}

}  // namespace gsync::proto
