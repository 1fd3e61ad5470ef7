// SPDX-License-Identifier: Apache-2.0
//
// The Prometheus text exposition format, version 0.0.4
// (docs/operations.md, "Metrics"): families with their HELP and TYPE,
// samples with labels, histograms with cumulative buckets. Label values
// come from outside (job ids, host ids) and are escaped here: a backslash,
// a double quote and a newline, as the format says; a name is written only
// if it is a valid metric or label name (a bug otherwise, dropped).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace gsync::metrics {

using Labels = std::vector<std::pair<std::string, std::string>>;

class Exposition {
 public:
  // Begins a family: type is "counter", "gauge" or "histogram".
  void family(const std::string& name, const char* type, const char* help);
  // A sample of the current family (a counter's name ends in _total).
  void sample(const Labels& labels, double value);
  // A histogram of the current family: counts[i] observations at or below
  // bounds[i] (not cumulative; one more for +Inf), and their sum.
  void histogram(const Labels& labels, const std::vector<double>& bounds,
                 const std::vector<uint64_t>& counts, double sum);
  const std::string& text() const { return out_; }

  static bool valid_name(const std::string& name);
  static std::string escape(const std::string& value);

 private:
  void line(const std::string& name, const Labels& labels, double value);
  std::string family_;
  std::string out_;
};

}  // namespace gsync::metrics
