// SPDX-License-Identifier: Apache-2.0
#include "tools/gsyncctl/trace.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "tools/gsyncctl/trace_clock.h"

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

void read_wire(const json& op, OpTimeline* t);

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
  read_wire(op, &t);
  return t;
}

// An op's "wire": {"links": [{"from", "to", "chunks": [[chunk, what, ns,
// done_ns], ...]}], "dropped": n} (daemon/records/op_history.cc).
void read_wire(const json& op, OpTimeline* t) {
  auto w = op.find("wire");
  if (w == op.end() || !w->is_object()) return;
  t->wire_dropped = uint_of(*w, "dropped");
  for (const json& l : array_of(*w, "links")) {
    if (!l.is_object()) continue;
    OpTimeline::Link link{str_of(l, "from", "?"), str_of(l, "to", "?"), {}};
    for (const json& c : array_of(l, "chunks")) {
      if (!c.is_array() || c.size() < 4 || !c[0].is_number_integer() || c[0].get<int64_t>() < 0 ||
          !c[1].is_string() || !c[2].is_number_integer() || !c[3].is_number_integer())
        continue;
      link.chunks.push_back(
          {c[0].get<uint64_t>(), c[1].get<std::string>(), c[2].get<int64_t>(), c[3].get<int64_t>()});
    }
    t->links.push_back(std::move(link));
  }
}

// Every time of t moved by d onto another clock (0, a time never set, stays).
void shift_times(OpTimeline* t, int64_t d) {
  if (d == 0) return;
  auto move = [d](int64_t& v) {
    if (v != 0) v += d;
  };
  move(t->begin_ns);
  move(t->end_ns);
  for (auto& a : t->arrivals) move(a.ns);
  for (auto& st : t->stages) {
    move(st.begun_ns);
    move(st.finished_ns);
  }
  for (auto& l : t->links)
    for (auto& c : l.chunks) {
      move(c.ns);
      move(c.done_ns);
    }
}

// Track ids within a process: ops, then a stage each, a peer link each,
// a rank each.
constexpr int kOpsTid = 1;
constexpr int kStageTid = 100;
constexpr int kLinkTid = 5000;
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

// The sends of every daemon on the trace's one clock, to draw each
// arrival from when its sender issued it: a transfer is named by its op,
// its link, its chunk and what it carried, and by how many such came
// before it on the link (a ring sends a chunk's partial sums to the same
// peer several times, in order).
using SendIndex = std::map<std::string, int64_t>;

struct Counted {
  std::map<std::string, int> seen;
  std::string key(const std::string& job, const OpTimeline& t, const OpTimeline::Link& l,
                  const OpTimeline::WireChunk& c) {
    std::string k = fmt::format("{}\x1f{}\x1f{}\x1f{}\x1f{}\x1f{}", job, t.what(), l.from,
                                l.to, c.chunk, c.what);
    return fmt::format("{}\x1f{}", k, seen[k]++);
  }
};

void index_sends(const OpTimeline& t, const std::string& host, SendIndex* sends) {
  Counted n;
  for (const auto& l : t.links) {
    if (l.from != host) continue;
    for (const auto& c : l.chunks) (*sends)[n.key(t.job, t, l, c)] = c.ns;
  }
}

// One daemon's transfers on its links, gathered op by op and drawn once
// all are in (a link's spans follow one another across ops).
struct Transfer {
  const OpTimeline* op;
  const OpTimeline::Link* link;
  const OpTimeline::WireChunk* chunk;
  bool out;             // a send of this daemon's; else an arrival
  int64_t issued = 0;   // a send's; an arrival's by its sender (0: not known)
  int64_t ended = 0;    // a send's completion (0: none, a message); an arrival's seen
  int64_t at() const { return ended > 0 ? ended : issued; }
};
struct LinkTransfers {
  std::string name;  // "h1 -> h2"
  std::vector<Transfer> transfers;
};

void collect_links(const OpTimeline& t, const std::string& host, const SendIndex* sends,
                   std::vector<LinkTransfers>* links) {
  Counted n;
  for (const auto& l : t.links) {
    const std::string name = l.from + " -> " + l.to;
    auto it = std::find_if(links->begin(), links->end(),
                           [&](const LinkTransfers& x) { return x.name == name; });
    if (it == links->end()) it = links->insert(links->end(), {name, {}});
    const bool out = l.from == host;
    for (const auto& c : l.chunks) {
      Transfer x{&t, &l, &c, out, out ? c.ns : 0, out ? c.done_ns : c.ns};
      if (!out && sends) {
        auto s = sends->find(n.key(t.job, t, l, c));
        if (s != sends->end()) x.issued = s->second;
      }
      it->transfers.push_back(x);
    }
  }
}

