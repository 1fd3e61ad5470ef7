// SPDX-License-Identifier: Apache-2.0
//
// Plain-text tables and humanised numbers for gsyncctl (and any other tool
// that prints to a terminal). No JSON here: render.h turns replies into rows.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace gsync::cli {

enum class Align { kLeft, kRight };

struct Column {
  std::string title;
  Align align = Align::kLeft;
};

using Row = std::vector<std::string>;

// A header row and the rows below it, columns two spaces apart, numbers
// right-aligned where the column says so, no trailing blanks. Rows shorter
// than the header get empty cells; extra cells are dropped. Cell text comes
// from clients (job names), so control characters are shown as '?' rather
// than sent to the operator's terminal.
std::string format_table(const std::vector<Column>& columns, const std::vector<Row>& rows);

// "key:   value" lines with the values aligned, each line indented by indent.
std::string format_key_values(const std::vector<std::pair<std::string, std::string>>& rows,
                              int indent = 0);

// 512 -> "512 B", 1288490189 -> "1.2 GiB" (powers of 1024, one decimal).
std::string format_bytes(uint64_t bytes);

// 3.24 -> "3.2s", 303 -> "5m03s", 7500 -> "2h05m", 273600 -> "3d04h".
std::string format_duration(double seconds);

// GB/s (1e9 bytes per second) with two decimals: 2.5 -> "2.50 GB/s".
std::string format_gbps(double gbps);

// Width of s on a terminal: UTF-8 code points (no wide-character handling).
size_t display_width(const std::string& s);

}  // namespace gsync::cli
