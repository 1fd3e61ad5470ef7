// SPDX-License-Identifier: Apache-2.0
//
// Nothing from outside stops the daemon (issue #15; docs/errors.md, "Text
// from outside"). Real daemons, the exact bytes a hostile local process
// sends, and after each the daemon still serves a job: four bytes of
// invalid UTF-8 on the admin socket (which used to end gsyncd with
// nlohmann::json's type_error), and every other malformed admin request: a
// JSON error each, one log line naming the sender. And the admin socket's
// mode and group, and that other users cannot use it.
#include <gtest/gtest.h>
#include <grp.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "daemon/core/text.h"
#include "tests/integration/client_util.h"

namespace gsync::test {
namespace {

using nlohmann::json;

int connect_unix(const std::string& path) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::snprintf(a.sun_path, sizeof a.sun_path, "%s", path.c_str());
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    int err = errno;
    close(fd);
    errno = err;
    return -1;
  }
  return fd;
}

// Sends bytes to the admin socket exactly as given, shuts the write side
// (as `printf ... | socat - UNIX-CONNECT:` does) and reads the reply to the
// daemon's close, for at most 10 s.
std::string admin_raw(const std::string& path, const std::string& bytes) {
  int fd = connect_unix(path);
  if (fd < 0) return "connect: " + std::string(strerror(errno));
  timeval tv{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  [[maybe_unused]] ssize_t n = send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
  shutdown(fd, SHUT_WR);
  std::string out;
  char buf[4096];
  while ((n = recv(fd, buf, sizeof buf, 0)) > 0) out.append(buf, static_cast<size_t>(n));
  close(fd);
  return out;
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) n++;
  return n;
}

// A small allreduce on a fresh job: proves the daemon still serves.
void expect_daemon_serves(const DaemonProcess& d, const std::string& job) {
  ASSERT_TRUE(d.alive()) << d.log();
  auto res = run_ranks(2, [&](int r) {
    gsync_comm_t* comm;
    RANK_CHECK(connect_rank(d.socket(), job, 2, r, &comm) == 0, "{}", gsync_last_error());
    float* buf;
    RANK_CHECK(gsync_alloc(comm, 4096, reinterpret_cast<void**>(&buf)) == 0, "alloc");
    for (int i = 0; i < 1024; i++) buf[i] = float(r + 1);
    gsync_request_t* req;
    RANK_CHECK(gsync_allreduce(comm, 1, 0, buf, 1024, GSYNC_FLOAT32, GSYNC_SUM, 0, &req) == 0,
               "submit");
    RANK_CHECK(gsync_wait(req, 10000) == 0, "{}", gsync_request_error(req));
    RANK_CHECK(buf[1023] == 3.0f, "got {}", buf[1023]);
    gsync_request_free(req);
    gsync_close(comm);
    return 0;
  });
  for (auto& r : res) EXPECT_EQ(r.code, 0) << r.output;
}

