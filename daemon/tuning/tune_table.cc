// SPDX-License-Identifier: Apache-2.0
#include "daemon/tuning/tune_table.h"

#include <algorithm>
#include <bit>
#include <cmath>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "daemon/core/json_text.h"

namespace gsync::tuning {

namespace {
using nlohmann::json;
constexpr int kFormat = 1;
constexpr size_t kMaxHosts = 4096, kMaxHostId = 255;

Status bad(size_t i, const std::string& what) {
  return {GSYNC_ERR_INVALID, fmt::format("tuning table entry {}: {}", i, what)};
}

Status parse_entry(const json& e, size_t i, TuneEntry* out) {
  if (!e.is_object()) return bad(i, "not an object");
  auto hosts = e.find("hosts");
  if (hosts == e.end() || !hosts->is_array() || hosts->empty() || hosts->size() > kMaxHosts)
    return bad(i, "\"hosts\" must be a non-empty array of host ids");
  for (const auto& h : *hosts) {
    if (!h.is_string() || h.get_ref<const std::string&>().empty() ||
        h.get_ref<const std::string&>().size() > kMaxHostId)
      return bad(i, "a host id in \"hosts\" is not a string of 1 to 255 bytes");
    out->hosts.push_back(h.get<std::string>());
  }
  auto bytes = e.find("bytes");
  if (bytes == e.end() || !bytes->is_number_unsigned() || bytes->get<uint64_t>() == 0)
    return bad(i, "\"bytes\" must be a positive integer");
  out->band = size_band(bytes->get<uint64_t>());
  auto algo = e.find("algorithm");
  if (algo == e.end() || !algo->is_string() ||
      !proto::algo_by_name(algo->get<std::string>(), &out->choice.algo) ||
      out->choice.algo == proto::kAlgoAuto)
    return bad(i, "\"algorithm\" must be ring, hier, direct, tree or doubling");
  auto chunk = e.find("chunk_bytes");
  if (chunk != e.end()) {
    if (!chunk->is_number_unsigned()) return bad(i, "\"chunk_bytes\" must be an integer >= 0");
    if (std::string why = proto::check_chunk_bytes(chunk->get<uint64_t>()); !why.empty())
      return bad(i, why);
    out->choice.chunk_bytes = chunk->get<uint64_t>();
  }
  auto us = e.find("us");
  if (us != e.end()) {
    if (!us->is_number() || !std::isfinite(us->get<double>()) || us->get<double>() < 0)
      return bad(i, "\"us\" must be a number >= 0");
    out->us = us->get<double>();
  }
  return Status::ok();
}

bool before(const TuneEntry& a, const TuneEntry& b) {
  return a.hosts != b.hosts ? a.hosts < b.hosts : a.band < b.band;
}
}  // namespace

uint8_t size_band(uint64_t bytes) {
  return bytes <= 1 ? 0 : static_cast<uint8_t>(std::bit_width(bytes - 1));
}

Status TuneTable::parse(std::string_view text, TuneTable* out) {
  if (text.size() > kMaxFileBytes)
    return {GSYNC_ERR_INVALID,
            fmt::format("tuning table is {} bytes, over the {} allowed", text.size(), kMaxFileBytes)};
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return {GSYNC_ERR_INVALID, "tuning table is not a JSON object"};
  auto format = j.find("format");
  if (format == j.end() || !format->is_number_integer() || format->get<int64_t>() != kFormat)
    return {GSYNC_ERR_INVALID, fmt::format("tuning table has no \"format\": {}", kFormat)};
  auto entries = j.find("entries");
  if (entries == j.end() || !entries->is_array())
    return {GSYNC_ERR_INVALID, "tuning table has no \"entries\" array"};
  if (entries->size() > kMaxEntries)
    return {GSYNC_ERR_INVALID, fmt::format("tuning table has {} entries, over the {} allowed",
                                           entries->size(), kMaxEntries)};
  TuneTable t;
  for (size_t i = 0; i < entries->size(); i++) {
    TuneEntry e;
    if (Status st = parse_entry((*entries)[i], i, &e); !st) return st;
    t.entries_.push_back(std::move(e));
  }
  std::stable_sort(t.entries_.begin(), t.entries_.end(), before);
  for (size_t i = 1; i < t.entries_.size(); i++)
    if (!before(t.entries_[i - 1], t.entries_[i]))
      return {GSYNC_ERR_INVALID,
              fmt::format("tuning table has two entries for hosts {} at sizes up to {} bytes",
                          fmt::join(t.entries_[i].hosts, ","), uint64_t{1} << t.entries_[i].band)};
  *out = std::move(t);
  return Status::ok();
}

json TuneTable::report() const {
  json rows = json::array();
  for (const TuneEntry& e : entries_)
    rows.push_back({{"hosts", e.hosts},
                    {"bytes", uint64_t{1} << e.band},
                    {"algorithm", proto::kAlgoNames[e.choice.algo]},
                    {"chunk_bytes", e.choice.chunk_bytes},
                    {"us", e.us}});
  return rows;
}

std::string TuneTable::to_json() const {
  return json_text(json{{"format", kFormat}, {"entries", report()}});
}

std::optional<proto::PlanChoice> TuneTable::lookup(const std::vector<std::string>& hosts,
                                                   uint64_t bytes) const {
  const int band = size_band(bytes);
  const TuneEntry* best = nullptr;
  for (const TuneEntry& e : entries_) {
    if (e.hosts != hosts) continue;
    // Sorted by band: the first of two equally near is the smaller band.
    if (!best || std::abs(e.band - band) < std::abs(best->band - band)) best = &e;
  }
  if (!best) return std::nullopt;
  return best->choice;
}

}  // namespace gsync::tuning
