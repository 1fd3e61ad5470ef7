// SPDX-License-Identifier: Apache-2.0
#include "daemon/cluster/cluster_file.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>

#include <set>

#include <fmt/format.h>
#include <toml++/toml.h>

namespace gsync {

namespace {

std::set<std::string> local_addresses() {
  std::set<std::string> out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  for (ifaddrs* a = list; a; a = a->ifa_next) {
    if (!a->ifa_addr) continue;
    char buf[INET6_ADDRSTRLEN] = {};
    if (a->ifa_addr->sa_family == AF_INET)
      inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, buf, sizeof buf);
    else if (a->ifa_addr->sa_family == AF_INET6)
      inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(a->ifa_addr)->sin6_addr, buf, sizeof buf);
    if (buf[0]) out.insert(buf);
  }
  freeifaddrs(list);
  return out;
}

}  // namespace

Status load_cluster_file(const std::string& path, const std::string& host_id, ClusterFile* out) {
  auto err = [&](uint32_t line, const std::string& what) {
    return Status(GSYNC_ERR_INVALID,
                  line ? fmt::format("{}:{}: {}", path, line, what) : fmt::format("{}: {}", path, what));
  };
  toml::table root;
  try {
    root = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    return err(e.source().begin.line, fmt::format("{} (column {})", e.description(), e.source().begin.column));
  }
  ClusterFile cf;
  cf.path = path;
  for (auto&& [key, node] : root) {
    uint32_t line = node.source().begin.line;
    if (key.str() == "name") {
      if (!node.is_string()) return err(line, "name: expected a string");
      cf.name = node.as_string()->get();
    } else if (key.str() == "hosts") {
      const toml::array* hosts = node.as_array();
      if (!hosts) return err(line, "hosts: expected [[hosts]] tables");
      for (const toml::node& h : *hosts) {
        const toml::table* t = h.as_table();
        uint32_t hl = h.source().begin.line;
        if (!t) return err(hl, "hosts: expected a table");
        ClusterHost host;
        for (auto&& [hk, hv] : *t) {
          uint32_t vl = hv.source().begin.line;
          std::string k(hk.str());
          if (k == "port") {
            auto v = hv.value<int64_t>();
            if (!v || *v < 1 || *v > 65535) return err(vl, "hosts.port: expected an integer 1..65535");
            host.port = static_cast<uint16_t>(*v);
          } else if (k == "id" || k == "address" || k == "rack") {
            if (!hv.is_string()) return err(vl, fmt::format("hosts.{}: expected a string", k));
            std::string v = hv.as_string()->get();
            (k == "id" ? host.id : k == "address" ? host.address : host.rack) = v;
          } else {
            return err(vl, fmt::format("hosts.{}: unknown key (known: id, address, port, rack)", k));
          }
        }
        if (host.id.empty() || host.address.empty() || host.port == 0)
          return err(hl, "a host needs id, address and port");
        if (host.rack.empty()) host.rack = "default";
        for (const auto& other : cf.hosts) {
          if (other.id == host.id) return err(hl, fmt::format("host id '{}' appears twice", host.id));
          if (other.address == host.address && other.port == host.port)
            return err(hl, fmt::format("hosts '{}' and '{}' share {}:{}", other.id, host.id,
                                       host.address, host.port));
        }
        cf.hosts.push_back(std::move(host));
      }
    } else {
      return err(line, fmt::format("{}: unknown key (known: name, hosts)", key.str()));
    }
  }
  if (cf.name.empty()) return err(0, "the cluster needs a name (name = \"...\")");
  if (cf.hosts.empty()) return err(0, "the cluster has no [[hosts]]");
  if (cf.hosts.size() > 1024) return err(0, "more than 1024 hosts");
  if (!host_id.empty()) {
    for (size_t i = 0; i < cf.hosts.size(); i++)
      if (cf.hosts[i].id == host_id) cf.self = static_cast<int>(i);
    if (cf.self < 0) return err(0, fmt::format("this daemon's host id '{}' is not in the file", host_id));
  } else {
    auto mine = local_addresses();
    for (size_t i = 0; i < cf.hosts.size(); i++) {
      if (!mine.count(cf.hosts[i].address)) continue;
      if (cf.self >= 0)
        return err(0, fmt::format("hosts '{}' and '{}' both have addresses of this machine; give "
                                  "--host-id", cf.hosts[static_cast<size_t>(cf.self)].id, cf.hosts[i].id));
      cf.self = static_cast<int>(i);
    }
    if (cf.self < 0) return err(0, "no host in the file has an address of this machine; give --host-id");
  }
  *out = std::move(cf);
  return Status::ok();
}

}  // namespace gsync
