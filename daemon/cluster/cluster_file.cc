// SPDX-License-Identifier: Apache-2.0
#include "daemon/cluster/cluster_file.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <toml++/toml.h>

#include "daemon/core/text.h"

namespace gsync {

namespace {

// A cluster file of a thousand hosts is some 60 KiB.
constexpr size_t kMaxClusterFileBytes = 4 << 20;

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

class Parser {
 public:
  explicit Parser(const std::string& path) : path_(path) {}
  Status parse(const toml::table& root, ClusterFile* cf) const;

  Status err(uint32_t line, const std::string& what) const {
    return Status(GSYNC_ERR_INVALID, line ? fmt::format("{}:{}: {}", path_, line, what)
                                          : fmt::format("{}: {}", path_, what));
  }

 private:
  Status name_text(const toml::node& node, const std::string& key, std::string* out) const;
  Status host(const toml::node& node, const ClusterFile& cf, ClusterHost* out) const;
  Status host_key(const std::string& k, const toml::node& v, ClusterHost* host) const;

  const std::string& path_;
};

// An id, a rack, the cluster's name: printable text, 1 to kMaxClusterName bytes.
Status Parser::name_text(const toml::node& node, const std::string& key, std::string* out) const {
  uint32_t line = node.source().begin.line;
  if (!node.is_string()) return err(line, fmt::format("{}: expected a string", key));
  const std::string& v = node.as_string()->get();
  if (v.empty() || v.size() > kMaxClusterName || !is_printable(v))
    return err(line, fmt::format("{}: \"{}\" must be printable text of 1 to {} bytes", key,
                                 printable(v, 64), kMaxClusterName));
  *out = v;
  return Status::ok();
}

Status Parser::host_key(const std::string& k, const toml::node& v, ClusterHost* host) const {
  uint32_t line = v.source().begin.line;
  if (k == "port") {
    auto port = v.as_integer();
    if (!port || port->get() < 1 || port->get() > 65535)
      return err(line, "hosts.port: expected an integer 1..65535");
    host->port = static_cast<uint16_t>(port->get());
    return Status::ok();
  }
  if (k == "id") return name_text(v, "hosts.id", &host->id);
  if (k == "rack") return name_text(v, "hosts.rack", &host->rack);
  if (k == "address") return name_text(v, "hosts.address", &host->address);
  return err(line, fmt::format("hosts.{}: unknown key (known: id, address, port, rack)",
                               printable(k, 64)));
}

Status Parser::host(const toml::node& node, const ClusterFile& cf, ClusterHost* out) const {
  const toml::table* t = node.as_table();
  uint32_t line = node.source().begin.line;
  if (!t) return err(line, "hosts: expected a table");
  ClusterHost host;
  for (auto&& [k, v] : *t)
    if (Status st = host_key(std::string(k.str()), v, &host); !st) return st;
  if (host.id.empty() || host.address.empty() || host.port == 0)
    return err(line, "a host needs id, address and port");
  if (host.rack.empty()) host.rack = "default";
  for (const auto& other : cf.hosts) {
    if (other.id == host.id) return err(line, fmt::format("host id '{}' appears twice", host.id));
    if (other.address == host.address && other.port == host.port)
      return err(line, fmt::format("hosts '{}' and '{}' share {}:{}", other.id, host.id,
                                   host.address, host.port));
  }
  *out = std::move(host);
  return Status::ok();
}

Status Parser::parse(const toml::table& root, ClusterFile* cf) const {
  for (auto&& [key, node] : root) {
    uint32_t line = node.source().begin.line;
    if (key.str() == "name") {
      if (Status st = name_text(node, "name", &cf->name); !st) return st;
    } else if (key.str() == "hosts") {
      const toml::array* hosts = node.as_array();
      if (!hosts) return err(line, "hosts: expected [[hosts]] tables");
      for (const toml::node& h : *hosts) {
        if (cf->hosts.size() == kMaxClusterHosts)
          return err(h.source().begin.line, fmt::format("more than {} hosts", kMaxClusterHosts));
        ClusterHost host;
        if (Status st = this->host(h, *cf, &host); !st) return st;
        cf->hosts.push_back(std::move(host));
      }
    } else {
      return err(line, fmt::format("{}: unknown key (known: name, hosts)", printable(key.str(), 64)));
    }
  }
  if (cf->name.empty()) return err(0, "the cluster needs a name (name = \"...\")");
  if (cf->hosts.empty()) return err(0, "the cluster has no [[hosts]]");
  return Status::ok();
}

Status read_text(const std::string& path, std::string* text) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return Status(GSYNC_ERR_INVALID,
                  fmt::format("{}: cannot open cluster file: {}", path, strerror(errno)));
  std::ostringstream ss;
  ss << in.rdbuf();
  *text = ss.str();
  if (text->size() > kMaxClusterFileBytes)
    return Status(GSYNC_ERR_INVALID, fmt::format("{}: cluster file is larger than {} bytes", path,
                                                 kMaxClusterFileBytes));
  return Status::ok();
}

}  // namespace

Status parse_cluster_text(std::string_view text, const std::string& path, ClusterFile* out) {
  Parser p(path);
  if (text.size() > kMaxClusterFileBytes)
    return p.err(0, fmt::format("cluster file is larger than {} bytes", kMaxClusterFileBytes));
  toml::table root;
  try {
    root = toml::parse(text, std::string_view(path));
  } catch (const toml::parse_error& e) {
    return p.err(e.source().begin.line,
                 fmt::format("{} (column {})", e.description(), e.source().begin.column));
  }
  ClusterFile cf;
  cf.path = path;
  if (Status st = p.parse(root, &cf); !st) return st;
  *out = std::move(cf);
  return Status::ok();
}

Status find_self(const std::string& host_id, ClusterFile* cf) {
  Parser p(cf->path);
  cf->self = -1;
  if (!host_id.empty()) {
    for (size_t i = 0; i < cf->hosts.size(); i++)
      if (cf->hosts[i].id == host_id) cf->self = static_cast<int>(i);
    if (cf->self < 0)
      return p.err(0, fmt::format("this daemon's host id '{}' is not in the file", host_id));
    return Status::ok();
  }
  auto mine = local_addresses();
  for (size_t i = 0; i < cf->hosts.size(); i++) {
    if (!mine.count(cf->hosts[i].address)) continue;
    if (cf->self >= 0)
      return p.err(0, fmt::format("hosts '{}' and '{}' both have addresses of this machine; give "
                                  "--host-id",
                                  cf->hosts[static_cast<size_t>(cf->self)].id, cf->hosts[i].id));
    cf->self = static_cast<int>(i);
  }
  if (cf->self < 0)
    return p.err(0, "no host in the file has an address of this machine; give --host-id");
  return Status::ok();
}

Status load_cluster_file(const std::string& path, const std::string& host_id, ClusterFile* out) {
  std::string text;
  if (Status st = read_text(path, &text); !st) return st;
  ClusterFile cf;
  if (Status st = parse_cluster_text(text, path, &cf); !st) return st;
  if (Status st = find_self(host_id, &cf); !st) return st;
  *out = std::move(cf);
  return Status::ok();
}

}  // namespace gsync
