// SPDX-License-Identifier: Apache-2.0
#include "tools/gsyncctl/trace_clock.h"

#include <fmt/format.h>

#include <cmath>

namespace gsync::cli {

namespace {
using nlohmann::json;

std::string host_of(const json& ops) {
  auto it = ops.is_object() ? ops.find("host") : ops.end();
  return ops.is_object() && it != ops.end() && it->is_string() ? it->get<std::string>() : "";
}

// realtime_ns - now_ns of an ops reply: where its monotonic clock sits on
// its machine's wall clock. False when the reply has not both (a daemon
// older than the field).
bool wall_minus_monotonic(const json& ops, int64_t* out) {
  if (!ops.is_object()) return false;
  auto rt = ops.find("realtime_ns"), mono = ops.find("now_ns");
  if (rt == ops.end() || mono == ops.end() || !rt->is_number_integer() ||
      !mono->is_number_integer() || mono->get<int64_t>() <= 0)
    return false;
  *out = rt->get<int64_t>() - mono->get<int64_t>();
  return true;
}

// The probe's row for host, or null.
const json* probe_peer(const json& probe, const std::string& host) {
  if (!probe.is_object() || !probe.contains("peers") || !probe["peers"].is_array()) return nullptr;
  for (const json& p : probe["peers"])
    if (p.is_object() && p.value("host", json()).is_string() && p["host"] == host) return &p;
  return nullptr;
}

double number_or(const json& j, const char* key, double fallback) {
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : fallback;
}

// Source i's shift against the first source (ref), or why there is none.
ClockShift shift_of(const TraceSource& src, const TraceSource& ref, const json& probe) {
  ClockShift s;
  s.host = host_of(src.ops);
  const std::string ref_host = host_of(ref.ops);
  if (s.host.empty()) {
    s.how = "own clock: the daemon is in no cluster (no host id)";
    return s;
  }
  if (s.host == ref_host) {
    s.applied = true;
    s.how = "the same host as the reference: its clock";
    return s;
  }
  int64_t wall_i = 0, wall_0 = 0;
  if (!wall_minus_monotonic(src.ops, &wall_i) || !wall_minus_monotonic(ref.ops, &wall_0)) {
    s.how = "own clock: an ops reply without realtime_ns (a daemon older than clock offsets)";
    return s;
  }
  if (!probe.is_object() || probe.contains("error")) {
    s.how = fmt::format("own clock: the probe of {} failed: {}", ref.name,
                        probe.is_object() && probe["error"].is_string()
                            ? probe["error"].get<std::string>()
                            : "no reply");
    return s;
  }
  const json* p = probe_peer(probe, s.host);
  if (!p) {
    s.how = fmt::format("own clock: {} is not a peer of {} in its probe", s.host, ref_host);
    return s;
  }
  const double offset_us = number_or(*p, "clock_offset_us", NAN);
  if (std::isnan(offset_us)) {
    const json err = p->value("error", json());
    s.how = fmt::format("own clock: the probe got no clock offset from {}{}", s.host,
                        err.is_string() ? ": " + err.get<std::string>() : "");
    return s;
  }
  s.applied = true;
  s.offset_us = offset_us;
  s.uncertainty_us = number_or(*p, "clock_uncertainty_us", 0);
  s.shift_ns = (wall_i - wall_0) - std::llround(offset_us * 1e3);
  s.how = fmt::format(
      "{}'s wall clock runs {:+.3f} ms against {}'s (probe, +/- {:.3f} ms); its monotonic times "
      "shifted by {:+.3f} ms",
      s.host, offset_us / 1e3, ref_host, s.uncertainty_us / 1e3, double(s.shift_ns) / 1e6);
  return s;
}
}  // namespace

bool needs_probe(const std::vector<TraceSource>& sources) {
  if (sources.size() < 2) return false;
  const std::string ref = host_of(sources.front().ops);
  for (size_t i = 1; i < sources.size(); i++) {
    const std::string h = host_of(sources[i].ops);
    if (!h.empty() && h != ref) return true;
  }
  return false;
}

std::vector<ClockShift> clock_shifts(const std::vector<TraceSource>& sources, const json& probe) {
  std::vector<ClockShift> out;
  if (sources.empty()) return out;
  ClockShift ref;
  ref.applied = true;
  ref.host = host_of(sources.front().ops);
  ref.how = "the reference clock";
  out.push_back(ref);
  for (size_t i = 1; i < sources.size(); i++)
    out.push_back(shift_of(sources[i], sources.front(), probe));
  return out;
}

json clock_metadata(const std::vector<TraceSource>& sources, const std::vector<ClockShift>& shifts) {
  json daemons = json::array();
  for (size_t i = 0; i < sources.size() && i < shifts.size(); i++) {
    const ClockShift& s = shifts[i];
    json d = {{"daemon", sources[i].name},
              {"host", s.host.empty() ? json(nullptr) : json(s.host)},
              {"applied", s.applied},
              {"shift_ns", s.shift_ns},
              {"how", s.how}};
    if (s.applied && i > 0 && s.uncertainty_us > 0) {
      d["probe_offset_us"] = s.offset_us;
      d["probe_uncertainty_us"] = s.uncertainty_us;
    }
    daemons.push_back(std::move(d));
  }
  return {{"clock",
           {{"reference", sources.empty() ? json(nullptr) : json(sources.front().name)},
            {"times", "CLOCK_MONOTONIC of the reference daemon's machine, in microseconds"},
            {"daemons", std::move(daemons)}}}};
}

std::string clock_summary(const std::vector<TraceSource>& sources,
                          const std::vector<ClockShift>& shifts) {
  std::string out;
  for (size_t i = 1; i < sources.size() && i < shifts.size(); i++)
    out += fmt::format("  {}{}: {}\n", sources[i].name,
                       shifts[i].host.empty() ? "" : " (" + shifts[i].host + ")", shifts[i].how);
  return out;
}

}  // namespace gsync::cli
