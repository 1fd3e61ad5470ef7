// SPDX-License-Identifier: Apache-2.0
//
// What the bytes of one admin connection ask for. The admin socket is the
// one way into the daemon for anyone in its group (docs/operations.md,
// "The admin protocol"), so what it reads is checked before it is looked up,
// echoed or logged: one line of at most kMaxAdminRequest bytes of printable
// UTF-8, ended by "\n" (or "\r\n"). Pure: the fuzz target
// tests/fuzz/fuzz_admin.cc calls it as the server does.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace gsync {

constexpr size_t kMaxAdminRequest = 256;

struct AdminRequest {
  enum class Kind {
    kIncomplete,  // no whole line yet: read more
    kCommand,     // command holds the line, checked
    kRefused,     // error says why; the reply is that error
  };
  Kind kind = Kind::kIncomplete;
  std::string command;
  std::string error;
};

// in: everything the connection has sent so far; closed: it will send no
// more (its write side is shut). An empty connection that closes is
// kIncomplete: there is no one to answer.
AdminRequest parse_admin_request(std::string_view in, bool closed);

}  // namespace gsync
