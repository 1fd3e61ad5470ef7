// SPDX-License-Identifier: Apache-2.0
//
// The parameter-server mode's vocabulary, written once for both sides
// (docs/parameter-server.md): the sync modes, the server-side optimizers,
// the options a declaration carries, and their rules. libgsync checks them
// before it submits (GSYNC_ERR_INVALID naming the field); the daemon checks
// them again on what it copies out of shared memory.
//
// A declaration's options travel in the 64 bytes before its tensor in the
// arena (PsDeclareHeader): the submission entry has no room for seven
// numbers, and the arena is where the rank's bytes are anyway.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>
#include <type_traits>

#include "protocol/ops.h"

namespace gsync::proto {

namespace ps_detail {
inline std::string num(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%g", v);
  return b;
}
// Concatenation by appends: GCC 12 warns on "lit" + std::string (bug 105329).
inline void add(std::string&) {}
template <class T, class... R>
void add(std::string& out, const T& first, const R&... rest) {
  if constexpr (std::is_arithmetic_v<T>) {
    out.append(std::to_string(first));
  } else {
    out.append(std::string_view(first));
  }
  add(out, rest...);
}
template <class... T>
std::string cat(const T&... parts) {
  std::string out;
  add(out, parts...);
  return out;
}
}  // namespace ps_detail

// How a parameter-server job's workers wait for each other.
enum class SyncMode : uint8_t { kBsp = 0, kAsp = 1, kSsp = 2 };
constexpr const char* name(SyncMode m) {
  switch (m) {
    case SyncMode::kBsp: return "bsp";
    case SyncMode::kAsp: return "asp";
    case SyncMode::kSsp: return "ssp";
  }
  return "unknown-sync";
}
constexpr bool sync_from_wire(int v, SyncMode* out) {
  if (v < 0 || v > 2) return false;
  *out = static_cast<SyncMode>(v);
  return true;
}
// A staleness bound beyond which SSP is ASP in all but name.
constexpr uint32_t kMaxStaleness = 1u << 20;

struct Sync {
  SyncMode mode = SyncMode::kBsp;
  uint32_t staleness = 0;  // ssp only
  bool operator==(const Sync&) const = default;
};
// "bsp", "asp", "ssp:3".
inline std::string describe(const Sync& s) {
  return s.mode == SyncMode::kSsp ? ps_detail::cat("ssp:", s.staleness) : name(s.mode);
}
// In the hello (HelloRequest::sync): the mode in bits 0-7, the staleness in
// bits 8-31.
constexpr uint32_t to_wire(const Sync& s) {
  return static_cast<uint32_t>(s.mode) | (s.mode == SyncMode::kSsp ? s.staleness << 8 : 0);
}
inline std::string from_wire(uint32_t v, Sync* out) {
  Sync s;
  if (!sync_from_wire(static_cast<int>(v & 0xff), &s.mode))
    return ps_detail::cat("sync mode ", v & 0xff, " is not bsp (0), asp (1) or ssp (2)");
  s.staleness = v >> 8;
  if (s.mode != SyncMode::kSsp && s.staleness != 0)
    return ps_detail::cat("a staleness of ", s.staleness, " with sync mode ", name(s.mode),
                          " (ssp only)");
  if (s.staleness > kMaxStaleness)
    return ps_detail::cat("staleness ", s.staleness, " is over ", kMaxStaleness);
  *out = s;
  return "";
}

constexpr uint32_t kPsDeclareMagic = 0x44535047;  // "GPSD"
// The step a declaration is matched by (key, step) under: no clock reaches it.
constexpr uint64_t kDeclareStep = ~uint64_t{0} - 1;

// The 64 bytes before a declaration's tensor in the arena.
struct PsDeclareHeader {
  uint32_t magic;
  uint8_t optimizer;  // Optimizer
  uint8_t pad[3];
  float lr;            // the learning rate when a push gives none
  float momentum;      // sgd: in [0, 1)
  float weight_decay;  // sgd and adam: added to the gradient; adamw: decoupled
  float beta1, beta2;  // adam, adamw: in [0, 1)
  float eps;           // adam, adamw: > 0
  // Checkpoints (docs/fault-tolerance.md): the cadence, and whether the
  // declaration resumes from the newest checkpoint every host holds.
  uint32_t checkpoint_clocks;  // every this many clocks; 0: not by clocks
  uint32_t checkpoint_ms;      // every this many milliseconds; 0: not by time
  uint8_t resume;              // 0 or 1
  uint8_t reserved[23];        // zero
};
static_assert(sizeof(PsDeclareHeader) == 64);

// "sgd (lr 0.1, momentum 0.9)", "adam (lr 0.001, betas 0.9/0.999, eps 1e-08)".
inline std::string describe(const PsOptions& o) {
  using ps_detail::num;
  std::string s = name(o.optimizer);
  s.append(" (lr ").append(num(o.lr));
  if (o.optimizer == Optimizer::kSgd && o.momentum != 0) s.append(", momentum ").append(num(o.momentum));
  if (o.optimizer != Optimizer::kSgd)
    s.append(", betas ").append(num(o.beta1)).append("/").append(num(o.beta2)).append(", eps ").append(num(o.eps));
  if (o.weight_decay != 0) s.append(", weight decay ").append(num(o.weight_decay));
  if (o.checkpoint_clocks != 0)
    s.append(", checkpoint every ").append(std::to_string(o.checkpoint_clocks)).append(" clocks");
  if (o.checkpoint_ms != 0)
    s.append(", checkpoint every ").append(std::to_string(o.checkpoint_ms)).append(" ms");
  if (o.checkpoint_clocks != 0 || o.checkpoint_ms != 0) s.append(o.resume ? ", resume" : ", no resume");
  return s.append(")");
}

// The options' rules: "" or what is wrong, naming the field and its value.
inline std::string check(const PsOptions& o) {
  using ps_detail::cat;
  using ps_detail::num;
  auto in01 = [](float v) { return std::isfinite(v) && v >= 0 && v < 1; };
  if (!(std::isfinite(o.lr) && o.lr > 0)) return cat("lr ", num(o.lr), " must be finite and > 0");
  if (!in01(o.momentum)) return cat("momentum ", num(o.momentum), " is outside [0, 1)");
  if (!(std::isfinite(o.weight_decay) && o.weight_decay >= 0))
    return cat("weight_decay ", num(o.weight_decay), " must be finite and >= 0");
  if (o.optimizer != Optimizer::kSgd) {
    if (!in01(o.beta1)) return cat("beta1 ", num(o.beta1), " is outside [0, 1)");
    if (!in01(o.beta2)) return cat("beta2 ", num(o.beta2), " is outside [0, 1)");
    if (!(std::isfinite(o.eps) && o.eps > 0)) return cat("eps ", num(o.eps), " must be finite and > 0");
  }
  return "";
}

inline PsDeclareHeader to_header(const PsOptions& o) {
  PsDeclareHeader h{};
  h.magic = kPsDeclareMagic;
  h.optimizer = static_cast<uint8_t>(o.optimizer);
  h.lr = o.lr;
  h.momentum = o.momentum;
  h.weight_decay = o.weight_decay;
  h.beta1 = o.beta1;
  h.beta2 = o.beta2;
  h.eps = o.eps;
  h.checkpoint_clocks = o.checkpoint_clocks;
  h.checkpoint_ms = o.checkpoint_ms;
  h.resume = o.resume ? 1 : 0;
  return h;
}

// A header copied out of shared memory: "" or what is wrong.
inline std::string from_header(const PsDeclareHeader& h, PsOptions* out) {
  if (h.magic != kPsDeclareMagic)
    return ps_detail::cat("the 64 bytes before a declaration's tensor are not its options (magic ",
                          h.magic, ")");
  PsOptions o;
  if (!optimizer_from_wire(h.optimizer, &o.optimizer))
    return ps_detail::cat("optimizer ", unsigned{h.optimizer}, " is not sgd (0), adam (1) or adamw (2)");
  for (uint8_t b : h.pad)
    if (b != 0) return "the options' padding is not zero";
  for (uint8_t b : h.reserved)
    if (b != 0) return "the options' reserved bytes are not zero";
  o.lr = h.lr;
  o.momentum = h.momentum;
  o.weight_decay = h.weight_decay;
  o.beta1 = h.beta1;
  o.beta2 = h.beta2;
  o.eps = h.eps;
  if (h.resume > 1) return ps_detail::cat("resume ", unsigned{h.resume}, " is not 0 or 1");
  o.checkpoint_clocks = h.checkpoint_clocks;
  o.checkpoint_ms = h.checkpoint_ms;
  o.resume = h.resume != 0;
  if (std::string why = check(o); !why.empty()) return why;
  *out = o;
  return "";
}

// A push's learning rate: its fp32 bits in the entry's compress_arg; 0 for
// the declared one.
inline std::string check_push_lr(uint32_t bits, float* lr) {
  float v;
  std::memcpy(&v, &bits, sizeof v);
  if (bits != 0 && !(std::isfinite(v) && v > 0))
    return ps_detail::cat("lr ", ps_detail::num(v), " must be finite and > 0 (or 0 for the declared one)");
  *lr = bits == 0 ? 0.0f : v;
  return "";
}

}  // namespace gsync::proto
