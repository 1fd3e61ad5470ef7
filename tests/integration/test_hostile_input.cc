// SPDX-License-Identifier: Apache-2.0
//
// Nothing from outside stops the daemon (issue #15; docs/errors.md, "Text
// from outside"). Real daemons, the exact bytes a hostile local process or
// peer sends, and after each the daemon still serves a job:
//   - four bytes of invalid UTF-8 on the admin socket (which used to end
//     gsyncd with nlohmann::json's type_error), and every other malformed
//     admin request: a JSON error each, one log line naming the sender;
//   - the admin socket's mode and group, and that other users cannot use it;
//   - invalid UTF-8 and a forged log line in a peer's OpAbort: the ranks get
//     a printable error, `gsyncctl jobs` stays JSON, the log line stays one;
//   - invalid UTF-8 in a peer's cluster name: `gsyncctl peers` stays JSON.
#include <gtest/gtest.h>
#include <grp.h>
#include <signal.h>
#include <sys/epoll.h>
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

#include "daemon/cluster/cluster_key.h"
#include "daemon/cluster/messages.h"
#include "daemon/collective/messages.h"
#include "daemon/core/text.h"
#include "daemon/transport/transport.h"
#include "gsync_build_config.h"
#include "tests/integration/client_util.h"
#include "tests/integration/daemon_serves.h"
#include "tools/testbed/testbed.h"

