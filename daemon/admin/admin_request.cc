// SPDX-License-Identifier: Apache-2.0
#include "daemon/admin/admin_request.h"

#include <fmt/format.h>

#include "daemon/core/text.h"

namespace gsync {

namespace {
// Enough of a refused request to recognize it in the log and the reply.
constexpr size_t kQuoted = 64;

AdminRequest refused(std::string error) {
  AdminRequest r;
  r.kind = AdminRequest::Kind::kRefused;
  r.error = std::move(error);
  return r;
}
}  // namespace

AdminRequest parse_admin_request(std::string_view in, bool closed) {
  size_t nl = in.substr(0, kMaxAdminRequest + 1).find('\n');
  if (nl == std::string_view::npos) {
    if (in.size() > kMaxAdminRequest)
      return refused(fmt::format("request longer than {} bytes without a newline (starts '{}')",
                                 kMaxAdminRequest, printable(in, kQuoted)));
    if (!closed || in.empty()) return {};
    return refused(fmt::format("request '{}' ended without a newline", printable(in, kQuoted)));
  }
  std::string_view line = in.substr(0, nl);
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  if (!valid_utf8(line))
    return refused(fmt::format("request is not valid UTF-8: '{}'", printable(line, kQuoted)));
  if (!is_printable(line))
    return refused(fmt::format("request has control characters or a backslash: '{}'",
                               printable(line, kQuoted)));
  if (line.empty()) return refused("empty request: send a command name and a newline");
  AdminRequest r;
  r.kind = AdminRequest::Kind::kCommand;
  r.command = std::string(line);
  return r;
}

}  // namespace gsync
