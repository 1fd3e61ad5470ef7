// SPDX-License-Identifier: Apache-2.0
//
// gsyncctl status, ops, clients and peers (render.h), and the fields' text
// (render_fields.h); jobs and their stragglers are in render_jobs.cc.
#include "tools/gsyncctl/render.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <string_view>

#include "protocol/reproducible.h"
#include "tools/gsyncctl/render_fields.h"
#include "tools/gsyncctl/table.h"
#include "tools/gsyncctl/tune.h"

namespace gsync::cli {

namespace fields {

using nlohmann::json;

const json& field(const json& obj, std::string_view key) {
  static const json kNull;
  if (!obj.is_object()) return kNull;
  auto it = obj.find(std::string(key));
  return it == obj.end() ? kNull : *it;
}

// An op's key; a reproducible op's inner ops (docs/reproducibility.md)
// say whose key, which part and which segment: "12 repro-exponents/0".
std::string key_text(const json& v) {
  uint64_t user = 0, segment = 0;
  const char* part = "";
  if (v.is_number_unsigned() && proto::repro_part(v.get<uint64_t>(), &user, &segment, &part))
    return fmt::format("{} repro-{}/{}", user, part, segment);
  return text(v);
}

// Any scalar as text: strings verbatim, numbers as JSON writes them.
std::string text(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number() || v.is_boolean()) return v.dump();
  if (v.is_array()) {
    std::string out = "[";
    for (size_t i = 0; i < v.size(); ++i) {
      if (i > 0) out += ", ";
      out += text(v[i]);
    }
    return out + "]";
  }
  return std::string(kMissing);
}

std::string bytes(const json& v) {
  if (v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0)) {
    return format_bytes(v.get<uint64_t>());
  }
  return std::string(kMissing);
}

std::string seconds(const json& v) {
  return v.is_number() ? format_duration(v.get<double>()) : std::string(kMissing);
}

std::string gbps(const json& v) {
  return v.is_number() ? format_gbps(v.get<double>()) : std::string(kMissing);
}

}  // namespace fields

namespace {

using fields::bytes;
using fields::field;
using fields::key_text;
using fields::gbps;
using fields::kMissing;
using fields::seconds;
using fields::text;
using nlohmann::json;

// Config keys whose values are byte counts (daemon/config: ConfigKind::kSize).
constexpr std::array<std::string_view, 3> kSizeKeys = {"default_arena", "max_arena",
                                                       "inline_reduce_bytes"};
// Sections and keys in the order of the TOML file (daemon/config/config_rules.cc),
// which groups related keys; names not listed here follow alphabetically.
constexpr std::array<std::string_view, 3> kSectionOrder = {"daemon", "auth", "limits"};
constexpr std::array<std::string_view, 14> kKeyOrder = {
    "socket",       "admin_socket",  "socket_mode",        "log_level", "reduce_threads", "poll_us",
    "allowed_uids", "allowed_gids",  "default_arena",      "max_arena", "max_clients",
    "ring_entries", "op_timeout_ms", "inline_reduce_bytes"};

size_t key_rank(std::string_view key) {
  return static_cast<size_t>(std::find(kKeyOrder.begin(), kKeyOrder.end(), key) -
                             kKeyOrder.begin());
}

std::string render_config(const json& config) {
  if (!config.is_object()) return "";
  std::vector<std::string> sections(kSectionOrder.begin(), kSectionOrder.end());
  for (const auto& [name, value] : config.items()) {
    if (std::find(sections.begin(), sections.end(), name) == sections.end()) {
      sections.push_back(name);
    }
  }
  std::string out;
  for (const std::string& name : sections) {
    const json& section = field(config, name);
    if (!section.is_object()) continue;
    std::vector<std::pair<std::string, std::string>> rows;
    for (const auto& [key, value] : section.items()) {
      bool is_size = std::find(kSizeKeys.begin(), kSizeKeys.end(), key) != kSizeKeys.end();
      rows.emplace_back(key, is_size ? bytes(value) : text(value));
    }
    // items() is alphabetical; stable_sort keeps that order among unknown keys.
    std::stable_sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) {
      return key_rank(a.first) < key_rank(b.first);
    });
    out += fmt::format("  [{}]\n", name);
    out += format_key_values(rows, 4);
  }
  return out;
}

}  // namespace

