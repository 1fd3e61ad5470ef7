// SPDX-License-Identifier: Apache-2.0
#include "libclient/format.h"

#include <cstdarg>
#include <cstdio>

namespace gsync::client {

std::string format(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  va_list ap2;
  va_copy(ap2, ap);
  const int n = std::vsnprintf(nullptr, 0, fmt, ap);
  va_end(ap);
  std::string out;
  if (n > 0) {
    out.resize(static_cast<size_t>(n) + 1);
    std::vsnprintf(out.data(), out.size(), fmt, ap2);
    out.resize(static_cast<size_t>(n));
  }
  va_end(ap2);
  return out;
}

std::string format_bytes(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int unit = 0;
  uint64_t scale = 1;
  while (unit + 1 < 7 && bytes / scale >= 1024) {
    scale *= 1024;
    ++unit;
  }
  if (bytes % scale == 0) {
    return format("%llu %s", static_cast<unsigned long long>(bytes / scale), kUnits[unit]);
  }
  return format("%.1f %s", static_cast<double>(bytes) / static_cast<double>(scale), kUnits[unit]);
}

}  // namespace gsync::client
