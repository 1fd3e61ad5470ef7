// SPDX-License-Identifier: Apache-2.0
//
// What an admin connection's bytes ask for (daemon/admin/admin_request.h),
// and the reply the server makes of them: always one JSON document, an
// error for anything malformed or unknown. The real socket, with the exact
// bytes of issue #15, is tests/integration/test_hostile_input.cc.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "daemon/admin/admin_request.h"
#include "daemon/admin/admin_server.h"

namespace gsync {
namespace {

using Kind = AdminRequest::Kind;

TEST(AdminRequest, ALineIsACommand) {
  auto r = parse_admin_request("status\n", false);
  EXPECT_EQ(r.kind, Kind::kCommand);
  EXPECT_EQ(r.command, "status");
  EXPECT_EQ(parse_admin_request("jobs\r\n", false).command, "jobs");
  EXPECT_EQ(parse_admin_request("stat", false).kind, Kind::kIncomplete);
  EXPECT_EQ(parse_admin_request("", true).kind, Kind::kIncomplete);
}

TEST(AdminRequest, MalformedRequestsAreRefusedSayingWhy) {
  struct Case {
    std::string in;
    bool closed;
    std::string says;
  } cases[] = {
      {"\xed\xa0\x80\n", false, "not valid UTF-8: '\\xed\\xa0\\x80'"},
      {std::string(300, 'a'), false, "longer than 256 bytes"},
      {"stat\x1b[2Jus\n", false, "control characters"},
      {std::string("st\0atus\n", 8), false, "control characters"},
      {"\n", false, "empty request"},
      {"status", true, "ended without a newline"},
  };
  for (const auto& c : cases) {
    auto r = parse_admin_request(c.in, c.closed);
    EXPECT_EQ(r.kind, Kind::kRefused) << c.says;
    EXPECT_NE(r.error.find(c.says), std::string::npos) << r.error;
  }
}

TEST(AdminServer, EveryReplyIsJsonAndRefusalsSayWhy) {
  EventLoop loop;
  AdminServer admin(loop);
  admin.add("status", [] { return std::string(R"({"ok":true})"); });
  admin.add("broken", []() -> std::string { throw std::runtime_error("no report today"); });
  std::string refused;
  EXPECT_EQ(nlohmann::json::parse(admin.respond("status\n", false, &refused))["ok"], true);
  EXPECT_TRUE(refused.empty());
  auto unknown = nlohmann::json::parse(admin.respond("\xed\xa0\x80\n", false, &refused));
  EXPECT_NE(unknown["error"].get<std::string>().find("not valid UTF-8"), std::string::npos);
  EXPECT_FALSE(refused.empty());
  auto typo = nlohmann::json::parse(admin.respond("staus\n", false, &refused));
  EXPECT_NE(typo["error"].get<std::string>().find("unknown admin command 'staus'; known: broken, "
                                                  "status"),
            std::string::npos)
      << typo;
  auto failed = nlohmann::json::parse(admin.respond("broken\n", false, &refused));
  EXPECT_NE(failed["error"].get<std::string>().find("no report today"), std::string::npos);
  EXPECT_EQ(admin.respond("sta", false, &refused), "");
}

}  // namespace
}  // namespace gsync
