// SPDX-License-Identifier: Apache-2.0
//
// String helpers for error text. libgsync must not pull in fmt or spdlog (it
// is loaded into arbitrary framework processes), and gcc 12 has no
// std::format, so this is printf-style.
#pragma once

#include <cstdint>
#include <string>

namespace gsync::client {

// printf into a std::string.
std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

// "512 B", "4 KiB", "1.5 MiB", "300 MiB": whole numbers where exact.
std::string format_bytes(uint64_t bytes);

}  // namespace gsync::client
