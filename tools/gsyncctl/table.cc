// SPDX-License-Identifier: Apache-2.0

#include "tools/gsyncctl/table.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace gsync::cli {
namespace {

std::string sanitize(const std::string& s) {
  std::string out = s;
  for (char& c : out) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  }
  return out;
}

void append_padded(std::string* out, const std::string& cell, size_t width, Align align) {
  size_t pad = width - std::min(width, display_width(cell));
  if (align == Align::kRight) out->append(pad, ' ');
  out->append(cell);
  if (align == Align::kLeft) out->append(pad, ' ');
}

void strip_trailing_blanks(std::string* line) {
  while (!line->empty() && line->back() == ' ') line->pop_back();
}

}  // namespace

size_t display_width(const std::string& s) {
  // Count every byte that does not continue a UTF-8 sequence (10xxxxxx).
  return static_cast<size_t>(std::count_if(
      s.begin(), s.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xc0) != 0x80; }));
}

std::string format_table(const std::vector<Column>& columns, const std::vector<Row>& rows) {
  std::vector<Row> cells;
  cells.reserve(rows.size() + 1);
  Row header;
  for (const Column& c : columns) header.push_back(sanitize(c.title));
  cells.push_back(std::move(header));
  for (const Row& row : rows) {
    Row clean(columns.size());
    for (size_t i = 0; i < columns.size() && i < row.size(); ++i) clean[i] = sanitize(row[i]);
    cells.push_back(std::move(clean));
  }

  std::vector<size_t> widths(columns.size(), 0);
  for (const Row& row : cells) {
    for (size_t i = 0; i < columns.size(); ++i) {
      widths[i] = std::max(widths[i], display_width(row[i]));
    }
  }

  std::string out;
  for (const Row& row : cells) {
    std::string line;
    for (size_t i = 0; i < columns.size(); ++i) {
      if (i > 0) line += "  ";
      append_padded(&line, row[i], widths[i], columns[i].align);
    }
    strip_trailing_blanks(&line);
    out += line + "\n";
  }
  return out;
}

std::string format_key_values(const std::vector<std::pair<std::string, std::string>>& rows,
                              int indent) {
  size_t width = 0;
  for (const auto& [key, value] : rows) width = std::max(width, display_width(key) + 1);
  std::string out;
  for (const auto& [key, value] : rows) {
    std::string line(static_cast<size_t>(std::max(indent, 0)), ' ');
    append_padded(&line, sanitize(key) + ":", width, Align::kLeft);
    line += ' ';
    line += sanitize(value);
    strip_trailing_blanks(&line);
    out += line + "\n";
  }
  return out;
}

std::string format_bytes(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) return fmt::format("{} B", bytes);
  double value = static_cast<double>(bytes);
  size_t unit = 0;
  value /= 1024;
  // Step up while the one-decimal rendering would read 1024.0 or more.
  while (value >= 1023.95 && unit + 1 < std::size(kUnits)) {
    value /= 1024;
    ++unit;
  }
  return fmt::format("{:.1f} {}", value, kUnits[unit]);
}

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "-";
  if (seconds < 59.95) return fmt::format("{:.1f}s", seconds);  // not "60.0s"
  auto total = static_cast<uint64_t>(seconds);
  if (total < 3600) return fmt::format("{}m{:02}s", total / 60, total % 60);
  if (total < 86400) return fmt::format("{}h{:02}m", total / 3600, total % 3600 / 60);
  return fmt::format("{}d{:02}h", total / 86400, total % 86400 / 3600);
}

std::string format_gbps(double gbps) {
  if (!std::isfinite(gbps) || gbps < 0) return "-";
  return fmt::format("{:.2f} GB/s", gbps);
}

}  // namespace gsync::cli
