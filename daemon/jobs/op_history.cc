// SPDX-License-Identifier: Apache-2.0
#include "daemon/jobs/op_history.h"

#include <algorithm>

#include <nlohmann/json.hpp>

namespace gsync {

int64_t monotonic_ns(Clock::time_point t) {
  if (t == Clock::time_point{}) return 0;
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

OpHistory::OpHistory(size_t capacity, bool record)
    : capacity_(std::max<size_t>(capacity, 1)), record_(record) {}

OpHistoryEntry& OpHistory::next() {
  if (slots_.size() < capacity_) return slots_.emplace_back();
  OpHistoryEntry& e = slots_[next_];
  next_ = (next_ + 1) % capacity_;
  return e;
}

nlohmann::json OpHistory::report() const {
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
                    {"finished_ns", monotonic_ns(e.finished)}});
  }
  return list;
}

}  // namespace gsync