// A forked child and the parent's ends of its pipes: however the test
// ends (a failed ASSERT included), the pipes close and the child is
// killed and reaped, so a child blocked on a pipe can never outlive it.
struct ChildGuard {
  pid_t pid = -1;
  std::vector<int> fds;
  ~ChildGuard() {
    for (int fd : fds) close(fd);
    if (pid > 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  }
};

// The bytes of issue #15. A job is connected while they arrive: it is what
// the daemon's death took with it.
TEST(AdminSocket, Issue15InvalidUtf8GetsAJsonErrorAndTheDaemonServesOn) {
  DaemonProcess d;
  int ready[2], go[2];
  ASSERT_EQ(pipe(ready), 0);
  ASSERT_EQ(pipe(go), 0);
  ChildGuard guard;
  guard.fds = {ready[0], go[1]};
  pid_t rank = spawn([&] {
    gsync_comm_t* comm;
    if (connect_rank(d.socket(), "live-job", 1, 0, &comm) != 0) return 1;
    char c = 'r';
    [[maybe_unused]] ssize_t n = write(ready[1], &c, 1);
    n = read(go[0], &c, 1);
    float* buf;
    if (gsync_alloc(comm, 4096, reinterpret_cast<void**>(&buf)) != 0) return 2;
    gsync_request_t* req;
    if (gsync_allreduce(comm, 1, 0, buf, 1024, GSYNC_FLOAT32, GSYNC_SUM, 0, &req) != 0) return 3;
    if (gsync_wait(req, 10000) != 0) return 4;
    gsync_close(comm);
    return 0;
  });
  guard.pid = rank;
  close(ready[1]);
  close(go[0]);
  ASSERT_TRUE(read_byte(ready[0])) << "the rank did not connect\n" << d.log();

  std::string reply = admin_raw(d.admin_socket(), "\xed\xa0\x80\n");
  ASSERT_FALSE(reply.empty()) << "no reply: the daemon closed without one\n" << d.log();
  json doc = json::parse(reply, nullptr, false);
  ASSERT_FALSE(doc.is_discarded()) << "the reply is not JSON: " << reply;
  EXPECT_NE(doc.value("error", "").find("not valid UTF-8: '\\xed\\xa0\\x80'"), std::string::npos)
      << reply;
  EXPECT_TRUE(d.alive()) << d.log();
  // The live job goes on, and the daemon answers the next admin request.
  ASSERT_EQ(write(go[1], "g", 1), 1);
  int st = 0;
  ASSERT_EQ(waitpid(rank, &st, 0), rank);
  guard.pid = -1;
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "rank exit " << st << "\n" << d.log();
  EXPECT_FALSE(json::parse(admin_query(d.admin_socket(), "status"), nullptr, false).is_discarded());
  // Logged once, naming who sent it.
  std::string who = fmt::format("refused a request from pid {} uid {}", getpid(), getuid());
  EXPECT_EQ(count(d.log(), who), 1u) << d.log();
  expect_daemon_serves(d, "after-issue-15");
}

// Every kind of malformed or refused request: one JSON error each, one
// log line each, and the daemon still serves.
TEST(AdminSocket, EveryMalformedRequestGetsAJsonErrorAndOneLogLine) {
  DaemonProcess d;
  struct Case {
    std::string bytes, says;
  } cases[] = {
      {std::string(4096, 'a'), "longer than 256 bytes"},
      {"staus\n", "unknown admin command 'staus'; known: clients, jobs, ops, peers, status"},
      {"status\x1b]0;owned\x07\n", "control characters"},
      {std::string("jobs\0\n", 6), "control characters"},
      {"\xff\xfe\n", "not valid UTF-8"},
      {"status", "ended without a newline"},
      {"\n", "empty request"},
  };
  for (const auto& c : cases) {
    std::string reply = admin_raw(d.admin_socket(), c.bytes);
    json doc = json::parse(reply, nullptr, false);
    ASSERT_FALSE(doc.is_discarded()) << c.says << ": not JSON: " << reply << "\n" << d.log();
    EXPECT_NE(doc.value("error", "").find(c.says), std::string::npos) << reply;
    EXPECT_TRUE(valid_utf8(reply) && reply.back() == '\n') << reply;
  }
  std::string log = d.log();
  EXPECT_EQ(count(log, fmt::format("refused a request from pid {} uid {}", getpid(), getuid())),
            std::size(cases))
      << log;
  // The log stays one line per refusal: no control character got through.
  EXPECT_EQ(log.find("\x1b]0;owned"), std::string::npos);
  expect_daemon_serves(d, "after-malformed");
}

mode_t mode_of(const std::string& path, gid_t* gid) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return 0;
  *gid = st.st_gid;
  return st.st_mode & 07777;
}

// The default: 0660, group gsync where it exists, else the daemon's own
// (whichever this machine has, the test checks that one). A named group
// and mode are applied; a group that does not exist keeps the daemon's and
// says so.
TEST(AdminSocket, ModeAndGroupAsConfigured) {
  {
    DaemonProcess d;
    gid_t gid = 0;
    EXPECT_EQ(mode_of(d.admin_socket(), &gid), 0660u);
    group* g = getgrnam("gsync");
    EXPECT_EQ(gid, g ? g->gr_gid : getegid()) << d.log();
    if (!g) {
      EXPECT_NE(d.log().find("there is no group 'gsync'"), std::string::npos) << d.log();
    }
  }
  {
    group* nogroup = getgrnam("nogroup");
    ASSERT_NE(nogroup, nullptr) << "Debian has a group 'nogroup'";
    gid_t want = nogroup->gr_gid;
    DaemonProcess d({}, "[daemon]\nadmin_socket_mode = 0o640\nadmin_group = \"nogroup\"\n");
    gid_t gid = 0;
    EXPECT_EQ(mode_of(d.admin_socket(), &gid), 0640u);
    EXPECT_EQ(gid, want) << d.log();
    EXPECT_FALSE(json::parse(admin_query(d.admin_socket(), "status"), nullptr, false)
                     .is_discarded());
  }
  {
    DaemonProcess d({}, "[daemon]\nadmin_group = \"gsync-no-such-group\"\n");
    gid_t gid = 0;
    EXPECT_EQ(mode_of(d.admin_socket(), &gid), 0660u);
    EXPECT_EQ(gid, getegid());
    EXPECT_NE(d.log().find("there is no group 'gsync-no-such-group'"), std::string::npos)
        << d.log();
  }
}

// A user outside the admin group cannot connect at all (the kernel checks
// the socket's mode), while the client socket stays open to it.
TEST(AdminSocket, OtherUsersCannotConnect) {
  if (geteuid() != 0) GTEST_SKIP() << "SKIPPED: needs root to run a client as another uid";
  DaemonProcess d;
  auto res = run_ranks(1, [&](int) {
    if (setgid(65534) != 0 || setuid(65534) != 0) return 3;
    int fd = connect_unix(d.admin_socket());
    RANK_CHECK(fd < 0 && errno == EACCES, "connect as uid 65534: fd {} errno {}", fd, errno);
    fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::snprintf(a.sun_path, sizeof a.sun_path, "%s", d.socket().c_str());
    RANK_CHECK(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0,
               "the client socket refused uid 65534: {}", strerror(errno));
    close(fd);
    return 0;
  });
  EXPECT_EQ(res[0].code, 0) << res[0].output;
}

}  // namespace
}  // namespace gsync::test