namespace {

// "etcd http://10.0.0.1:2379 (up, lease 7f3a ttl 10 s, revision 42), 4 hosts",
// or "file /etc/gsync/cluster.toml, 4 hosts"; "etcd ... (UNREACHABLE since
// ...: why)" when etcd is away (docs/membership.md).
std::string render_membership(const json& m) {
  if (!m.is_object()) return "local (single host)";
  const json& e = field(m, "etcd");
  if (!e.is_object())
    return fmt::format("{} {}, {} hosts", text(field(m, "source")), text(field(m, "where")),
                       text(field(m, "hosts")));
  const json& up = field(e, "up");
  std::string how = up.is_boolean() && up.get<bool>()
                        ? fmt::format("up, lease {} ttl {} s, revision {}", text(field(e, "lease")),
                                      text(field(e, "lease_ttl_s")), text(field(e, "revision")))
                        : fmt::format("UNREACHABLE: {}; running jobs go on, no host joins or "
                                      "leaves",
                                      text(field(e, "last_error")));
  return fmt::format("etcd {} {} ({}), {} hosts, {} changes seen", text(field(e, "endpoint")),
                     text(field(e, "prefix")), how, text(field(m, "hosts")),
                     text(field(e, "changes")));
}

}  // namespace

std::string render_status(const json& reply) {
  const json& ops = field(reply, "ops");
  std::string ops_text =
      ops.is_object()
          ? fmt::format("{} completed, {} failed, {} in flight", text(field(ops, "completed")),
                        text(field(ops, "failed")), text(field(ops, "in_flight")))
          : std::string(kMissing);
  const json& plans = field(reply, "plans");
  std::string plans_text =
      plans.is_object()
          ? fmt::format("{} idle, {} leased; {} hits, {} misses, {} evicted",
                        text(field(plans, "idle")), text(field(plans, "leased")),
                        text(field(plans, "hits")), text(field(plans, "misses")),
                        text(field(plans, "evictions")))
          : std::string(kMissing);
  std::string out = format_key_values({
      {"version", text(field(reply, "version"))},
      {"protocol", text(field(reply, "protocol"))},
      {"pid", text(field(reply, "pid"))},
      {"uptime", seconds(field(reply, "uptime_s"))},
      {"isa", text(field(reply, "isa"))},
      {"reduce threads", text(field(reply, "reduce_threads"))},
      {"transport", text(field(reply, "transport"))},
      {"cluster epoch", text(field(reply, "epoch"))},
      {"membership", render_membership(field(reply, "membership"))},
      {"clients", text(field(reply, "clients"))},
      {"jobs", text(field(reply, "jobs"))},
      {"ops", ops_text},
      {"plans", plans_text},
      {"bytes reduced", bytes(field(reply, "bytes_reduced"))},
      {"throughput", gbps(field(reply, "throughput_gbps"))},
  });
  out += fmt::format("\nconfig (from {}):\n", text(field(reply, "config_source")));
  out += render_config(field(reply, "config"));
  out += "\ntuning:\n" + render_tuning(field(reply, "tuning"));
  return out;
}

