// SPDX-License-Identifier: Apache-2.0
//
// The peer links as gsyncctl peers sees them: state and traffic each way per
// peer, sampled once a second, and what each peer runs (HostInfo); the
// probe gsyncctl doctor asks for.
#include <unistd.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "daemon/cluster/control_plane.h"
#include "daemon/cluster/probe_messages.h"
#include "daemon/core/build_id.h"
#include "gsync_build_config.h"

namespace gsync::cluster {

void ControlPlane::send_host_info(int peer) {
  HostInfo m;
  m.pid = static_cast<uint32_t>(getpid());
  set_field(m.version, sizeof m.version, GSYNC_VERSION_STRING);
  set_field(m.build_id, sizeof m.build_id, build_id());
  net_->send_control(peer, as_bytes(m));
}

void ControlPlane::on_host_info(int peer, std::string_view msg) {
  HostInfo m;
  if (!decode_exact(msg, &m)) {
    spdlog::error("host {}: malformed HostInfo ({} bytes); ignored", host_id(peer), msg.size());
    return;
  }
  PeerBuild& b = peer_builds_[size_t(peer)];
  b.known = true;
  b.version = field(m.version, sizeof m.version);
  b.build_id = field(m.build_id, sizeof m.build_id);
  b.pid = m.pid;
  if (b.build_id != build_id())
    spdlog::warn("host {} runs gsyncd {} build {}, this daemon {} build {}", host_id(peer),
                 b.version, b.build_id.empty() ? "(none)" : b.build_id, GSYNC_VERSION_STRING,
                 build_id().empty() ? "(none)" : build_id());
}

void ControlPlane::probe(const ProbeOptions& options, Prober::Done done) {
  prober_->start(options, std::move(done));
}

void ControlPlane::sample_rates() {
  auto now = Clock::now();
  for (int h = 0; h < static_cast<int>(cluster_.hosts.size()); h++) {
    if (h == cluster_.self || !is_member(h)) continue;
    auto st = net_->stats(h);
    sent_meter_[size_t(h)].add(st.bytes_sent - last_sent_[size_t(h)], now);
    recv_meter_[size_t(h)].add(st.bytes_received - last_recv_[size_t(h)], now);
    last_sent_[size_t(h)] = st.bytes_sent;
    last_recv_[size_t(h)] = st.bytes_received;
  }
}

namespace {

// A DPDK link's part of gsyncctl peers (docs/transport.md, "The DPDK
// provider").
nlohmann::json dpdk_report(const transport::PeerStats::Dpdk& d) {
  nlohmann::json by = nlohmann::json::object();
  for (const auto& [why, n] : d.dropped_by_reason) by[why] = n;
  return {{"port", d.port},
          {"mac", d.mac},
          {"remote_mac", d.remote_mac},
          {"link", d.link},
          {"remote_link", d.remote_link},
          {"frames_sent", d.frames_sent},
          {"frames_resent", d.frames_resent},
          {"timeouts", d.timeouts},
          {"frames_received", d.frames_received},
          {"duplicates", d.duplicates},
          {"port_dropped", d.dropped},
          {"port_dropped_by_reason", by},
          {"port_missed", d.port_missed},
          {"tx_no_buffer", d.tx_no_buffer},
          {"rx_lcore", d.rx_lcore},
          {"rx_wakeups", d.rx_wakeups},
          {"rx_ring_full", d.rx_ring_full},
          {"rx_armed", d.rx_armed},
          {"srtt_us", d.srtt_us},
          {"rto_us", d.rto_us}};
}

}  // namespace

nlohmann::json ControlPlane::peers_report() const {
  using nlohmann::json;
  auto now = Clock::now();
  json peers = json::array();
  for (int h = 0; h < static_cast<int>(cluster_.hosts.size()); h++) {
    if (h == cluster_.self || !is_member(h)) continue;
    const auto& host = cluster_.hosts[size_t(h)];
    auto st = net_->stats(h);
    CrossHostService::Payload payload;
    for (const CrossHostService* s : services_.all()) {
      payload.wire += s->payload_sent(h).wire;
      payload.logical += s->payload_sent(h).logical;
    }
    const PeerBuild& b = peer_builds_[size_t(h)];
    const char* state = st.state == transport::PeerState::kUp       ? "up"
                        : st.state == transport::PeerState::kDown ? "down"
                                                                   : "connecting";
    peers.push_back({{"host", host.id},
                     {"address", fmt::format("{}:{}", host.address, host.port)},
                     {"rack", host.rack},
                     {"state", state},
                     {"transport", st.transport},
                     {"streams", st.streams},
                     {"bytes_sent", st.bytes_sent},
                     {"bytes_received", st.bytes_received},
                     // Tensor payload written to the peer, on the wire and
                     // the fp32 bytes it carried (they differ where a codec
                     // applied: docs/compression.md).
                     {"payload_wire_bytes", payload.wire},
                     {"payload_logical_bytes", payload.logical},
                     {"send_gbps", sent_meter_[size_t(h)].rate(now) / 1e9},
                     {"recv_gbps", recv_meter_[size_t(h)].rate(now) / 1e9},
                     {"connects", st.connects},
                     // What the peer said it runs when its link last came
                     // up (HostInfo); null before it has said.
                     {"version", b.known ? json(b.version) : json(nullptr)},
                     {"build_id", b.known ? json(b.build_id) : json(nullptr)},
                     {"pid", b.known ? json(b.pid) : json(nullptr)},
                     {"last_error", st.last_error},
                     // Seconds since last_error happened; null when there is none.
                     {"last_error_age_s",
                      st.last_error.empty()
                          ? json(nullptr)
                          : json(std::chrono::duration<double>(now - st.last_error_at).count())}});
    if (st.transport == "verbs") {
      auto& p = peers.back();
      p["verbs"] = {{"device", st.verbs_device}, {"port", st.verbs_port},
                    {"gid_index", st.verbs_gid_index}, {"qpn", st.verbs_qpn},
                    {"remote_qpn", st.verbs_remote_qpn},
                    {"completion_errors", st.verbs_completion_errors}};
    }
    if (st.transport == "dpdk") peers.back()["dpdk"] = dpdk_report(st.dpdk);
  }
  const auto& me = cluster_.hosts[size_t(cluster_.self)];
  return json{{"cluster", cluster_.name},
              {"self", {{"host", me.id}, {"address", fmt::format("{}:{}", me.address, me.port)},
                        {"rack", me.rack}, {"version", GSYNC_VERSION_STRING},
                        {"build_id", build_id()}, {"pid", getpid()}}},
              {"epoch", epoch_},
              {"membership", membership_report()},
              {"peers", peers}};
}

}  // namespace gsync::cluster
