// SPDX-License-Identifier: Apache-2.0
#include "daemon/cluster/probe.h"

#include <time.h>

#include <algorithm>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "daemon/cluster/control_plane.h"

namespace gsync::cluster {

namespace {

// CLOCK_REALTIME: the clock whose skew between hosts the probe estimates
// (the daemon's own deadlines run on the monotonic one).
int64_t realtime_ns() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

double us_since(Clock::time_point t, Clock::time_point now) {
  return std::chrono::duration<double, std::micro>(now - t).count();
}

const char* state_name(transport::PeerState s) {
  return s == transport::PeerState::kUp     ? "up"
         : s == transport::PeerState::kDown ? "down"
                                            : "connecting";
}

std::string mib(uint64_t bytes) { return fmt::format("{:.1f} MiB", double(bytes) / (1 << 20)); }

}  // namespace

void Prober::start(const ProbeOptions& options, Done done) {
  Run& run = runs_[next_id_];
  run.id = next_id_++;
  run.options = options;
  run.deadline = Clock::now() + options.timeout;
  run.done = std::move(done);
  const int hosts = static_cast<int>(cp_.cluster().hosts.size());
  for (int h = 0; h < hosts; h++) {
    if (h == cp_.self() || !cp_.is_member(h)) continue;
    PeerRun p;
    p.host = h;
    auto st = cp_.net().stats(h);
    p.state = state_name(st.state);
    if (!cp_.peer_up(h))
      p.error = fmt::format("not probed: the link is {}{}", p.state,
                            st.last_error.empty() ? "" : " (" + st.last_error + ")");
    run.peers.push_back(std::move(p));
  }
  for (PeerRun& p : run.peers)
    if (p.error.empty()) send_ping(run, p);
  finish_if_done(run.id);
}

void Prober::send_ping(const Run& run, PeerRun& p) {
  Probe m;
  m.kind = kProbePing;
  m.seq = ++p.seq;
  m.id = run.id;
  p.phase = Phase::kPinging;
  p.sent_at = Clock::now();
  m.sent_ns = realtime_ns();
  cp_.send(p.host, as_bytes(m));
}

// The whole burst goes out at once: the link's queue holds it, and the
// control stream carries it in order, so the peer's one reply to the last
// chunk times all of it.
void Prober::send_burst(const Run& run, PeerRun& p) {
  p.phase = Phase::kData;
  p.sent_at = Clock::now();
  const uint64_t total = run.options.bytes;
  for (uint64_t off = 0; off < total; off += kProbeChunkBytes) {
    Probe m;
    m.kind = kProbeData;
    m.seq = ++p.seq;
    m.id = run.id;
    m.sent_ns = realtime_ns();
    m.offset = off;
    m.total = total;
    cp_.send(p.host, encode_probe(m, std::min<uint64_t>(kProbeChunkBytes, total - off)));
  }
}

void Prober::on_message(int peer, std::string_view msg) {
  if (static_cast<uint8_t>(msg[0]) == kProbe)
    answer(peer, msg);
  else
    on_reply(peer, msg);
}

void Prober::answer(int peer, std::string_view msg) {
  const int64_t received = realtime_ns();
  Probe p;
  size_t payload = 0;
  std::string why;
  if (!decode_probe(msg, &p, &payload, &why)) {
    spdlog::error("host {}: malformed Probe ({} bytes): {}; ignored", cp_.host_id(peer),
                  msg.size(), why);
    return;
  }
  if (auto r = answer_probe(p, payload, received, realtime_ns())) cp_.send(peer, as_bytes(*r));
}

void Prober::on_reply(int peer, std::string_view msg) {
  ProbeReply r;
  std::string why;
  if (!decode_probe_reply(msg, &r, &why)) {
    spdlog::error("host {}: malformed ProbeReply ({} bytes): {}; ignored", cp_.host_id(peer),
                  msg.size(), why);
    return;
  }
  auto it = runs_.find(r.id);
  if (it == runs_.end()) return;  // a run that ended (its deadline passed)
  Run& run = it->second;
  auto p = std::find_if(run.peers.begin(), run.peers.end(),
                        [peer](const PeerRun& x) { return x.host == peer; });
  if (p == run.peers.end()) return;
  if (r.kind == kProbePing && p->phase == Phase::kPinging && r.seq == p->seq) {
    on_ping_reply(run, *p, r);
  } else if (r.kind == kProbeData && p->phase == Phase::kData && r.bytes == run.options.bytes) {
    p->data_seconds = us_since(p->sent_at, Clock::now()) / 1e6;
    p->phase = Phase::kDone;
  } else {
    spdlog::debug("host {}: ProbeReply of probe {} seq {} not expected; ignored",
                  cp_.host_id(peer), r.id, r.seq);
    return;
  }
  finish_if_done(run.id);
}

void Prober::on_ping_reply(Run& run, PeerRun& p, const ProbeReply& r) {
  const auto now = Clock::now();
  const double rtt = us_since(p.sent_at, now);
  ClockSample s = midpoint(r.sent_ns, r.received_ns, r.replied_ns, realtime_ns());
  if (p.rtt_us.empty() || rtt < *std::min_element(p.rtt_us.begin(), p.rtt_us.end())) p.best = s;
  p.rtt_us.push_back(rtt);
  if (static_cast<int>(p.rtt_us.size()) < run.options.pings)
    send_ping(run, p);
  else if (run.options.bytes > 0)
    send_burst(run, p);
  else
    p.phase = Phase::kDone;
}

void Prober::peer_down(int peer, const Status& why) {
  std::vector<uint64_t> touched;
  for (auto& [id, run] : runs_)
    for (PeerRun& p : run.peers)
      if (p.host == peer && (p.phase == Phase::kPinging || p.phase == Phase::kData)) {
        p.phase = Phase::kFailed;
        p.error = "the link went down during the probe: " + why.message();
        touched.push_back(id);
      }
  for (uint64_t id : touched) finish_if_done(id);
}

void Prober::tick(Clock::time_point now) {
  std::vector<uint64_t> due;
  for (const auto& [id, run] : runs_)
    if (now >= run.deadline) due.push_back(id);
  for (uint64_t id : due) finish_if_done(id, true);
}

std::string Prober::silent_error(const Run& run, const PeerRun& p) const {
  std::string got =
      p.phase == Phase::kPinging
          ? fmt::format("{} of {} pings answered", p.rtt_us.size(), run.options.pings)
          : fmt::format("{} pings answered, the {} burst not acknowledged", p.rtt_us.size(),
                        mib(run.options.bytes));
  return fmt::format("{} did not answer within {} ms: {}", cp_.host_id(p.host),
                     run.options.timeout.count(), got);
}

void Prober::finish_if_done(uint64_t id, bool deadline_passed) {
  auto it = runs_.find(id);
  if (it == runs_.end()) return;
  Run& run = it->second;
  for (PeerRun& p : run.peers) {
    if (p.phase != Phase::kPinging && p.phase != Phase::kData) continue;
    if (!deadline_passed) return;
    p.error = silent_error(run, p);
    p.phase = Phase::kFailed;
    spdlog::warn("probe {}: {}", run.id, p.error);
  }
  nlohmann::json peers = nlohmann::json::array();
  for (const PeerRun& p : run.peers) peers.push_back(peer_report(run, p));
  nlohmann::json report{{"probe",
                         {{"id", run.id},
                          {"pings", run.options.pings},
                          {"bytes", run.options.bytes},
                          {"timeout_ms", run.options.timeout.count()}}},
                        {"self", cp_.self_id()},
                        {"peers", std::move(peers)}};
  Done done = std::move(run.done);
  runs_.erase(it);  // before done: it may start another run
  done(report);
}

nlohmann::json Prober::peer_report(const Run& run, const PeerRun& p) const {
  using nlohmann::json;
  const auto& host = cp_.cluster().hosts[size_t(p.host)];
  json j{{"host", host.id},
         {"address", fmt::format("{}:{}", host.address, host.port)},
         {"state", p.state},
         {"ok", p.phase == Phase::kDone},
         {"error", p.error.empty() ? json(nullptr) : json(p.error)},
         {"pings", p.rtt_us.size()},
         {"rtt_us", nullptr},
         {"clock_offset_us", nullptr},
         {"clock_uncertainty_us", nullptr},
         {"bytes", p.phase == Phase::kDone ? run.options.bytes : 0},
         {"seconds", nullptr},
         {"gbit_per_s", nullptr}};
  if (!p.rtt_us.empty()) {
    std::vector<double> v = p.rtt_us;
    std::sort(v.begin(), v.end());
    j["rtt_us"] = {{"min", v.front()}, {"median", v[v.size() / 2]}, {"max", v.back()}};
    j["clock_offset_us"] = p.best.offset_ns / 1e3;
    j["clock_uncertainty_us"] = p.best.rtt_ns / 2e3;
  }
  if (p.phase == Phase::kDone && run.options.bytes > 0 && p.data_seconds > 0) {
    j["seconds"] = p.data_seconds;
    j["gbit_per_s"] = double(run.options.bytes) * 8 / p.data_seconds / 1e9;
  }
  return j;
}

}  // namespace gsync::cluster
