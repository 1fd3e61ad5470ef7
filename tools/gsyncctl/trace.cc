// SPDX-License-Identifier: Apache-2.0
#include "tools/gsyncctl/trace.h"

#include <fmt/format.h>

#include <map>

namespace gsync::cli {

namespace {
using nlohmann::json;

// Chrome trace timestamps are microseconds.
double us(int64_t ns) { return double(ns) / 1e3; }

int64_t ns_of(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_number_integer() ? it->get<int64_t>() : 0;
}

// Track ids within a process: ops, then a stage each, then a rank each.
constexpr int kOpsTid = 1;
constexpr int kStageTid = 100;
constexpr int kRankTid = 10000;

void name_track(json* events, int pid, int tid, const std::string& name, int sort) {
  events->push_back({{"ph", "M"}, {"pid", pid}, {"tid", tid}, {"name", "thread_name"},
                     {"args", {{"name", name}}}});
  events->push_back({{"ph", "M"}, {"pid", pid}, {"tid", tid}, {"name", "thread_sort_index"},
                     {"args", {{"sort_index", sort}}}});
}
}  // namespace

json chrome_trace(const std::vector<TraceSource>& sources, const std::string& job,
                  double seconds, size_t* ops) {
  json events = json::array();
  *ops = 0;
  for (size_t p = 0; p < sources.size(); p++) {
    const int pid = int(p) + 1;
    const TraceSource& src = sources[p];
    events.push_back({{"ph", "M"}, {"pid", pid}, {"name", "process_name"},
                      {"args", {{"name", "gsyncd " + src.name}}}});
    name_track(&events, pid, kOpsTid, "ops", 0);
    std::map<std::string, int> stage_tids;
    std::map<int64_t, bool> ranks_named;
    const int64_t now = ns_of(src.ops, "now_ns");
    const json& recent = src.ops.contains("recent") ? src.ops["recent"] : json::array();
    for (const json& op : recent) {
      if (!op.is_object()) continue;
      const std::string op_job = op.value("job", "");
      if (!job.empty() && op_job != job) continue;
      const int64_t end = ns_of(op, "finished_ns");
      if (seconds > 0 && now > 0 && double(now - end) > seconds * 1e9) continue;
      int64_t begin = end;
      for (const json& a : op.value("arrivals", json::array())) {
        const int64_t at = ns_of(a, "ns");
        if (at > 0 && at < begin) begin = at;
      }
      const std::string what = fmt::format("{} key {} step {}", op.value("op", "op"),
                                           op.value("key", uint64_t{0}),
                                           op.value("step", uint64_t{0}));
      json args = {{"job", op_job}, {"bytes", op.value("bytes", uint64_t{0})},
                   {"code", op.value("code", 0)}};
      if (!op.value("error", std::string()).empty()) args["error"] = op["error"];
      events.push_back({{"ph", "X"}, {"pid", pid}, {"tid", kOpsTid}, {"name", what},
                        {"cat", "op"}, {"ts", us(begin)}, {"dur", us(end - begin)},
                        {"args", args}});
      (*ops)++;
      for (const json& a : op.value("arrivals", json::array())) {
        const int64_t rank = a.value("rank", int64_t{-1});
        const int tid = kRankTid + int(rank);
        if (!ranks_named[rank]) {
          name_track(&events, pid, tid, fmt::format("rank {}", rank), 1000 + int(rank));
          ranks_named[rank] = true;
        }
        events.push_back({{"ph", "i"}, {"s", "t"}, {"pid", pid}, {"tid", tid},
                          {"name", "arrives: " + what}, {"cat", "arrival"},
                          {"ts", us(ns_of(a, "ns"))}, {"args", {{"job", op_job}}}});
      }
      for (const json& st : op.value("stages", json::array())) {
        const std::string stage = st.value("stage", "stage");
        auto [it, fresh] = stage_tids.emplace(stage, kStageTid + int(stage_tids.size()));
        if (fresh) name_track(&events, pid, it->second, "stage " + stage, it->second);
        const int64_t b = ns_of(st, "begun_ns"), e = ns_of(st, "finished_ns");
        if (b <= 0 || e < b) continue;
        events.push_back({{"ph", "X"}, {"pid", pid}, {"tid", it->second},
                          {"name", stage + ": " + what}, {"cat", "stage"}, {"ts", us(b)},
                          {"dur", us(e - b)}, {"args", {{"job", op_job}}}});
      }
    }
  }
  return json{{"traceEvents", events}, {"displayTimeUnit", "ms"}};
}

}  // namespace gsync::cli
