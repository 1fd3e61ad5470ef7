// SPDX-License-Identifier: Apache-2.0
#include "daemon/metrics/exposition.h"

#include <cmath>

#include <fmt/format.h>

namespace gsync::metrics {

namespace {
// The shortest text that reads back as the same double (fmt's "{}"), as
// Prometheus' own clients write; non-finite values have their own spellings.
std::string number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == std::floor(v) && std::fabs(v) < 1e15) return fmt::format("{}", int64_t(v));
  return fmt::format("{}", v);
}
}  // namespace

bool Exposition::valid_name(const std::string& name) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); i++) {
    const char c = name[i];
    const bool letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
    if (!letter && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

std::string Exposition::escape(const std::string& value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

void Exposition::family(const std::string& name, const char* type, const char* help) {
  family_ = valid_name(name) ? name : std::string();
  if (family_.empty()) return;
  out_ += fmt::format("# HELP {} {}\n# TYPE {} {}\n", family_, help, family_, type);
}

void Exposition::line(const std::string& name, const Labels& labels, double value) {
  out_ += name;
  if (!labels.empty()) {
    out_ += '{';
    bool first = true;
    for (const auto& [k, v] : labels) {
      if (!valid_name(k)) continue;
      if (!first) out_ += ',';
      first = false;
      out_ += fmt::format("{}=\"{}\"", k, escape(v));
    }
    out_ += '}';
  }
  out_ += ' ';
  out_ += number(value);
  out_ += '\n';
}

void Exposition::sample(const Labels& labels, double value) {
  if (!family_.empty()) line(family_, labels, value);
}

void Exposition::histogram(const Labels& labels, const std::vector<double>& bounds,
                           const std::vector<uint64_t>& counts, double sum) {
  if (family_.empty()) return;
  uint64_t total = 0;
  for (size_t i = 0; i <= bounds.size() && i < counts.size(); i++) {
    total += counts[i];
    Labels with = labels;
    with.emplace_back("le", i < bounds.size() ? number(bounds[i]) : "+Inf");
    line(family_ + "_bucket", with, double(total));
  }
  line(family_ + "_sum", labels, sum);
  line(family_ + "_count", labels, double(total));
}

}  // namespace gsync::metrics
