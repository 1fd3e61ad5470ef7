// SPDX-License-Identifier: Apache-2.0
//
// The anomaly guard of a job's allreduces (docs/fault-tolerance.md, "The
// anomaly guard"), written once for both sides: what the hello carries,
// and its rules. libgsync checks them before it connects; the daemon
// checks them again on what the hello says.
#pragma once

#include <cstdint>
#include <string>

namespace gsync::proto {

struct Guard {
  bool on = false;
  uint8_t sigmas = 6;     // a norm this many standard deviations above the mean is a spike
  uint16_t window = 128;  // steps of the rolling mean and deviation
  bool operator==(const Guard&) const = default;
};
constexpr uint8_t kMaxGuardSigmas = 100;
constexpr uint16_t kMinGuardWindow = 8;

// In the hello (HelloRequest::guard): bit 0 on, bits 8-15 sigmas, bits
// 16-31 window; 0: off.
constexpr uint32_t to_wire(const Guard& g) {
  return g.on ? 1u | uint32_t{g.sigmas} << 8 | uint32_t{g.window} << 16 : 0u;
}

inline std::string describe(const Guard& g) {
  if (!g.on) return "off";
  return std::to_string(g.sigmas) + " sigmas over " + std::to_string(g.window) + " steps";
}

// "" or what is wrong with v.
inline std::string from_wire_guard(uint32_t v, Guard* out) {
  Guard g;
  if (v == 0) {
    *out = g;
    return "";
  }
  if ((v & 0xfe) != 0 || (v & 1) == 0) return "anomaly guard word has unknown bits set";
  g.on = true;
  g.sigmas = static_cast<uint8_t>(v >> 8);
  g.window = static_cast<uint16_t>(v >> 16);
  if (g.sigmas < 1 || g.sigmas > kMaxGuardSigmas)
    return "anomaly guard sigmas " + std::to_string(g.sigmas) + " is outside 1 .. " +
           std::to_string(kMaxGuardSigmas);
  if (g.window < kMinGuardWindow)
    return "anomaly guard window " + std::to_string(g.window) + " is below " +
           std::to_string(kMinGuardWindow);
  *out = g;
  return "";
}

}  // namespace gsync::proto
