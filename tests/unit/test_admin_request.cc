// SPDX-License-Identifier: Apache-2.0
//
// What an admin connection's bytes ask for (daemon/admin/admin_request.h),
// and the reply the server makes of them: always one JSON document, an
// error for anything malformed or unknown. The real socket, with the exact
// bytes of issue #15, is tests/integration/test_hostile_input.cc.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <thread>
#include <vector>

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

// A client of the admin socket on its own thread: sends one line and
// reads the reply until the server closes; or hangs up at once.
std::string ask(const std::string& path, const std::string& line, bool hang_up = false) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  path.copy(a.sun_path, sizeof a.sun_path - 1);
  if (fd < 0 || connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return "no connect";
  timeval tv{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  std::string out;
  if (send(fd, line.data(), line.size(), MSG_NOSIGNAL) == ssize_t(line.size()) && !hang_up) {
    char buf[256];
    for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0;) out.append(buf, size_t(n));
  }
  close(fd);
  return out;
}

// An async command (the daemon's `probe`) answers when its handler calls
// the Reply; meanwhile the loop serves other connections, and a client
// that hung up before its answer costs nothing when the answer comes.
TEST(AdminServer, AnAsyncCommandAnswersLaterWhileOthersAreServed) {
  namespace fs = std::filesystem;
  std::string dir = (fs::temp_directory_path() / "gsync-admin-async.XXXXXX").string();
  ASSERT_NE(mkdtemp(dir.data()), nullptr);
  const std::string path = dir + "/admin.sock";
  EventLoop loop;
  AdminServer admin(loop);
  admin.add("status", [] { return std::string(R"({"ok":true})"); });
  std::vector<AdminServer::Reply> pending;
  std::vector<std::string> args;
  admin.add_async("later", [&](const std::string& arg, AdminServer::Reply reply) {
    args.push_back(arg);
    pending.push_back(std::move(reply));
  });
  ASSERT_TRUE(admin.listen({path, 0600, ""}));
  std::string refused;
  EXPECT_NE(admin.respond("later\n", false, &refused).find("answered on a connection only"),
            std::string::npos);
  EXPECT_NE(admin.respond("nope\n", false, &refused).find("known: status, later"),
            std::string::npos)
      << refused;

  std::string waited, served;
  std::atomic<bool> a_done{false}, b_done{false}, c_done{false};
  std::thread a([&] { waited = ask(path, "later x\n"); a_done = true; });
  std::thread c([&] { ask(path, "later\n", true); c_done = true; });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  std::thread b;
  bool answered = false;
  loop.every(std::chrono::milliseconds(5), [&] {
    if (std::chrono::steady_clock::now() > deadline || a_done) return loop.stop();
    if (pending.size() == 2 && !b.joinable())
      b = std::thread([&] { served = ask(path, "status\n"); b_done = true; });
    if (b_done && c_done && !answered) {
      answered = true;
      for (size_t i = 0; i < 2; i++)  // the hung-up client's first or second
        pending[i](args[i] == "x" ? R"({"later":true})" : R"({"gone":true})");
    }
  });
  loop.run();
  for (std::thread* t : {&a, &b, &c})
    if (t->joinable()) t->join();
  EXPECT_TRUE(answered) << "the status request was not served while `later` waited";
  EXPECT_EQ(served, "{\"ok\":true}\n");
  EXPECT_EQ(waited, "{\"later\":true}\n");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace gsync