// The ops still in flight (who has not arrived, what they wait for), then
// how long the recent ones took, stage by stage, in milliseconds.
std::string render_ops(const json& reply) {
  std::string out;
  const json& live = field(reply, "in_flight");
  if (!live.is_array() || live.empty()) {
    out += "no ops in flight\n";
  } else {
    std::vector<Row> rows;
    for (const json& op : live) {
      std::string missing;
      if (const json& m = field(op, "not_arrived"); m.is_array())
        for (const json& r : m) {
          if (!missing.empty()) missing += ',';
          missing += text(field(r, "rank"));
        }
      std::string waiting = text(field(op, "waiting_for"));
      rows.push_back({text(field(op, "job")), key_text(field(op, "key")), text(field(op, "step")),
                      text(field(op, "op")), bytes(field(op, "bytes")),
                      fmt::format("{}/{}", text(field(op, "arrived")), text(field(op, "local_size"))),
                      missing.empty() ? std::string(kMissing) : missing,
                      seconds(field(op, "age_s")), text(field(op, "stage")),
                      waiting == "null" ? std::string(kMissing) : waiting});
    }
    out += format_table({{"JOB"}, {"KEY", Align::kRight}, {"STEP", Align::kRight}, {"OP"},
                         {"BYTES", Align::kRight}, {"ARRIVED", Align::kRight}, {"NOT ARRIVED"},
                         {"AGE", Align::kRight}, {"STAGE"}, {"WAITING FOR"}},
                        rows);
  }
  // [trace] record = false: the daemon keeps no ops once they end.
  if (const json& rec = field(reply, "recording"); field(rec, "on") == false)
    return out + "recording is off ([trace] record = false): only the ops in flight are shown\n";
  const json& recent = field(reply, "recent");
  if (!recent.is_array() || recent.empty()) return out + "no recent ops\n";
  // The last few, newest last: arrival spread, then each stage's span.
  std::vector<Row> rows;
  size_t from = recent.size() > 10 ? recent.size() - 10 : 0;
  auto ms = [](const json& a, const json& b) {
    if (!a.is_number() || !b.is_number() || a.get<int64_t>() == 0 || b.get<int64_t>() == 0)
      return std::string(kMissing);
    return fmt::format("{:.3f}", double(b.get<int64_t>() - a.get<int64_t>()) / 1e6);
  };
  for (size_t i = from; i < recent.size(); i++) {
    const json& op = recent[i];
    const json& arrivals = field(op, "arrivals");
    json first, last;
    if (arrivals.is_array())
      for (const json& a : arrivals) {
        const json& ns = field(a, "ns");
        if (first.is_null() || ns < first) first = ns;
        if (last.is_null() || ns > last) last = ns;
      }
    std::string stages;
    if (const json& st = field(op, "stages"); st.is_array())
      for (const json& x : st) {
        // Appends, not "a" + b: GCC 12's -Wrestrict false positive (bug 105329).
        if (!stages.empty()) stages += ' ';
        stages += text(field(x, "stage"));
        stages += ' ';
        stages += ms(field(x, "begun_ns"), field(x, "finished_ns"));
      }
    int code = field(op, "code").is_number() ? field(op, "code").get<int>() : 0;
    rows.push_back({text(field(op, "job")), key_text(field(op, "key")), text(field(op, "step")),
                    bytes(field(op, "bytes")), ms(first, last), ms(last, field(op, "finished_ns")),
                    stages.empty() ? std::string(kMissing) : stages,
                    code == 0 ? "ok" : text(field(op, "error"))});
  }
  out += "\nrecent ops (times in ms):\n";
  out += format_table({{"JOB"}, {"KEY", Align::kRight}, {"STEP", Align::kRight},
                       {"BYTES", Align::kRight}, {"ARRIVAL SPREAD", Align::kRight},
                       {"LAST ARRIVAL TO DONE", Align::kRight}, {"STAGES"}, {"RESULT"}},
                      rows);
  return out;
}

std::string render_clients(const json& reply) {
  const json& clients = field(reply, "clients");
  if (!clients.is_array() || clients.empty()) return "no clients connected\n";
  std::vector<Row> rows;
  for (const json& c : clients) {
    rows.push_back({
        text(field(c, "session")),
        text(field(c, "pid")),
        text(field(c, "uid")),
        text(field(c, "gid")),
        text(field(c, "job")),
        text(field(c, "rank")),
        text(field(c, "local_rank")),
        bytes(field(c, "arena_bytes")),
        bytes(field(c, "device_bytes")),
        text(field(c, "ops_submitted")),
        text(field(c, "ops_completed")),
        text(field(c, "ops_failed")),
        bytes(field(c, "bytes")),
        seconds(field(c, "connected_s")),
    });
  }
  return format_table(
      {
          {"SESSION", Align::kRight},
          {"PID", Align::kRight},
          {"UID", Align::kRight},
          {"GID", Align::kRight},
          {"JOB"},
          {"RANK", Align::kRight},
          {"LOCAL", Align::kRight},
          {"ARENA", Align::kRight},
          {"GPU MEM", Align::kRight},
          {"SUBMITTED", Align::kRight},
          {"DONE", Align::kRight},
          {"FAILED", Align::kRight},
          {"BYTES", Align::kRight},
          {"CONNECTED", Align::kRight},
      },
      rows);
}