namespace gsync::test {
namespace {

using Clock = std::chrono::steady_clock;
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
      {"staus\n", "unknown admin command 'staus'; known: clients, cpu, jobs, ops, peers, status"},
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

std::unique_ptr<testbed::Testbed> two_hosts() {
  testbed::Options o;
  o.rack_sizes = {2};
  o.log_level = "info";
  // tcp links: the fake peers below are the peering context with no fast link
  // (make_context without verbs), whatever devices this machine has.
  o.daemon_args = {"--op-timeout-ms", "20000", "--algo", "direct", "--transport", "tcp"};
  std::unique_ptr<testbed::Testbed> bed;
  Status st = testbed::Testbed::create(o, &bed);
  EXPECT_TRUE(st) << st.message();
  return bed;
}

// Runs a transport context as host `self` of the bed (its daemon killed)
// with identity `cluster_name`, calling on_control for each message, until
// done() or 20 s. 0 when done, 2 on timeout, 3 when it cannot start.
int fake_host(const testbed::Testbed& bed, int self, const std::string& cluster_name,
              std::function<void(transport::Context&, int peer)> on_up,
              std::function<void(transport::Context&, int, std::string_view)> on_control,
              std::function<bool()> done) {
  transport::ContextOptions o;
  o.identity = {cluster_name, cluster::kProtocolVersion, GSYNC_VERSION_STRING};
  for (int h = 0; h < bed.hosts(); h++)
    o.hosts.push_back({bed.host_id(h), bed.address(h), bed.port(h), ""});
  o.self = self;
  // The fake proves the bed's cluster key, as a real daemon of it would:
  // what it sends must get past the handshake to reach the code under test.
  if (!load_cluster_key(bed.key_file(), &o.cluster_key)) return 3;
  Status err;
  auto net = transport::make_context(o, /*prefer_verbs=*/false, &err);
  if (!net) return 3;
  transport::Handlers h;
  h.on_peer_up = [&](int peer) { on_up(*net, peer); };
  h.on_control = [&](int peer, std::string_view msg) { on_control(*net, peer, msg); };
  if (!net->start(std::move(h))) return 3;
  int ep = epoll_create1(EPOLL_CLOEXEC);
  epoll_event ev{};
  ev.events = EPOLLIN;
  epoll_ctl(ep, EPOLL_CTL_ADD, net->event_fd(), &ev);
  auto until = Clock::now() + std::chrono::seconds(20);
  while (Clock::now() < until && !done()) {
    epoll_wait(ep, &ev, 1, 20);
    net->poll();
  }
  // Long enough for what it sent last to leave.
  for (int i = 0; i < 10; i++) {
    epoll_wait(ep, &ev, 1, 20);
    net->poll();
  }
  close(ep);
  return done() ? 0 : 2;
}

// A peer aborts an op with a message of invalid UTF-8 and a forged log
// line. The rank gets the error in printable form; `gsyncctl jobs`, whose
// last_error holds the peer's text, stays JSON (it used to throw in dump());
// the daemon's log line stays one line; the daemon serves on.
TEST(PeerText, AnAbortMessageOfInvalidUtf8StaysOutOfTheJsonAndTheLog) {
  auto bed = two_hosts();
  ASSERT_TRUE(bed);
  bed->kill_daemon(1, SIGKILL);
  const std::string job = "peer-text";
  const std::string text = "bad \xff\xfe bytes\n[info] all is well";
  pid_t fake = bed->spawn_in_host(1, [&] {
    bool aborted = false;
    return fake_host(
        *bed, 1, bed->name(),
        [&](transport::Context& net, int peer) {
          net.send_control(peer, cluster::encode_announce(job, 2, {1}));
        },
        [&](transport::Context& net, int peer, std::string_view msg) {
          collective::OpReady m;
          if (msg.empty() || (msg[0] != collective::kOpData && msg[0] != collective::kOpReady) ||
              !cluster::decode(msg, &m))
            return;
          collective::OpAbort a;
          a.code = GSYNC_ERR_INTERNAL;
          std::memcpy(a.job, m.job, sizeof a.job);
          a.key = m.key;
          a.step = m.step;
          cluster::set_field(a.message, sizeof a.message, text);
          net.send_control(peer, cluster::as_bytes(a));
          aborted = true;
        },
        [&] { return aborted; });
  });
  ASSERT_GT(fake, 0);
  std::string admin = bed->admin_socket(0);
  auto res = run_ranks(1, [&](int) {
    gsync_comm_t* comm;
    gsync_config_t cfg;
    gsync_config_init(&cfg);
    std::string sock = bed->socket(0);
    cfg.socket_path = sock.c_str();
    cfg.job_id = job.c_str();
    cfg.world_size = 2;
    cfg.rank = 0;
    cfg.local_rank = 0;
    cfg.local_size = 1;
    RANK_CHECK(gsync_connect(&cfg, &comm) == 0, "{}", gsync_last_error());
    void* buf;
    RANK_CHECK(gsync_alloc(comm, 4096, &buf) == 0, "alloc");
    gsync_request_t* req;
    RANK_CHECK(gsync_allreduce(comm, 1, 0, buf, 256, GSYNC_FLOAT32, GSYNC_SUM, 0, &req) == 0,
               "submit");
    int rc = gsync_wait(req, 20000);
    std::string error = gsync_request_error(req);
    report(error + "\n");
    RANK_CHECK(rc == GSYNC_ERR_INTERNAL, "got {} ({})", rc, error);
    RANK_CHECK(valid_utf8(error) && error.find("bad \\xff\\xfe bytes\\n[info]") != std::string::npos,
               "the rank's error is not printable: {}", printable(error));
    // While the job is alive: its last error holds the peer's text.
    json jobs = json::parse(admin_query(admin, "jobs"), nullptr, false);
    RANK_CHECK(!jobs.is_discarded(), "gsyncctl jobs is not JSON");
    report(jobs.dump() + "\n");
    gsync_request_free(req);
    gsync_close(comm);
    return 0;
  }, 60);
  EXPECT_EQ(res[0].code, 0) << res[0].output << bed->daemon_log(0);
  // The text reached the report, its bad bytes as U+FFFD.
  EXPECT_NE(res[0].output.find("bad \xef\xbf\xbd\xef\xbf\xbd bytes"), std::string::npos)
      << res[0].output;
  int st = 0;
  waitpid(fake, &st, 0);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "fake peer exit " << st;
  std::string log = bed->daemon_log(0);
  EXPECT_EQ(log.find("\n[info] all is well"), std::string::npos) << "a forged log line:\n" << log;
  EXPECT_NE(log.find("bytes\\n[info] all is well"), std::string::npos) << log;
  EXPECT_TRUE(bed->daemon_alive(0)) << log;
  ASSERT_TRUE(bed->start_daemon(1));
  auto after = run_ranks(2, [&](int r) {
    gsync_comm_t* comm;
    gsync_config_t cfg;
    gsync_config_init(&cfg);
    std::string sock = bed->socket(r);
    cfg.socket_path = sock.c_str();
    cfg.job_id = "after-peer-text";
    cfg.world_size = 2;
    cfg.rank = r;
    cfg.local_rank = 0;
    cfg.local_size = 1;
    RANK_CHECK(gsync_connect(&cfg, &comm) == 0, "{}", gsync_last_error());
    RANK_CHECK(gsync_barrier(comm, 1, 20000) == 0, "barrier: {}", gsync_last_error());
    gsync_close(comm);
    return 0;
  }, 60);
  for (auto& r : after) EXPECT_EQ(r.code, 0) << r.output << bed->daemon_log(0);
}

// A daemon that claims host index 1 with a cluster name of invalid UTF-8
// is refused, and the refusal, which quotes that name, is kept as the
// peer's last error: `gsyncctl peers` must still be JSON.
TEST(PeerText, AClusterNameOfInvalidUtf8StaysOutOfThePeersJson) {
  auto bed = two_hosts();
  ASSERT_TRUE(bed);
  bed->kill_daemon(1, SIGKILL);
  std::string admin = bed->admin_socket(0);
  std::string name = "\xff\xfe" + bed->name();
  // Host 1 is the acceptor (the lower index connects): the fake refuses
  // host 0's link with a REFUSE that quotes its own cluster name.
  pid_t fake = bed->spawn_in_host(1, [&] {
    return fake_host(
        *bed, 1, name, [](transport::Context&, int) {},
        [](transport::Context&, int, std::string_view) {}, [] { return false; });
  });
  ASSERT_GT(fake, 0);
  std::string peers;
  bool seen = wait_until(
      [&] {
        peers = admin_query(admin, "peers");
        return peers.find("cluster name mismatch") != std::string::npos;
      },
      20000, 20);
  kill(fake, SIGKILL);
  waitpid(fake, nullptr, 0);
  ASSERT_TRUE(seen) << peers << "\n" << bed->daemon_log(0);
  json doc = json::parse(peers, nullptr, false);
  ASSERT_FALSE(doc.is_discarded()) << peers;
  EXPECT_NE(peers.find("'\xef\xbf\xbd\xef\xbf\xbd" + bed->name() + "'"), std::string::npos)
      << peers;
  EXPECT_TRUE(bed->daemon_alive(0)) << bed->daemon_log(0);
}

}  // namespace
}  // namespace gsync::test
