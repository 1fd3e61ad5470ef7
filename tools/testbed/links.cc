// SPDX-License-Identifier: Apache-2.0
//
// What makes a bed up beyond its daemons listening (docs/testbed.md): a
// kernel neighbour table large enough for the bed, and every daemon's link
// to every other host up.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "tools/common/procs.h"
#include "tools/testbed/testbed.h"

namespace gsync::testbed {

namespace {
using Clock = std::chrono::steady_clock;

// The neighbour table's limits (the init namespace's; every namespace's
// entries count against them together).
std::string neigh_path(int i) {
  return fmt::format("/proc/sys/net/ipv4/neigh/default/gc_thresh{}", i);
}
uint64_t read_limit(int i) {
  std::ifstream in(neigh_path(i));
  uint64_t v = 0;
  return in >> v ? v : 0;
}
bool write_limit(int i, uint64_t v) {
  std::ofstream out(neigh_path(i));
  out << v << "\n";
  out.close();
  return static_cast<bool>(out) && read_limit(i) == v;
}
constexpr size_t kNamedLinks = 10;  // links an error names, at most
}  // namespace

uint64_t neighbour_entries(int hosts) {
  // Each host's namespace learns every other host on the fabric; the
  // bridges' namespace and slack for the kernel's own make the margin.
  const uint64_t n = static_cast<uint64_t>(std::max(hosts, 0));
  return n * (n > 0 ? n - 1 : 0) + 8 * n + 64;
}

// 33 hosts make 1056 entries against the default gc_thresh3 of 1024: the
// kernel drops the rest ("neighbor table overflow"), and links stay down.
// A bed that needs more than gc_thresh2 (past which the kernel collects
// entries that are still in use) raises both limits for its life and puts
// them back at teardown, if they are still what it set.
Status Testbed::fit_neighbour_table() {
  const uint64_t need = neighbour_entries(hosts());
  const uint64_t t2 = read_limit(2), t3 = read_limit(3);
  if (t2 == 0 || t3 == 0 || need <= t2) return Status::ok();
  const uint64_t new2 = need, new3 = std::max(t3, 2 * need);
  if (!write_limit(3, new3) || !write_limit(2, new2)) {
    write_limit(2, t2);
    write_limit(3, t3);
    return {GSYNC_ERR_INVALID,
            fmt::format("testbed: {} hosts need about {} neighbour entries, and the kernel keeps "
                        "{} (net.ipv4.neigh.default.gc_thresh2; gc_thresh3 {}), which this "
                        "process cannot raise; as root: sysctl -w "
                        "net.ipv4.neigh.default.gc_thresh3={} "
                        "net.ipv4.neigh.default.gc_thresh2={}; or fewer hosts, or --loopback",
                        hosts(), need, t2, t3, new3, new2)};
  }
  neigh_saved_ = {t2, t3, new2, new3};
  std::fprintf(stderr,
               "testbed: %d hosts need about %llu neighbour entries: gc_thresh2/3 raised from "
               "%llu/%llu to %llu/%llu until the bed goes\n",
               hosts(), static_cast<unsigned long long>(need), static_cast<unsigned long long>(t2),
               static_cast<unsigned long long>(t3), static_cast<unsigned long long>(new2),
               static_cast<unsigned long long>(new3));
  return Status::ok();
}

void Testbed::restore_neighbour_table() {
  if (neigh_saved_.empty()) return;
  const auto& s = neigh_saved_;  // old 2, old 3, set 2, set 3
  if (read_limit(2) == s[2]) write_limit(2, s[0]);
  if (read_limit(3) == s[3]) write_limit(3, s[1]);
  neigh_saved_.clear();
}

// Up means every daemon of `which` says every other host's link is up
// (gsyncctl peers): a bed whose links are partly down is not handed out
// as ready, and the error names the links that are not up and why.
Status Testbed::wait_links_up(std::vector<int> which) const {
  if (which.empty())
    for (int h = 0; h < hosts(); h++) which.push_back(h);
  if (hosts() < 2) return Status::ok();
  const auto deadline = Clock::now() + std::chrono::seconds(options_.start_timeout_s);
  for (;;) {
    std::vector<std::string> down;
    size_t total = 0;
    for (int h : which) {
      const Host& host = hosts_.at(size_t(h));
      const auto j = nlohmann::json::parse(tools::admin_query(host.admin_socket, "peers"),
                                           nullptr, false);
      const auto peers = j.is_object() ? j.value("peers", nlohmann::json::array())
                                       : nlohmann::json::array();
      for (const auto& p : peers) {
        if (p.value("state", "") == "up") continue;
        std::string err = p.value("last_error", "");
        down.push_back(fmt::format("{} -> {} {}{}", host.id, p.value("host", "?"),
                                   p.value("state", "?"), err.empty() ? "" : " (" + err + ")"));
      }
      total += size_t(hosts() - 1);
      if (peers.size() < size_t(hosts() - 1))
        down.push_back(fmt::format("{} knows {} of the {} other hosts", host.id, peers.size(),
                                   hosts() - 1));
    }
    if (down.empty()) return Status::ok();
    if (Clock::now() >= deadline) {
      std::string named;
      for (size_t i = 0; i < down.size() && i < kNamedLinks; i++)
        named += (i ? "; " : "") + down[i];
      if (down.size() > kNamedLinks) named += fmt::format("; and {} more", down.size() - kNamedLinks);
      return {GSYNC_ERR_CONNECT,
              fmt::format("testbed: {} of {} peer links not up after {} s: {} (each daemon's log "
                          "is in {})",
                          down.size(), total, options_.start_timeout_s, named, dir_)};
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

Status Testbed::wait_links(const std::vector<int>& which) const {
  if (!options_.wait_links) return Status::ok();
  return wait_links_up(which);
}

}  // namespace gsync::testbed
