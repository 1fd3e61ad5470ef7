// SPDX-License-Identifier: Apache-2.0
//
// The peer links as gsyncctl peers sees them: state and traffic each way per
// peer, sampled once a second.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "daemon/cluster/control_plane.h"

namespace gsync::cluster {

void ControlPlane::sample_rates() {
  auto now = Clock::now();
  for (int h = 0; h < static_cast<int>(cluster_.hosts.size()); h++) {
    if (h == cluster_.self) continue;
    auto st = net_->stats(h);
    sent_meter_[size_t(h)].add(st.bytes_sent - last_sent_[size_t(h)], now);
    recv_meter_[size_t(h)].add(st.bytes_received - last_recv_[size_t(h)], now);
    last_sent_[size_t(h)] = st.bytes_sent;
    last_recv_[size_t(h)] = st.bytes_received;
  }
}

nlohmann::json ControlPlane::peers_report() const {
  using nlohmann::json;
  auto now = Clock::now();
  json peers = json::array();
  for (int h = 0; h < static_cast<int>(cluster_.hosts.size()); h++) {
    if (h == cluster_.self) continue;
    const auto& host = cluster_.hosts[size_t(h)];
    auto st = net_->stats(h);
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
                     {"payload_wire_bytes", traffic_ ? traffic_->payload_sent(h).wire : 0},
                     {"payload_logical_bytes", traffic_ ? traffic_->payload_sent(h).logical : 0},
                     {"send_gbps", sent_meter_[size_t(h)].rate(now) / 1e9},
                     {"recv_gbps", recv_meter_[size_t(h)].rate(now) / 1e9},
                     {"connects", st.connects},
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
  }
  const auto& me = cluster_.hosts[size_t(cluster_.self)];
  return json{{"cluster", cluster_.name},
              {"self", {{"host", me.id}, {"address", fmt::format("{}:{}", me.address, me.port)},
                        {"rack", me.rack}}},
              {"epoch", epoch_},
              {"peers", peers}};
}

}  // namespace gsync::cluster
