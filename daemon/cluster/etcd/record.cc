// SPDX-License-Identifier: Apache-2.0
#include "daemon/cluster/etcd/record.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "daemon/cluster/cluster_file.h"
#include "daemon/core/json_text.h"
#include "daemon/core/text.h"

namespace gsync::cluster::etcd {

std::string encode_record(const HostRecord& r) {
  nlohmann::json j = {{"id", r.id},           {"address", r.address},   {"port", r.port},
                      {"rack", r.rack},       {"slot", r.slot},         {"version", r.version},
                      {"build_id", r.build_id}, {"pid", r.pid}};
  return json_text(j);
}

namespace {

// A text field: present, a string, 1..max printable bytes (0.. when may_be_empty).
Status text_field(const nlohmann::json& j, const char* name, size_t max, bool may_be_empty,
                  std::string* out) {
  auto it = j.find(name);
  if (it == j.end() || !it->is_string())
    return {GSYNC_ERR_PROTOCOL, fmt::format("field '{}' is missing or not a string", name)};
  const auto& s = it->get_ref<const std::string&>();
  if ((s.empty() && !may_be_empty) || s.size() > max || !is_printable(s))
    return {GSYNC_ERR_PROTOCOL, fmt::format("field '{}' (\"{}\") is empty, longer than {} bytes or "
                                            "not printable",
                                            name, printable(s, 64), max)};
  *out = s;
  return Status::ok();
}

Status number_field(const nlohmann::json& j, const char* name, int64_t lo, int64_t hi,
                    int64_t* out) {
  auto it = j.find(name);
  if (it == j.end() || !it->is_number_integer())
    return {GSYNC_ERR_PROTOCOL, fmt::format("field '{}' is missing or not an integer", name)};
  int64_t v = it->is_number_unsigned() && it->get<uint64_t>() > uint64_t(INT64_MAX)
                  ? INT64_MAX
                  : it->get<int64_t>();
  if (v < lo || v > hi)
    return {GSYNC_ERR_PROTOCOL,
            fmt::format("field '{}' is {}, outside {}..{}", name, v, lo, hi)};
  *out = v;
  return Status::ok();
}

}  // namespace

Status decode_record(std::string_view text, HostRecord* out) {
  auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return {GSYNC_ERR_PROTOCOL, "not a JSON object"};
  HostRecord r;
  int64_t port = 0, slot = 0, pid = 0;
  Status st;
  if (!(st = text_field(j, "id", kMaxClusterName, false, &r.id))) return st;
  if (!(st = text_field(j, "address", kMaxClusterName, false, &r.address))) return st;
  if (!(st = text_field(j, "rack", kMaxClusterName, false, &r.rack))) return st;
  if (!(st = text_field(j, "version", 64, true, &r.version))) return st;
  if (!(st = text_field(j, "build_id", 128, true, &r.build_id))) return st;
  if (!(st = number_field(j, "port", 1, 65535, &port))) return st;
  if (!(st = number_field(j, "slot", 0, kMaxSlots - 1, &slot))) return st;
  if (!(st = number_field(j, "pid", 0, UINT32_MAX, &pid))) return st;
  if (r.id.find('/') != std::string::npos)
    return {GSYNC_ERR_PROTOCOL, fmt::format("field 'id' (\"{}\") holds a '/'", r.id)};
  r.port = static_cast<uint16_t>(port);
  r.slot = static_cast<int>(slot);
  r.pid = static_cast<uint32_t>(pid);
  *out = std::move(r);
  return Status::ok();
}

std::string cluster_prefix(std::string_view etcd_prefix, std::string_view name) {
  return fmt::format("{}{}/", etcd_prefix, name);
}

std::string hosts_prefix(std::string_view cluster) { return fmt::format("{}hosts/", cluster); }

std::string host_key(std::string_view cluster, std::string_view id) {
  return fmt::format("{}hosts/{}", cluster, id);
}

std::string slot_by_id_key(std::string_view cluster, std::string_view id) {
  return fmt::format("{}slots/id/{}", cluster, id);
}

std::string slot_by_number_key(std::string_view cluster, int slot) {
  return fmt::format("{}slots/n/{}", cluster, slot);
}

std::string id_of_host_key(std::string_view cluster, std::string_view key) {
  std::string prefix = hosts_prefix(cluster);
  if (key.size() <= prefix.size() || key.substr(0, prefix.size()) != prefix) return "";
  return std::string(key.substr(prefix.size()));
}

}  // namespace gsync::cluster::etcd
