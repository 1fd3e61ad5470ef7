// SPDX-License-Identifier: Apache-2.0
//
// Text that came from outside (an admin request, a client's hello, a peer's
// abort message, a REFUSE reason, a host id) is carried inside the daemon
// as the bytes it was, and made safe where it leaves (docs/errors.md, "Text
// from outside"): JSON documents are written by json_text() (json_text.h),
// log lines go through the printable log sink (log.h), and messages for
// clients through printable(). Nothing here allocates beyond its result or
// throws on any input.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace gsync {

// Whether s is well-formed UTF-8 (RFC 3629: no overlong forms, no
// surrogates, nothing past U+10FFFF).
bool valid_utf8(std::string_view s);

// s as one line of printable UTF-8: valid characters other than controls
// pass unchanged; \n \r \t and a backslash are written as \n \r \t \\; any
// other control character or byte that is not part of a valid sequence as
// \xNN. At most max_bytes of output: a longer result is cut at a character
// boundary and ends in "...". The result is always valid UTF-8.
std::string printable(std::string_view s, size_t max_bytes = 1024);

// Whether printable(s) would be s itself (the common case: no copy needed).
bool is_printable(std::string_view s);

// "HOST:PORT" as a listen address is given ([metrics] listen): an IPv4
// address (or "localhost") and a port 0-65535. "" or what is wrong.
std::string parse_host_port(const std::string& text, std::string* host, uint16_t* port);

}  // namespace gsync
