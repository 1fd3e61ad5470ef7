// SPDX-License-Identifier: Apache-2.0

#include "tools/gsyncctl/render.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <string_view>

#include "tools/gsyncctl/table.h"
#include "tools/gsyncctl/tune.h"

namespace gsync::cli {
namespace {

using nlohmann::json;

constexpr std::string_view kMissing = "-";
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

const json& field(const json& obj, std::string_view key) {
  static const json kNull;
  if (!obj.is_object()) return kNull;
  auto it = obj.find(std::string(key));
  return it == obj.end() ? kNull : *it;
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

namespace {
// A key's checkpoints, indented under it: "  checkpoints: last clock 40,
// 2.1 s ago, 4.0 MiB in 0.031 s; 4 taken, 0 failed, 0 skipped; resumed
// from clock 20", and the last error when there is one.
std::string render_checkpoint(const json& c) {
  if (!c.is_object()) return "";
  std::string out = "  checkpoints: ";
  const json& last = field(c, "last");
  if (last.is_object()) {
    const json& age = field(last, "age_s");
    const json& dur = field(last, "duration_s");
    out += fmt::format("last clock {}, {} ago, {} in {}", text(field(last, "clock")),
                       age.is_number() ? fmt::format("{:.1f} s", age.get<double>()) : kMissing,
                       bytes(field(last, "bytes")),
                       dur.is_number() ? fmt::format("{:.3f} s", dur.get<double>()) : kMissing);
  } else {
    out += "none written yet";
  }
  out += fmt::format("; {} taken, {} failed, {} skipped", text(field(c, "taken")),
                     text(field(c, "failed")), text(field(c, "skipped")));
  const json& resumed = field(c, "resumed_from");
  if (resumed.is_number() && resumed.get<uint64_t>() != 0)
    out += fmt::format("; resumed from clock {}", resumed.get<uint64_t>());
  out += "\n";
  const json& err = field(c, "last_error");
  if (err.is_string()) out += fmt::format("  checkpoint error: {}\n", err.get<std::string>());
  return out;
}

// A parameter-server job's keys as this host serves them, a line each:
// "job train key 3 (sgd (lr 0.1), ssp:2): serves [0, 512) of 1024 float32;
// clocks h1 12, h2 11 (slowest h2); pulls waited h1 0.8 s, h2 0.0 s; 46
// updates (23.0/s), 1 pulls waiting".
std::string render_parameters(const json& job) {
  const json& keys = field(job, "parameters");
  if (!keys.is_array()) return "";
  std::string out;
  for (const json& k : keys) {
    std::string clocks;
    const json& wc = field(k, "worker_clocks");
    if (wc.is_object())
      for (auto it = wc.begin(); it != wc.end(); ++it)
        clocks += fmt::format("{}{} {}", clocks.empty() ? "" : ", ", it.key(), text(it.value()));
    std::string waited;
    const json& pw = field(k, "pull_wait_s");
    if (pw.is_object())
      for (auto it = pw.begin(); it != pw.end(); ++it)
        waited += fmt::format("{}{} {} s", waited.empty() ? "" : ", ", it.key(),
                              it.value().is_number() ? fmt::format("{:.1f}", it.value().get<double>())
                                                     : std::string(kMissing));
    const json& rate = field(k, "updates_per_s");
    const json& shard = field(k, "shard");
    std::string range = shard.is_array() && shard.size() == 2
                            ? fmt::format("[{}, {})", text(shard[0]), text(shard[1]))
                            : std::string(kMissing);
    out += fmt::format("job {} key {} ({}, {}): serves {} of {} {}; clocks {} (slowest {}); "
                       "pulls waited {}; {} updates ({}/s), {} pulls waiting\n",
                       text(field(job, "job")), text(field(k, "key")), text(field(k, "optimizer")),
                       text(field(k, "sync")), range, text(field(k, "count")),
                       text(field(k, "dtype")), clocks.empty() ? std::string(kMissing) : clocks,
                       text(field(k, "slowest_worker")),
                       waited.empty() ? std::string(kMissing) : waited,
                       text(field(k, "updates")),
                       rate.is_number() ? fmt::format("{:.1f}", rate.get<double>())
                                        : std::string(kMissing),
                       text(field(k, "pulls_waiting")));
    out += render_checkpoint(field(k, "checkpoint"));
  }
  return out;
}

// A job's batch leases: "job train leases (keeper h1): 3 departed; epoch 0:
// 64 batches, 40 settled, 2 outstanding, 1 reassigned, 22 free"; the
// epochs only on the keeper.
std::string render_leases(const json& job) {
  const json& l = field(job, "leases");
  if (!l.is_object() || l.empty()) return "";
  std::string out = fmt::format("job {} leases (keeper {}): {} leased here, {} departed",
                                text(field(job, "job")), text(field(l, "keeper")),
                                text(field(l, "leased")), text(field(job, "departures")));
  const json& epochs = field(l, "epochs");
  if (epochs.is_array())
    for (const json& e : epochs)
      out += fmt::format("; epoch {}: {} batches, {} settled, {} outstanding, {} reassigned, {} "
                         "free",
                         text(field(e, "epoch")), text(field(e, "batches")),
                         text(field(e, "settled")), text(field(e, "outstanding")),
                         text(field(e, "reassigned")), text(field(e, "free")));
  return out + "\n";
}

// "job J: rank 2 (pid 4711) is the straggler: last in 97% of 256 ops,
// 41.2 ms after the first (median; p99 45.0 ms)", when one is.
std::string render_straggler(const json& job) {
  const json& s = field(job, "stragglers");
  const json& who = field(s, "straggler");
  if (!who.is_number()) return "";
  for (const json& r : field(s, "ranks")) {
    if (field(r, "rank") != who) continue;
    auto num = [&](const char* k) {
      const json& v = field(r, k);
      return v.is_number() ? v.get<double>() : 0.0;
    };
    return fmt::format("job {}: rank {} (pid {}) is the straggler: last in {:.0f}% of {} ops, "
                       "{:.1f} ms after the first (median; p99 {:.1f} ms)\n",
                       text(field(job, "job")), text(who), text(field(r, "pid")),
                       100 * num("last_share"), text(field(s, "ops")), 1e3 * num("median_lag_s"),
                       1e3 * num("p99_lag_s"));
  }
  return "";
}

// "job J: host h2 is last in 90% of 256 ops by a median 40.1 ms (p99
// 44.0 ms)", when one host of a job on several is the straggler.
std::string render_host_straggler(const json& job) {
  const json& s = field(job, "stragglers");
  const json& who = field(s, "host_straggler");
  if (!who.is_string()) return "";
  for (const json& h : field(s, "hosts")) {
    if (field(h, "host") != who) continue;
    auto num = [&](const char* k) {
      const json& v = field(h, k);
      return v.is_number() ? v.get<double>() : 0.0;
    };
    return fmt::format("job {}: host {} is last in {:.0f}% of {} ops by a median {:.1f} ms "
                       "(p99 {:.1f} ms)\n",
                       text(field(job, "job")), text(who), 100 * num("last_share"),
                       text(field(s, "host_ops")), 1e3 * num("lag_median_s"),
                       1e3 * num("lag_p99_s"));
  }
  return "";
}

// The second table of --stragglers: a job's hosts, each behind the first
// host ready (as this daemon's clock saw them).
std::string render_host_lags(const json& job) {
  const json& s = field(job, "stragglers");
  const json& hosts = field(s, "hosts");
  if (!hosts.is_array() || hosts.empty()) return "";
  auto ms = [](const json& v) {
    return v.is_number() ? fmt::format("{:.2f} ms", 1e3 * v.get<double>()) : std::string(kMissing);
  };
  std::vector<Row> rows;
  for (const json& h : hosts) {
    const json& share = field(h, "last_share");
    rows.push_back({"  " + text(field(h, "host")) + (field(h, "self") == true ? " (this)" : ""),
                    ms(field(h, "lag_median_s")), ms(field(h, "lag_p99_s")),
                    share.is_number() ? fmt::format("{:.0f}%", 100 * share.get<double>())
                                      : std::string(kMissing)});
  }
  return fmt::format("  hosts, over {} cross-host ops (lag behind the first host ready):\n",
                     text(field(s, "host_ops"))) +
         format_table({{"  HOST"},
                       {"LAG MEDIAN", Align::kRight},
                       {"LAG P99", Align::kRight},
                       {"LAST IN", Align::kRight}},
                      rows) +
         render_host_straggler(job);
}
}  // namespace

std::string render_stragglers(const json& reply) {
  const json& jobs = field(reply, "jobs");
  if (!jobs.is_array() || jobs.empty()) return "no jobs\n";
  std::string out;
  for (const json& job : jobs) {
    const json& s = field(job, "stragglers");
    out += fmt::format("job {}: {} ops with every local rank\n", text(field(job, "job")),
                       text(field(s, "ops")));
    const json& ranks = field(s, "ranks");
    if (ranks.is_array())
      for (const json& r : ranks) {
        auto ms = [&](const char* k) {
          const json& v = field(r, k);
          return v.is_number() ? fmt::format("{:.2f} ms", 1e3 * v.get<double>())
                               : std::string(kMissing);
        };
        const json& share = field(r, "last_share");
        out += fmt::format("  rank {} (local {}, pid {}): {} after the first (median), {} (p99); "
                           "last in {}\n",
                           text(field(r, "rank")), text(field(r, "local_rank")),
                           text(field(r, "pid")), ms("median_lag_s"), ms("p99_lag_s"),
                           share.is_number() ? fmt::format("{:.0f}%", 100 * share.get<double>())
                                             : std::string(kMissing));
      }
    out += render_straggler(job) + render_host_lags(job);
  }
  return out;
}

std::string render_jobs(const json& reply) {
  const json& jobs = field(reply, "jobs");
  if (!jobs.is_array() || jobs.empty()) return "no jobs\n";
  std::vector<Row> rows;
  for (const json& job : jobs) {
    const json& ranks = field(job, "ranks");
    size_t connected = 0;
    std::string dead;
    if (ranks.is_array()) {
      for (const json& r : ranks) {
        std::string state = text(field(r, "state"));
        if (state == "connected") ++connected;
        if (state != "dead") continue;
        if (!dead.empty()) dead += ',';
        dead += text(field(r, "rank"));
      }
    }
    std::string last_error = text(field(job, "last_error"));
    rows.push_back({
        text(field(job, "job")),
        text(field(job, "world_size")),
        fmt::format("{}/{}", connected, text(field(job, "local_size"))),
        dead.empty() ? std::string(kMissing) : dead,
        text(field(job, "ops_completed")),
        text(field(job, "ops_failed")),
        text(field(job, "ops_in_flight")),
        bytes(field(job, "bytes_reduced")),
        gbps(field(job, "throughput_gbps")),
        bytes(field(job, "error_feedback_bytes")),
        bytes(field(job, "pinned_bytes")),
        last_error.empty() ? std::string(kMissing) : last_error,
    });
  }
  std::string out = format_table(
      {
          {"JOB"},
          {"WORLD", Align::kRight},
          {"LOCAL UP", Align::kRight},
          {"DEAD"},
          {"OPS DONE", Align::kRight},
          {"FAILED", Align::kRight},
          {"IN FLIGHT", Align::kRight},
          {"REDUCED", Align::kRight},
          {"THROUGHPUT", Align::kRight},
          {"EF HELD", Align::kRight},
          {"PINNED", Align::kRight},
          {"LAST ERROR"},
      },
      rows);
  for (const json& job : jobs)
    out += render_parameters(job) + render_leases(job) + render_straggler(job) +
           render_host_straggler(job);
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
      rows.push_back({text(field(op, "job")), text(field(op, "key")), text(field(op, "step")),
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
    rows.push_back({text(field(op, "job")), text(field(op, "key")), text(field(op, "step")),
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
