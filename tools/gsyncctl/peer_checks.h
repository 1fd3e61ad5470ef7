// SPDX-License-Identifier: Apache-2.0
//
// gsyncctl doctor's checks of the cluster (docs/operations.md, "Doctor"),
// from the daemon's `peers` and `probe` reports: each peer's address takes
// a TCP connection from here and its link is up as the daemon sees it;
// each runs this daemon's version and build; its clock; its link's latency
// and bandwidth beside the speed of the interface that routes to it. The
// judge_* functions take the figures and decide, for the unit tests.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tools/gsyncctl/doctor_check.h"

namespace gsync::cli {

// "10.77.1.2:7700", "[fd00::2]:7700", "h2.example:7700" -> host, port.
bool split_address(const std::string& address, std::string* host, std::string* port);

struct TcpConnect {
  bool ok = false;
  double ms = 0;      // until it connected or failed
  std::string error;  // strerror text, or "no answer within N ms"
};
// A TCP connection to host:port, closed at once, within timeout_ms.
TcpConnect tcp_connect(const std::string& host, const std::string& port, int timeout_ms);

// The interface this host's routes send to host through ("" when unknown).
std::string route_interface(const std::string& host, const std::string& port);
// root/sys/class/net/IF/speed in Mb/s; -1 when unknown (loopback, a
// virtual device, a link that is down).
long interface_speed_mbps(const std::string& root, const std::string& ifname);

// Clocks further apart than this are a warn.
constexpr double kClockWarnUs = 10000;

// The peers report's row of a peer and what a connection to it found.
Check judge_reach(const nlohmann::json& peer, const TcpConnect& c);
// self: the peers report's "self" (version, build_id).
Check judge_version(const nlohmann::json& self, const nlohmann::json& peer);
// The probe report's row of a peer.
Check judge_clock(const nlohmann::json& probe_peer);
// The probe report's row of a peer, the interface that routes to it and
// its speed (-1 unknown).
Check judge_link(const nlohmann::json& probe_peer, const std::string& ifname, long speed_mbps);

// Every check above for every peer of the reports.
std::vector<Check> reach_checks(const nlohmann::json& peers_report, int timeout_ms);
std::vector<Check> version_checks(const nlohmann::json& peers_report);
std::vector<Check> probe_checks(const nlohmann::json& probe_report, const std::string& root);

}  // namespace gsync::cli
