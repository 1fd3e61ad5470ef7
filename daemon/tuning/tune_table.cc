// SPDX-License-Identifier: Apache-2.0
#include "daemon/tuning/tune_table.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <map>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <xxhash.h>

#include "daemon/core/json_text.h"

namespace gsync::tuning {

namespace {
using nlohmann::json;
constexpr int kFormat = 1;
constexpr size_t kMaxHosts = 4096, kMaxHostId = 255;
constexpr uint64_t kMaxBytes = uint64_t{1} << 62;  // its band, 62, still shifts

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
  if (bytes == e.end() || !bytes->is_number_unsigned() || bytes->get<uint64_t>() == 0 ||
      bytes->get<uint64_t>() > kMaxBytes)
    return bad(i, "\"bytes\" must be a positive integer up to 2^62");
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

uint32_t TuneTable::digest() const {
  if (entries_.empty()) return 0;
  const std::string text = to_json();
  uint32_t d = static_cast<uint32_t>(XXH64(text.data(), text.size(), 0) & 0xffffff);
  return d == 0 ? 1 : d;
}

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
  std::map<std::pair<std::vector<std::string>, uint8_t>, size_t> seen;
  for (size_t i = 0; i < entries->size(); i++) {
    TuneEntry e;
    if (Status st = parse_entry((*entries)[i], i, &e); !st) return st;
    // Named by index: the file's text is not quoted back.
    auto [at, fresh] = seen.emplace(std::make_pair(e.hosts, e.band), i);
    if (!fresh)
      return bad(i, fmt::format("the same hosts and size band (sizes up to {} bytes) as entry {}",
                                uint64_t{1} << e.band, at->second));
    t.entries_.push_back(std::move(e));
  }
  std::stable_sort(t.entries_.begin(), t.entries_.end(), before);
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