// A track per link. A link carries one chunk after another, so a chunk's
// span is its time at the head of the link: from when it was issued, or
// when the chunk before it on the link was done if that was later (the
// wait is its `queued_us`), to its completion (a send) or to when it was
// seen here (an arrival, when its sender's issue is known: both daemons in
// the trace, on one clock). A message (no completion) and an arrival of
// unknown issue are instants.
void draw_links(json* events, int pid, std::vector<LinkTransfers>* links) {
  for (size_t i = 0; i < links->size(); i++) {
    auto& [name, transfers] = (*links)[i];
    const int tid = kLinkTid + int(i);
    name_track(events, pid, tid, name, tid);
    std::stable_sort(transfers.begin(), transfers.end(),
                     [](const Transfer& a, const Transfer& b) { return a.at() < b.at(); });
    int64_t free_at = 0;  // when the chunk before was done
    for (const Transfer& x : transfers) {
      const auto& c = *x.chunk;
      json args = {{"job", x.op->job}, {"op", x.op->what()}, {"chunk", c.chunk},
                   {"what", c.what},   {"from", x.link->from}, {"to", x.link->to}};
      if (x.issued > 0) args["issued_us"] = us(x.issued);
      if (x.ended > 0) args[x.out ? "completed_us" : "seen_us"] = us(x.ended);
      json e = {{"pid", pid},
                {"tid", tid},
                {"name", fmt::format("chunk {} {}", c.chunk, c.what)},
                {"cat", "wire"}};
      // Seen before it was issued only by the clocks' uncertainty: an
      // instant then, with both times.
      const bool span = x.issued > 0 && x.ended > x.issued;
      if (span) {
        const int64_t begin = std::min(std::max(x.issued, free_at), x.ended);
        args["queued_us"] = us(begin - x.issued);
        e.update({{"ph", "X"}, {"ts", us(begin)}, {"dur", us(x.ended - begin)}});
      } else {
        e.update({{"ph", "i"}, {"s", "t"}, {"ts", us(x.at())}});
      }
      if (x.ended > 0) free_at = std::max(free_at, x.ended);
      e["args"] = std::move(args);
      events->push_back(std::move(e));
    }
  }
}

void add_op(json* events, int pid, const OpTimeline& t, Tracks* tracks) {
  const std::string what = t.what();
  json args = {{"job", t.job}, {"bytes", t.bytes}, {"code", t.code}};
  if (!t.error.empty()) args["error"] = t.error;
  if (!t.links.empty() || t.wire_dropped > 0) {
    size_t kept = 0;
    for (const auto& l : t.links) kept += l.chunks.size();
    args["transfers"] = kept;
    args["transfers_dropped"] = t.wire_dropped;
  }
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
                  size_t* ops, const std::vector<ClockShift>& shifts) {
  json events = json::array();
  *ops = 0;
  // Every daemon's ops on the trace's clock first: an arrival is drawn
  // from its sender's issue, which may be another daemon's.
  std::vector<std::vector<OpTimeline>> timelines;
  std::vector<std::string> hosts;
  SendIndex sends;
  for (size_t p = 0; p < sources.size(); p++) {
    const bool shifted = p < shifts.size() && shifts[p].applied;
    timelines.push_back(recent_ops(sources[p].ops, job, seconds));
    hosts.push_back(str_of(sources[p].ops, "host"));
    for (OpTimeline& t : timelines.back()) {
      if (shifted) shift_times(&t, shifts[p].shift_ns);
      if (shifted) index_sends(t, hosts.back(), &sends);
    }
  }
  for (size_t p = 0; p < sources.size(); p++) {
    const int pid = int(p) + 1;
    const bool shifted = p < shifts.size() && shifts[p].applied;
    const std::string host = hosts[p].empty() ? "" : " (host " + hosts[p] + ")";
    events.push_back({{"ph", "M"},
                      {"pid", pid},
                      {"name", "process_name"},
                      {"args", {{"name", "gsyncd " + sources[p].name + host}}}});
    if (p < shifts.size())
      events.push_back({{"ph", "M"},
                        {"pid", pid},
                        {"name", "process_labels"},
                        {"args", {{"labels", "clock: " + shifts[p].how}}}});
    name_track(&events, pid, kOpsTid, "ops", 0);
    Tracks tracks;
    std::vector<LinkTransfers> links;
    for (const OpTimeline& t : timelines[p]) {
      add_op(&events, pid, t, &tracks);
      collect_links(t, hosts[p], shifted ? &sends : nullptr, &links);
      (*ops)++;
    }
    draw_links(&events, pid, &links);
  }
  json out = {{"traceEvents", events}, {"displayTimeUnit", "ms"}};
  if (!shifts.empty()) out["metadata"] = clock_metadata(sources, shifts);
  return out;
}

}  // namespace gsync::cli
