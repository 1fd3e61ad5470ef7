// SPDX-License-Identifier: Apache-2.0
#include "tools/gsyncctl/trace.h"

#include <fmt/format.h>

#include <map>

namespace gsync::cli {

namespace {
using nlohmann::json;

// Chrome trace timestamps are microseconds.
double us(int64_t ns) { return double(ns) / 1e3; }

// Fields of a reply that may come from an older or newer daemon: a field
// that is missing or of another type reads as the fallback.
int64_t int_of(const json& j, const char* key, int64_t fallback = 0) {
  auto it = j.find(key);
  return it != j.end() && it->is_number_integer() ? it->get<int64_t>() : fallback;
}

uint64_t uint_of(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number_integer()) return 0;
  return it->is_number_unsigned() || it->get<int64_t>() >= 0 ? it->get<uint64_t>() : 0;
}

std::string str_of(const json& j, const char* key, const std::string& fallback = "") {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : fallback;
}

const json& array_of(const json& j, const char* key) {
  static const json kEmpty = json::array();
  auto it = j.find(key);
  return it != j.end() && it->is_array() ? *it : kEmpty;
}

OpTimeline timeline_of(const json& op) {
  OpTimeline t;
  t.job = str_of(op, "job");
  t.op = str_of(op, "op", "op");
  t.key = uint_of(op, "key");
  t.step = uint_of(op, "step");
  t.bytes = uint_of(op, "bytes");
  t.code = int(int_of(op, "code"));
  t.error = str_of(op, "error");
  t.end_ns = int_of(op, "finished_ns");
  t.begin_ns = t.end_ns;
  for (const json& a : array_of(op, "arrivals")) {
    if (!a.is_object()) continue;
    t.arrivals.push_back({int_of(a, "rank", -1), int_of(a, "ns")});
    const int64_t at = t.arrivals.back().ns;
    if (at > 0 && at < t.begin_ns) t.begin_ns = at;
  }
  for (const json& st : array_of(op, "stages"))
    if (st.is_object())
      t.stages.push_back(
          {str_of(st, "stage", "stage"), int_of(st, "begun_ns"), int_of(st, "finished_ns")});
  return t;
}

// Track ids within a process: ops, then a stage each, then a rank each.
constexpr int kOpsTid = 1;
constexpr int kStageTid = 100;
constexpr int kRankTid = 10000;

void name_track(json* events, int pid, int tid, const std::string& name, int sort) {
  events->push_back({{"ph", "M"},
                     {"pid", pid},
                     {"tid", tid},
                     {"name", "thread_name"},
                     {"args", {{"name", name}}}});
  events->push_back({{"ph", "M"},
                     {"pid", pid},
                     {"tid", tid},
                     {"name", "thread_sort_index"},
                     {"args", {{"sort_index", sort}}}});
}

// One daemon's tracks: which are named already.
struct Tracks {
  std::map<std::string, int> stage_tids;
  std::map<int64_t, bool> ranks_named;
};

void add_op(json* events, int pid, const OpTimeline& t, Tracks* tracks) {
  const std::string what = t.what();
  json args = {{"job", t.job}, {"bytes", t.bytes}, {"code", t.code}};
  if (!t.error.empty()) args["error"] = t.error;
  events->push_back({{"ph", "X"},
                     {"pid", pid},
                     {"tid", kOpsTid},
                     {"name", what},
                     {"cat", "op"},
                     {"ts", us(t.begin_ns)},
                     {"dur", us(t.end_ns - t.begin_ns)},
                     {"args", args}});
  for (const auto& a : t.arrivals) {
    const int tid = kRankTid + int(a.rank);
    if (!tracks->ranks_named[a.rank]) {
      name_track(events, pid, tid, fmt::format("rank {}", a.rank), 1000 + int(a.rank));
      tracks->ranks_named[a.rank] = true;
    }
    events->push_back({{"ph", "i"},
                       {"s", "t"},
                       {"pid", pid},
                       {"tid", tid},
                       {"name", "arrives: " + what},
                       {"cat", "arrival"},
                       {"ts", us(a.ns)},
                       {"args", {{"job", t.job}}}});
  }
  for (const auto& st : t.stages) {
    auto [it, fresh] =
        tracks->stage_tids.emplace(st.stage, kStageTid + int(tracks->stage_tids.size()));
    if (fresh) name_track(events, pid, it->second, "stage " + st.stage, it->second);
    if (!st.valid()) continue;
    events->push_back({{"ph", "X"},
                       {"pid", pid},
                       {"tid", it->second},
                       {"name", st.stage + ": " + what},
                       {"cat", "stage"},
                       {"ts", us(st.begun_ns)},
                       {"dur", us(st.finished_ns - st.begun_ns)},
                       {"args", {{"job", t.job}}}});
  }
}
}  // namespace

std::string OpTimeline::what() const { return fmt::format("{} key {} step {}", op, key, step); }

std::vector<OpTimeline> recent_ops(const json& ops_reply, const std::string& job, double seconds) {
  std::vector<OpTimeline> out;
  if (!ops_reply.is_object()) return out;
  const int64_t now = int_of(ops_reply, "now_ns");
  for (const json& op : array_of(ops_reply, "recent")) {
    if (!op.is_object()) continue;
    if (!job.empty() && str_of(op, "job") != job) continue;
    const int64_t end = int_of(op, "finished_ns");
    if (seconds > 0 && now > 0 && double(now - end) > seconds * 1e9) continue;
    out.push_back(timeline_of(op));
  }
  return out;
}

json chrome_trace(const std::vector<TraceSource>& sources, const std::string& job, double seconds,
                  size_t* ops) {
  json events = json::array();
  *ops = 0;
  for (size_t p = 0; p < sources.size(); p++) {
    const int pid = int(p) + 1;
    events.push_back({{"ph", "M"},
                      {"pid", pid},
                      {"name", "process_name"},
                      {"args", {{"name", "gsyncd " + sources[p].name}}}});
    name_track(&events, pid, kOpsTid, "ops", 0);
    Tracks tracks;
    for (const OpTimeline& t : recent_ops(sources[p].ops, job, seconds)) {
      add_op(&events, pid, t, &tracks);
      (*ops)++;
    }
  }
  return json{{"traceEvents", events}, {"displayTimeUnit", "ms"}};
}

}  // namespace gsync::cli
