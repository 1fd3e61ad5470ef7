// SPDX-License-Identifier: Apache-2.0
#include "tools/perf/codecs.h"

#include <cmath>
#include <cstring>

#include <nlohmann/json.hpp>

#include "tools/common/procs.h"

namespace gsync::perf {

namespace {
// Per codec, as the compressed schedules' test measured them at worst with
// margin (docs/compression.md, "Tests").
double bound_of(int codec) {
  switch (codec) {
    case GSYNC_CODEC_FP16: return 2e-3;
    case GSYNC_CODEC_BF16: return 1e-2;
    case GSYNC_CODEC_INT8: return 3e-2;
    // Top-k drops 99% of a step's values; what it sends is exact, but
    // against the dense exact sum no bound holds: the bits are checked.
    case GSYNC_CODEC_TOPK: return HUGE_VAL;
    default: return 0;
  }
}
}  // namespace

std::string parse_codecs(const std::vector<std::string>& texts, std::vector<CodecRun>* out) {
  out->clear();
  for (const auto& t : texts) {
    CodecRun r;
    r.text = t;
    if (gsync_compression_parse(t.c_str(), &r.c) != 0) return gsync_last_error();
    r.none = r.c.codec == GSYNC_CODEC_NONE;
    r.bound = bound_of(r.c.codec);
    out->push_back(r);
  }
  if (out->empty()) {
    CodecRun r;
    r.text = "none";
    gsync_compression_parse("none", &r.c);
    out->push_back(r);
  }
  return "";
}

std::string codecs_allowed(const std::vector<CodecRun>& runs, int dtype, int op) {
  for (const auto& r : runs) {
    if (r.none) continue;
    if (dtype != GSYNC_FLOAT32)
      return "--compress " + r.text + " needs --dtype float32 (codecs encode float32)";
    if (op == GSYNC_MIN || op == GSYNC_MAX)
      return "--compress " + r.text + " needs --op sum, avg or weighted_avg";
  }
  return "";
}

Payload hop_payload(const std::string& admin_socket, const gsync_compression_t& c) {
  Payload p;
  auto j = nlohmann::json::parse(tools::admin_query(admin_socket, "peers"), nullptr, false);
  if (!j.is_object() || !j["peers"].is_array() || !j["self"].is_object()) return p;
  std::string rack = j["self"].value("rack", "");
  for (const auto& peer : j["peers"]) {
    if (c.hops == GSYNC_HOPS_CROSS_RACK && peer.value("rack", "") == rack) continue;
    p.wire += peer.value("payload_wire_bytes", uint64_t{0});
    p.logical += peer.value("payload_logical_bytes", uint64_t{0});
  }
  return p;
}

double relative_error(const std::vector<double>& got, const std::vector<double>& want) {
  double err = 0, norm = 0;
  for (size_t i = 0; i < got.size() && i < want.size(); i++) {
    err += (got[i] - want[i]) * (got[i] - want[i]);
    norm += want[i] * want[i];
  }
  return norm > 0 ? std::sqrt(err / norm) : std::sqrt(err);
}

uint64_t bits_hash(const void* data, size_t bytes) {
  // FNV-1a over 8-byte words (and the tail): only equality matters.
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t h = 1469598103934665603ull;
  size_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = (h ^ w) * 1099511628211ull;
  }
  for (; i < bytes; i++) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

}  // namespace gsync::perf
