// SPDX-License-Identifier: Apache-2.0
#include "tools/gsyncctl/peer_checks.h"

#include <fcntl.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "tools/gsyncctl/host_checks.h"
#include "tools/gsyncctl/table.h"

namespace gsync::cli {

using nlohmann::json;

namespace {

std::string str(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

double num(const json& j, const char* key, double otherwise = -1) {
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : otherwise;
}

// getaddrinfo's first answer for host:port, or null with why.
addrinfo* resolve(const std::string& host, const std::string& port, int socktype,
                  std::string* why) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = socktype;
  addrinfo* res = nullptr;
  if (int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &res); rc != 0) {
    *why = fmt::format("cannot resolve {}: {}", host, gai_strerror(rc));
    return nullptr;
  }
  return res;
}

bool same_address(const sockaddr* a, const sockaddr* b) {
  if (a == nullptr || b == nullptr || a->sa_family != b->sa_family) return false;
  if (a->sa_family == AF_INET)
    return reinterpret_cast<const sockaddr_in*>(a)->sin_addr.s_addr ==
           reinterpret_cast<const sockaddr_in*>(b)->sin_addr.s_addr;
  if (a->sa_family == AF_INET6)
    return std::memcmp(&reinterpret_cast<const sockaddr_in6*>(a)->sin6_addr,
                       &reinterpret_cast<const sockaddr_in6*>(b)->sin6_addr,
                       sizeof(in6_addr)) == 0;
  return false;
}

// 12.5 -> "12.5 us", 2500 -> "2.500 ms", 3.2e6 -> "3.200 s".
std::string format_us(double us) {
  const double a = std::abs(us);
  if (a < 1e3) return fmt::format("{:.1f} us", us);
  if (a < 1e6) return fmt::format("{:.3f} ms", us / 1e3);
  return fmt::format("{:.3f} s", us / 1e6);
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

bool split_address(const std::string& address, std::string* host, std::string* port) {
  size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size()) return false;
  *host = address.substr(0, colon);
  *port = address.substr(colon + 1);
  if (host->size() >= 2 && host->front() == '[' && host->back() == ']')
    *host = host->substr(1, host->size() - 2);
  return true;
}

TcpConnect tcp_connect(const std::string& host, const std::string& port, int timeout_ms) {
  TcpConnect out;
  const auto t0 = std::chrono::steady_clock::now();
  addrinfo* ai = resolve(host, port, SOCK_STREAM, &out.error);
  if (!ai) return out;
  int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  int err = fd < 0 ? errno : 0;
  if (fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) err = errno;
  freeaddrinfo(ai);
  if (err == EINPROGRESS) {
    pollfd p{fd, POLLOUT, 0};
    int n = poll(&p, 1, timeout_ms);
    socklen_t len = sizeof err;
    if (n == 0)
      out.error = fmt::format("no answer within {} ms", timeout_ms);
    else if (n < 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
      err = errno;
  }
  if (out.error.empty() && err != 0) out.error = std::strerror(err);
  out.ok = out.error.empty();
  out.ms = ms_since(t0);
  if (fd >= 0) close(fd);
  return out;
}

std::string route_interface(const std::string& host, const std::string& port) {
  std::string why;
  addrinfo* ai = resolve(host, port, SOCK_DGRAM, &why);
  if (!ai) return "";
  // A UDP connect sends nothing: it only asks the routing table, and
  // getsockname then says which local address the route leaves from.
  int fd = socket(ai->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_storage local{};
  socklen_t len = sizeof local;
  bool found = fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
               getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0;
  freeaddrinfo(ai);
  if (fd >= 0) close(fd);
  ifaddrs* ifs = nullptr;
  if (!found || getifaddrs(&ifs) != 0) return "";
  std::string name;
  for (ifaddrs* i = ifs; i != nullptr && name.empty(); i = i->ifa_next)
    if (same_address(i->ifa_addr, reinterpret_cast<sockaddr*>(&local))) name = i->ifa_name;
  freeifaddrs(ifs);
  return name;
}

long interface_speed_mbps(const std::string& root, const std::string& ifname) {
  if (ifname.empty() || ifname.find('/') != std::string::npos) return -1;
  const std::string text = read_small_file(fmt::format("{}/sys/class/net/{}/speed", root, ifname));
  char* end = nullptr;
  long v = std::strtol(text.c_str(), &end, 10);
  return text.empty() || *end != '\0' || v <= 0 ? -1 : v;
}

Check judge_reach(const json& peer, const TcpConnect& c) {
  const std::string host = str(peer, "host"), address = str(peer, "address");
  const std::string state = str(peer, "state"), last_error = str(peer, "last_error");
  std::string h, port;
  split_address(address, &h, &port);
  json data{{"address", address}, {"tcp_connect", c.ok}, {"connect_ms", c.ms},
            {"connect_error", c.error}, {"state", state}};
  const std::string link =
      state == "up" ? fmt::format("the daemon's link is up ({}, {} streams)",
                                  str(peer, "transport"), num(peer, "streams", 0))
                    : fmt::format("the daemon's link is {}{}", state.empty() ? "unknown" : state,
                                  last_error.empty() ? "" : " (" + last_error + ")");
  if (!c.ok)
    return fail("reach " + host,
                fmt::format("{} takes no TCP connection from here: {} (after {:.1f} ms); {}",
                            address, c.error, c.ms, link),
                fmt::format("check that gsyncd runs on {} (`systemctl status gsyncd` there) and "
                            "that TCP port {} is open between the hosts (`nc -zv {} {}`)",
                            host, port, h, port),
                data);
  if (state != "up")
    return fail("reach " + host,
                fmt::format("{} takes TCP connections ({:.1f} ms), but {}", address, c.ms, link),
                "read the link's last error (`gsyncctl peers`): a cluster key, cluster name, "
                "protocol or build mismatch names both sides; fix that side",
                data);
  return ok("reach " + host, fmt::format("{} takes TCP connections ({:.1f} ms); {}", address,
                                         c.ms, link),
            data);
}

Check judge_version(const json& self, const json& peer) {
  const std::string host = str(peer, "host");
  const std::string version = str(peer, "version"), build = str(peer, "build_id");
  const std::string my_version = str(self, "version"), my_build = str(self, "build_id");
  auto short_id = [](const std::string& b) { return b.empty() ? "(none)" : b.substr(0, 12); };
  json data{{"version", peer.contains("version") ? peer["version"] : json(nullptr)},
            {"build_id", peer.contains("build_id") ? peer["build_id"] : json(nullptr)},
            {"self_version", my_version}, {"self_build_id", my_build}};
  const std::string fix =
      "install the same gsync build on every host (`gsyncd --version`; `readelf -n "
      "$(command -v gsyncd) | grep 'Build ID'` shows the build)";
  if (!peer.contains("version") || !peer["version"].is_string()) {
    const std::string last = str(peer, "last_error");
    if (last.find("mismatch") != std::string::npos)
      return warn("version " + host, "its link was refused: " + last, fix, data);
    return warn("version " + host,
                fmt::format("unknown: {} has not said (its link has not been up since this "
                            "daemon started)",
                            host),
                fmt::format("bring the link up (see reach {})", host), data);
  }
  const std::string when = str(peer, "state") == "up" ? "" : " (when its link was last up)";
  if (version != my_version || build != my_build)
    return warn("version " + host,
                fmt::format("{} runs {} build {}{}, this daemon {} build {}", host, version,
                            short_id(build), when, my_version, short_id(my_build)),
                fix, data);
  return ok("version " + host,
            fmt::format("{} build {}{}, the same as this daemon's", version, short_id(build),
                        when),
            data);
}

Check judge_clock(const json& p) {
  const std::string host = str(p, "host");
  const double offset = num(p, "clock_offset_us", NAN), pm = num(p, "clock_uncertainty_us", NAN);
  json data{{"offset_us", std::isnan(offset) ? json(nullptr) : json(offset)},
            {"uncertainty_us", std::isnan(pm) ? json(nullptr) : json(pm)}};
  if (std::isnan(offset))
    return warn("clock " + host, "not measured: no ping was answered", "see link " + host, data);
  const std::string found =
      fmt::format("{}'s clock is {} {} this host's (± {}, the midpoint of the fastest ping)", host,
                  format_us(std::abs(offset)), offset >= 0 ? "ahead of" : "behind",
                  format_us(pm));
  if (std::abs(offset) > kClockWarnUs)
    return warn("clock " + host, found + fmt::format(": more than {:.0f} ms", kClockWarnUs / 1e3),
                "run NTP on every host: `apt-get install chrony && systemctl enable --now "
                "chrony`; `chronyc tracking` shows the offset",
                data);
  return ok("clock " + host, found, data);
}

Check judge_link(const json& p, const std::string& ifname, long speed_mbps) {
  const std::string host = str(p, "host");
  json data{{"rtt_us", p.contains("rtt_us") ? p["rtt_us"] : json(nullptr)},
            {"gbit_per_s", p.contains("gbit_per_s") ? p["gbit_per_s"] : json(nullptr)},
            {"bytes", p.contains("bytes") ? p["bytes"] : json(nullptr)},
            {"interface", ifname},
            {"interface_mbit_per_s", speed_mbps > 0 ? json(speed_mbps) : json(nullptr)}};
  const json* rtt = p.contains("rtt_us") && p["rtt_us"].is_object() ? &p["rtt_us"] : nullptr;
  const double gbit = num(p, "gbit_per_s");
  if (!p.value("ok", false) || rtt == nullptr || gbit <= 0)
    return fail("link " + host,
                str(p, "error").empty() ? "the probe did not complete" : str(p, "error"),
                fmt::format("`gsyncctl peers` (the link's state and last error) and the "
                            "daemon's log on both hosts (`journalctl -u gsyncd`; {} too)",
                            host),
                data);
  std::string speed =
      ifname.empty()      ? "the interface that routes to it is unknown"
      : speed_mbps > 0    ? fmt::format("{} routes to it at {:g} Gbit/s ({:.0f}% of it)", ifname,
                                        speed_mbps / 1e3, 100 * gbit * 1e3 / double(speed_mbps))
                          : fmt::format("{} routes to it (its speed is unknown)", ifname);
  const std::string found = fmt::format(
      "rtt {:.3f}/{:.3f}/{:.3f} ms (min/median/max of {} pings); {} in {:.1f} ms = {:.2f} "
      "Gbit/s on the control stream; {}",
      num(*rtt, "min") / 1e3, num(*rtt, "median") / 1e3, num(*rtt, "max") / 1e3,
      num(p, "pings", 0), format_bytes(static_cast<uint64_t>(num(p, "bytes", 0))),
      num(p, "seconds", 0) * 1e3, gbit, speed);
  if (speed_mbps > 0 && gbit * 1e3 < 0.01 * double(speed_mbps))
    return warn("link " + host, found + ": under 1% of the interface's speed",
                fmt::format("compare one plain TCP stream (`iperf3 -c {}`) and gsync-perf; "
                            "look for errors and drops: `ip -s link show {}`",
                            host, ifname),
                data);
  return ok("link " + host, found, data);
}

std::vector<Check> reach_checks(const json& report, int timeout_ms) {
  std::vector<Check> out;
  if (!report.contains("peers") || !report["peers"].is_array()) return out;
  for (const json& peer : report["peers"]) {
    std::string host, port;
    TcpConnect c;
    if (!split_address(str(peer, "address"), &host, &port))
      c.error = "the address is not HOST:PORT";
    else
      c = tcp_connect(host, port, timeout_ms);
    out.push_back(judge_reach(peer, c));
  }
  return out;
}

std::vector<Check> version_checks(const json& report) {
  std::vector<Check> out;
  if (!report.contains("peers") || !report["peers"].is_array()) return out;
  const json self = report.contains("self") ? report["self"] : json::object();
  for (const json& peer : report["peers"]) out.push_back(judge_version(self, peer));
  return out;
}

std::vector<Check> probe_checks(const json& report, const std::string& root) {
  std::vector<Check> out;
  if (!report.contains("peers") || !report["peers"].is_array()) return out;
  for (const json& p : report["peers"]) {
    std::string host, port, ifname;
    if (split_address(str(p, "address"), &host, &port)) ifname = route_interface(host, port);
    out.push_back(judge_clock(p));
    out.push_back(judge_link(p, ifname, interface_speed_mbps(root, ifname)));
  }
  return out;
}

}  // namespace gsync::cli
