// SPDX-License-Identifier: Apache-2.0
#include "daemon/records/op_history.h"

#include <time.h>

#include <algorithm>
#include <cstdint>

#include <nlohmann/json.hpp>

namespace gsync {

int64_t monotonic_ns(Clock::time_point t) {
  if (t == Clock::time_point{}) return 0;
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

int64_t realtime_ns() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

void OpHistoryEntry::take_times(const PipelineTimes* times) {
  if (!times) {
    pipeline.started = {};
    pipeline.stages.clear();
    pipeline.plan.clear();
    pipeline.wire = WireLog{};
    return;
  }
  pipeline.started = times->started;
  pipeline.stages = times->stages;
  pipeline.plan = times->plan;
  pipeline.wire = times->wire;
}

// Every field assigned, the strings and vectors reusing their memory.
void OpHistory::record(const OpEnd& e) {
  if (!record_) return;
  OpHistoryEntry& h = next();
  h.job = e.job;
  h.id = e.id;
  h.shape = e.shape;
  h.code = e.status.code();
  if (e.status)
    h.error.clear();
  else
    h.error = e.status.message();
  h.arrivals.clear();
  for (const auto& a : e.arrivals)
    if (a.rank >= 0) h.arrivals.emplace_back(a.rank, a.at);
  h.finished = e.ended;
  h.take_times(e.times);
}

OpHistory::OpHistory(size_t capacity, bool record)
    : capacity_(std::max<size_t>(capacity, 1)), record_(record) {}

namespace {
// The cache lines of n T at p, for writing.
template <typename T>
void prefetch(const T* p, size_t n) {
  if (n == 0) return;
  const uintptr_t end = reinterpret_cast<uintptr_t>(p + n);
  for (uintptr_t at = reinterpret_cast<uintptr_t>(p) & ~uintptr_t{63}; at < end; at += 64)
    __builtin_prefetch(reinterpret_cast<const void*>(at), 1);
}
}  // namespace

OpHistoryEntry& OpHistory::next() {
  if (slots_.size() < capacity_) return slots_.emplace_back();
  OpHistoryEntry& e = slots_[next_];
  next_ = (next_ + 1) % capacity_;
  // A full ring's slots were written ring_ops ops ago: cold, and the copy
  // into them waited on each miss (most of what recording cost a small
  // op). So what the next ops will write is fetched ahead, each step
  // reading only pointers the step before fetched an op earlier: the slot
  // three on, then the blocks of the slot two on.
  prefetch(&slots_[(next_ + 2) % capacity_], 1);
  const OpHistoryEntry& two = slots_[(next_ + 1) % capacity_];
  prefetch(two.arrivals.data(), two.arrivals.size());
  prefetch(two.pipeline.stages.data(), two.pipeline.stages.size());
  prefetch(two.pipeline.plan.data(), two.pipeline.plan.size());
  prefetch(two.pipeline.wire.events().data(), two.pipeline.wire.events().size());
  return e;
}

namespace {

// An op's transfers by peer link, each [chunk, what, ns, done_ns] in the
// order they happened: a link from this host holds the sends (issued,
// completion seen; done_ns 0 for a message, which has none), a link to it
// what arrived (seen; done_ns 0).
nlohmann::json wire_report(const WireLog& log, const std::vector<std::string>& hosts, int self) {
  using nlohmann::json;
  auto name = [&](int h) {
    return h >= 0 && size_t(h) < hosts.size() ? hosts[size_t(h)] : "host " + std::to_string(h);
  };
  struct Link {
    int peer;
    bool sent;
    json chunks;
  };
  std::vector<Link> links;  // a few: two per peer
  for (const WireEvent& e : log.events()) {
    auto it = std::find_if(links.begin(), links.end(),
                           [&](const Link& l) { return l.peer == e.peer && l.sent == e.sent; });
    if (it == links.end()) it = links.insert(links.end(), Link{e.peer, e.sent, json::array()});
    it->chunks.push_back({e.chunk, e.what, monotonic_ns(e.at), monotonic_ns(e.done)});
  }
  json out = json::array();
  for (auto& l : links)
    out.push_back({{"from", name(l.sent ? self : l.peer)},
                   {"to", name(l.sent ? l.peer : self)},
                   {"chunks", std::move(l.chunks)}});
  return {{"links", std::move(out)}, {"dropped", log.dropped()}, {"limit", WireLog::kMaxEvents}};
}

}  // namespace

nlohmann::json OpHistory::report(const std::vector<std::string>& hosts, int self) const {
  using nlohmann::json;
  json list = json::array();
  // Oldest first: from the slot next() hands out next, round the ring.
  for (size_t i = 0; i < slots_.size(); i++) {
    const OpHistoryEntry& e = slots_[(next_ + i) % slots_.size()];
    json arrivals = json::array();
    for (const auto& [rank, at] : e.arrivals) arrivals.push_back({{"rank", rank}, {"ns", monotonic_ns(at)}});
    json stages = json::array();
    for (const auto& st : e.pipeline.stages) {
      json marks = json::object();
      for (const auto& [name, at] : st.times.marks) marks[name] = monotonic_ns(at);
      stages.push_back({{"stage", st.name},
                        {"begun_ns", monotonic_ns(st.times.begun)},
                        {"first_input_ns", monotonic_ns(st.times.first_input)},
                        {"finished_ns", monotonic_ns(st.times.finished)},
                        {"marks_ns", marks}});
    }
    list.push_back({{"job", e.job},
                    {"key", e.id.key},
                    {"step", e.id.step},
                    {"op", proto::name(e.shape.opcode)},
                    {"bytes", e.shape.bytes()},
                    {"code", e.code},
                    {"error", e.error},
                    {"arrivals", arrivals},
                    {"started_ns", monotonic_ns(e.pipeline.started)},
                    {"stages", stages},
                    {"plan", e.pipeline.plan},
                    {"wire", wire_report(e.pipeline.wire, hosts, self)},
                    {"finished_ns", monotonic_ns(e.finished)}});
  }
  return list;
}

}  // namespace gsync
