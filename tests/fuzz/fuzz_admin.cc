// SPDX-License-Identifier: Apache-2.0
//
// The admin request handling (daemon/admin/): what one connection sent,
// as AdminServer::respond answers it on the socket. Input: one byte of
// flags (bit 0: the client has shut its side), then the bytes it sent.
// Properties: every reply is one JSON object ending in a newline, a refused
// request's reply is {"error": ...} and says why; and the text helpers
// every reply and log line goes through (daemon/core/text.h) agree with
// nlohmann::json on what valid UTF-8 is and always produce it.
#include <memory>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "daemon/admin/admin_server.h"
#include "daemon/core/json_text.h"
#include "daemon/core/text.h"
#include "tests/fuzz/fuzz_target.h"

namespace {

gsync::AdminServer& server() {
  static gsync::EventLoop loop;
  static std::unique_ptr<gsync::AdminServer> admin = [] {
    spdlog::set_level(spdlog::level::off);
    auto a = std::make_unique<gsync::AdminServer>(loop);
    a->add("status", [] { return gsync::json_text({{"version", "fuzz"}}); });
    // A report whose strings hold what a peer sent: invalid UTF-8 included.
    a->add("peers", [] {
      return gsync::json_text({{"last_error", "refused: cluster '\xff\xfe' \xed\xa0\x80"}});
    });
    return a;
  }();
  return *admin;
}

void check_text(std::string_view s) {
  using gsync::printable;
  std::string p = printable(s, 200);
  FUZZ_CHECK(p.size() <= 200);
  FUZZ_CHECK(gsync::valid_utf8(p));
  for (unsigned char c : p) FUZZ_CHECK(c >= 0x20 && c != 0x7f);
  FUZZ_CHECK(gsync::is_printable(s) == (printable(s, s.size() * 4 + 3) == s));
  // nlohmann's strict dump() throws exactly on what valid_utf8 refuses.
  bool threw = false;
  try {
    (void)nlohmann::json(std::string(s)).dump();
  } catch (const nlohmann::json::type_error&) {
    threw = true;
  }
  FUZZ_CHECK(threw == !gsync::valid_utf8(s));
  FUZZ_CHECK(!nlohmann::json::parse(gsync::json_text(std::string(s)), nullptr, false)
                  .is_discarded());
}

}  // namespace

GSYNC_FUZZ_TARGET(admin) {
  gsync::fuzz::Input in(data, size);
  bool closed = in.byte() & 1;
  std::string_view sent = in.rest();
  check_text(sent);
  std::string refused;
  std::string reply = server().respond(sent, closed, &refused);
  if (reply.empty()) {
    FUZZ_CHECK(refused.empty());
    return 0;
  }
  FUZZ_CHECK(reply.back() == '\n');
  FUZZ_CHECK(gsync::valid_utf8(reply));
  auto doc = nlohmann::json::parse(reply, nullptr, false);
  FUZZ_CHECK(!doc.is_discarded() && doc.is_object());
  if (!refused.empty()) {
    FUZZ_CHECK(doc.contains("error") && doc["error"].is_string());
  }
  return 0;
}