namespace {
// "tcp", "verbs rxe0:1 gid 1 qpn 32->31, 0 cq errors", or "dpdk
// net_memif0, 12 resent, 0 timeouts, srtt 35 us".
std::string transport_text(const json& peer) {
  const json& d = field(peer, "dpdk");
  if (d.is_object())
    return fmt::format("dpdk {}, {} resent, {} timeouts, srtt {:.0f} us", text(field(d, "port")),
                       text(field(d, "frames_resent")), text(field(d, "timeouts")),
                       field(d, "srtt_us").is_number() ? field(d, "srtt_us").get<double>() : 0.0);
  const json& v = field(peer, "verbs");
  if (!v.is_object()) {
    // "tcp x2": how many connections the link has (docs/transport.md, "Streams").
    const json& n = field(peer, "streams");
    std::string t = text(field(peer, "transport"));
    return n.is_number_integer() && n.get<int>() > 1 ? fmt::format("{} x{}", t, n.get<int>()) : t;
  }
  return fmt::format("verbs {}:{} gid {} qpn {}->{}, {} cq errors", text(field(v, "device")),
                     text(field(v, "port")), text(field(v, "gid_index")), text(field(v, "qpn")),
                     text(field(v, "remote_qpn")), text(field(v, "completion_errors")));
}
}  // namespace

std::string render_peers(const json& reply) {
  const json& self = field(reply, "self");
  if (!self.is_object()) return "no cluster configured: this daemon is a single host\n";
  std::string out = fmt::format("cluster {}, this host {} ({}, rack {}), epoch {}\n",
                                text(field(reply, "cluster")), text(field(self, "host")),
                                text(field(self, "address")), text(field(self, "rack")),
                                text(field(reply, "epoch")));
  const json& peers = field(reply, "peers");
  if (!peers.is_array() || peers.empty()) return out + "no peers\n";
  std::vector<Row> rows;
  for (const json& p : peers) {
    // "connection refused (3m05s ago)": an old error beside a peer that is
    // up now reads as history, not as news.
    std::string last_error = text(field(p, "last_error"));
    if (last_error == kMissing) last_error.clear();
    const json& age = field(p, "last_error_age_s");
    if (!last_error.empty() && age.is_number())
      last_error += fmt::format(" ({} ago)", format_duration(age.get<double>()));
    rows.push_back({
        text(field(p, "host")),
        text(field(p, "address")),
        text(field(p, "rack")),
        text(field(p, "state")),
        transport_text(p),
        bytes(field(p, "bytes_sent")),
        bytes(field(p, "bytes_received")),
        bytes(field(p, "payload_wire_bytes")),
        bytes(field(p, "payload_logical_bytes")),
        gbps(field(p, "send_gbps")),
        gbps(field(p, "recv_gbps")),
        text(field(p, "connects")),
        last_error.empty() ? std::string(kMissing) : last_error,
    });
  }
  return out + format_table(
                   {
                       {"PEER"},
                       {"ADDRESS"},
                       {"RACK"},
                       {"STATE"},
                       {"TRANSPORT"},
                       {"SENT", Align::kRight},
                       {"RECEIVED", Align::kRight},
                       // Tensor bytes written to the peer, as they went
                       // (encoded where a codec applied) and as fp32.
                       {"PAYLOAD", Align::kRight},
                       {"AS FP32", Align::kRight},
                       {"SEND", Align::kRight},
                       {"RECV", Align::kRight},
                       {"CONNECTS", Align::kRight},
                       {"LAST ERROR"},
                   },
                   rows);
}

}  // namespace gsync::cli
