// SPDX-License-Identifier: Apache-2.0
//
// The one way the daemon writes a JSON document. Strings in it may hold
// bytes from outside (a peer's abort message, a REFUSE reason, a host id, a
// job's last error), and nlohmann::json's dump() throws type_error 316 on
// invalid UTF-8 by default: one such byte in `gsyncctl jobs` would have
// stopped the daemon. Here invalid bytes become U+FFFD instead, so a
// document can always be written. tools/lint/check-layout.py refuses any
// other dump() in daemon/ (docs/errors.md, "Text from outside").
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace gsync {

inline std::string json_text(const nlohmann::json& doc) {
  return doc.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace gsync
