// SPDX-License-Identifier: Apache-2.0
//
// Every failure of the error contract (docs/errors.md), provoked for real:
// killed clients, disagreeing ranks, missing ranks, garbage in the rings,
// other protocol versions, users not allowed, an exhausted arena. After each,
// the daemon must still serve everyone else.
#include <grp.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "tests/integration/client_util.h"
#include "tests/integration/daemon_serves.h"
#include "tests/util/raw_client.h"

namespace gsync::test {
namespace {

using Clock = std::chrono::steady_clock;

// Ranks 0 and 1 wait in an allreduce; rank 2 is SIGKILLed. Both survivors get
// an error naming rank 2 and its pid, long before the op timeout; a job
// running beside it is untouched; a new rank 2 rejoins and the job goes on.
TEST(Failures, KilledRankFailsPendingOpsNamingItThenRejoins) {
  DaemonProcess d({"--op-timeout-ms", "60000"});
  int victim_pipe[2];
  ASSERT_EQ(pipe(victim_pipe), 0);
  pid_t victim = spawn([&] {
    gsync_comm_t* comm;
    if (connect_rank(d.socket(), "kill", 3, 2, &comm) != 0) return 1;
    float* buf;
    gsync_alloc(comm, 4096, reinterpret_cast<void**>(&buf));
    gsync_request_t* req;
    // Rank 2 is mid-operation: it has submitted a different op and waits.
    gsync_allreduce(comm, 99, 0, buf, 1024, GSYNC_FLOAT32, GSYNC_SUM, 0, &req);
    char c = 'x';
    [[maybe_unused]] ssize_t n = write(victim_pipe[1], &c, 1);
    gsync_wait(req, -1);
    return 0;
  });
  close(victim_pipe[1]);  // so a victim that dies before it writes is EOF, not a hang
  ASSERT_TRUE(read_byte(victim_pipe[0])) << "the victim rank did not get its op submitted";
  close(victim_pipe[0]);
  // A bystander job keeps reducing through all of this.
  pid_t bystander = spawn([&] {
    auto res = run_ranks(2, [&](int r) {
      gsync_comm_t* comm;
      RANK_CHECK(connect_rank(d.socket(), "bystander", 2, r, &comm) == 0, "{}", gsync_last_error());
      float* buf;
      RANK_CHECK(gsync_alloc(comm, 1 << 20, reinterpret_cast<void**>(&buf)) == 0, "alloc");
      for (uint64_t step = 0; step < 200; step++) {
        for (int i = 0; i < 1000; i++) buf[i] = 1.0f;
        gsync_request_t* req;
        RANK_CHECK(gsync_allreduce(comm, 1, step, buf, 1000, GSYNC_FLOAT32, GSYNC_SUM, 0, &req) == 0,
                   "submit");
        RANK_CHECK(gsync_wait(req, 10000) == 0, "{}", gsync_request_error(req));
        RANK_CHECK(buf[999] == 2.0f, "bystander got {}", buf[999]);
        gsync_request_free(req);
      }
      return 0;
    });
    for (auto& r : res)
      if (r.code) return 1;
    return 0;
  });
  auto res = run_ranks(2, [&](int r) {
    gsync_comm_t* comm;
    RANK_CHECK(connect_rank(d.socket(), "kill", 3, r, &comm) == 0, "{}", gsync_last_error());
    float* buf;
    RANK_CHECK(gsync_alloc(comm, 4096, reinterpret_cast<void**>(&buf)) == 0, "alloc");
    gsync_request_t* req;
    RANK_CHECK(gsync_allreduce(comm, 7, 0, buf, 1024, GSYNC_FLOAT32, GSYNC_SUM, 0, &req) == 0, "submit");
    if (r == 0) {
      // Both survivors' submissions are in the daemon's hands: the kill
      // catches them pending.
      RANK_CHECK(wait_until([&] {
                   return submitted(d.admin_socket(), "kill", 0) >= 1 &&
                          submitted(d.admin_socket(), "kill", 1) >= 1;
                 }),
                 "the daemon did not take both submissions");
      kill(victim, SIGKILL);
    }
    auto t0 = Clock::now();
    int rc = gsync_wait(req, 20000);
    double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    RANK_CHECK(rc == GSYNC_ERR_RANK_DEAD, "got {} ({})", rc, gsync_request_error(req));
    RANK_CHECK(secs < 5, "took {} s", secs);
    report(gsync_request_error(req));
    gsync_request_free(req);
    gsync_close(comm);
    return 0;
  });
  int status;
  waitpid(victim, &status, 0);
  for (auto& r : res) {
    EXPECT_EQ(r.code, 0) << r.output;
    EXPECT_NE(r.output.find("rank 2"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find(fmt::format("pid {}", victim)), std::string::npos) << r.output;
  }
  waitpid(bystander, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "bystander job was disturbed";

  // Rejoin: a new process takes rank 2 and the job completes a new step.
  auto again = run_ranks(3, [&](int r) {
    gsync_comm_t* comm;
    RANK_CHECK(connect_rank(d.socket(), "kill", 3, r, &comm) == 0, "{}", gsync_last_error());
    float* buf;
    RANK_CHECK(gsync_alloc(comm, 4096, reinterpret_cast<void**>(&buf)) == 0, "alloc");
    for (int i = 0; i < 1024; i++) buf[i] = float(r);
    gsync_request_t* req;
    RANK_CHECK(gsync_allreduce(comm, 7, 1, buf, 1024, GSYNC_FLOAT32, GSYNC_SUM, 0, &req) == 0, "submit");
    RANK_CHECK(gsync_wait(req, 10000) == 0, "{}", gsync_request_error(req));
    RANK_CHECK(buf[5] == 3.0f, "got {}", buf[5]);
    gsync_request_free(req);
    gsync_close(comm);
    return 0;
  });
  for (auto& r : again) EXPECT_EQ(r.code, 0) << r.output;
}

TEST(Failures, DisagreeingRanksBothNamed) {
  DaemonProcess d;
  auto res = run_ranks(3, [&](int r) {
    gsync_comm_t* comm;
    RANK_CHECK(connect_rank(d.socket(), "mismatch", 3, r, &comm) == 0, "{}", gsync_last_error());
    float* buf;
    RANK_CHECK(gsync_alloc(comm, 8192, reinterpret_cast<void**>(&buf)) == 0, "alloc");
    // Rank 1 submits last, with another count: the others fixed the shape.
    if (r == 1)
      RANK_CHECK(wait_until([&] {
                   return submitted(d.admin_socket(), "mismatch", 0) >= 1 &&
                          submitted(d.admin_socket(), "mismatch", 2) >= 1;
                 }),
                 "ranks 0 and 2 did not submit");
    size_t count = r == 1 ? 2000 : 1000;
    gsync_request_t* req;
    RANK_CHECK(gsync_allreduce(comm, 3, 4, buf, count, GSYNC_FLOAT32, GSYNC_SUM, 0, &req) == 0, "submit");
    int rc = gsync_wait(req, 10000);
    RANK_CHECK(rc == GSYNC_ERR_MISMATCH, "got {} ({})", rc, gsync_request_error(req));
    report(gsync_request_error(req));
    gsync_request_free(req);
    gsync_close(comm);
    return 0;
  });
  for (auto& r : res) {
    EXPECT_EQ(r.code, 0) << r.output;
    EXPECT_NE(r.output.find("rank 1"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("2000"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("1000"), std::string::npos) << r.output;
  }
  expect_daemon_serves(d, "after-mismatch");
}

TEST(Failures, TimeoutListsRanksThatDidNotArrive) {
  DaemonProcess d;
  auto res = run_ranks(3, [&](int r) {
    gsync_comm_t* comm;
    RANK_CHECK(connect_rank(d.socket(), "slow", 3, r, &comm, 0, 400) == 0, "{}", gsync_last_error());
    if (r == 2) {  // connected, but never submits: stays until the op has failed
      bool failed = wait_until(
          [&] { return job_count(d.admin_socket(), "slow", "ops_failed") >= 1; });
      gsync_close(comm);
      RANK_CHECK(failed, "the op never failed");
      return 0;
    }
    float* buf;
    RANK_CHECK(gsync_alloc(comm, 4096, reinterpret_cast<void**>(&buf)) == 0, "alloc");
    gsync_request_t* req;
    RANK_CHECK(gsync_allreduce(comm, 1, 0, buf, 1024, GSYNC_FLOAT32, GSYNC_SUM, 0, &req) == 0, "submit");
    auto t0 = Clock::now();
    int rc = gsync_wait(req, 10000);
    double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    RANK_CHECK(rc == GSYNC_ERR_TIMEOUT, "got {} ({})", rc, gsync_request_error(req));
    RANK_CHECK(secs > 0.3 && secs < 3, "timeout after {} s", secs);
    report(gsync_request_error(req));
    gsync_request_free(req);
    gsync_close(comm);
    return 0;
  });
  for (int r = 0; r < 2; r++) {
    EXPECT_EQ(res[r].code, 0) << res[r].output;
    EXPECT_NE(res[r].output.find("not arrived: rank 2"), std::string::npos) << res[r].output;
  }
}

TEST(Failures, GarbageInTheRingGetsErrorCompletionsNotACrash) {
  DaemonProcess d;
  RawClient c;
  proto::HelloReply reply{};
  ASSERT_TRUE(c.connect(d.socket(), "garbage", 1, 0, &reply)) << reply.message;
  auto arena = c.header()->arena_bytes;
  struct Case {
    const char* what;
    proto::SubmitEntry e;
    int code;
    const char* text;
  };
  auto entry = [](uint64_t tag) {
    proto::SubmitEntry e{};
    e.tag = tag;
    e.opcode = proto::wire(proto::Opcode::kAllreduce);
    e.count = 16;
    return e;
  };
  std::vector<Case> cases;
  cases.push_back({"offset past the arena", entry(1), GSYNC_ERR_PROTOCOL, "ends past"});
  cases.back().e.offset = arena - 8;
  cases.push_back({"huge count", entry(2), GSYNC_ERR_PROTOCOL, "count"});
  cases.back().e.count = ~0ull / 2;
  cases.push_back({"bad opcode", entry(3), GSYNC_ERR_PROTOCOL, "unknown opcode 77"});
  cases.back().e.opcode = 77;
  cases.push_back({"bad dtype", entry(4), GSYNC_ERR_PROTOCOL, "unknown dtype 9"});
  cases.back().e.dtype = 9;
  cases.push_back({"bad redop", entry(5), GSYNC_ERR_PROTOCOL, "unknown reduce op 200"});
  cases.back().e.redop = 200;
  cases.push_back({"reserved compression bits", entry(6), GSYNC_ERR_PROTOCOL, "reserved bits"});
  cases.back().e.compress = 0x80;
  cases.push_back({"bad root", entry(7), GSYNC_ERR_INVALID, "root"});
  cases.back().e.opcode = proto::wire(proto::Opcode::kBroadcast);
  cases.back().e.root = 5;
  cases.push_back({"nan weight", entry(8), GSYNC_ERR_INVALID, "weight"});
  cases.back().e.redop = GSYNC_WEIGHTED_AVG;
  cases.back().e.weight = NAN;
  for (auto& k : cases) {
    c.submit(k.e);
    proto::CompleteEntry done{};
    ASSERT_TRUE(c.next_completion(&done, 5000)) << k.what;
    EXPECT_EQ(done.tag, k.e.tag) << k.what;
    EXPECT_EQ(done.status, k.code) << k.what << ": " << done.message;
    EXPECT_NE(std::string(done.message).find(k.text), std::string::npos) << done.message;
    EXPECT_NE(std::string(done.message).find("job garbage rank 0"), std::string::npos)
        << done.message;
  }
  // A valid op on the same session still works after all that.
  auto ok = entry(100);
  auto* data = reinterpret_cast<float*>(c.arena());
  for (int i = 0; i < 16; i++) data[i] = 2.5f;
  c.submit(ok);
  proto::CompleteEntry done{};
  ASSERT_TRUE(c.next_completion(&done, 5000));
  EXPECT_EQ(done.status, 0) << done.message;
  EXPECT_EQ(data[15], 2.5f);

  // Corrupt ring indices: nothing in the ring can be trusted any more, so the
  // daemon says why and closes this session only.
  c.header()->sq_tail.store(c.header()->sq_tail.load() + 5000);
  c.ring_doorbell();
  ASSERT_TRUE(c.next_completion(&done, 5000));
  EXPECT_EQ(done.status, GSYNC_ERR_PROTOCOL);
  EXPECT_NE(std::string(done.message).find("ring is corrupt"), std::string::npos) << done.message;
  EXPECT_TRUE(c.closed_by_daemon(5000));
  expect_daemon_serves(d, "after-garbage");
}

TEST(Failures, ProtocolVersionMismatchNamesBothVersions) {
  DaemonProcess d;
  RawClient c;
  auto h = RawClient::hello("v", 1, 0);
  h.version = 999;
  proto::HelloReply reply{};
  ASSERT_TRUE(c.connect_raw(d.socket(), &h, sizeof h, &reply));
  EXPECT_EQ(reply.status, GSYNC_ERR_VERSION);
  EXPECT_EQ(reply.version, proto::kVersion);
  std::string msg = reply.message;
  EXPECT_NE(msg.find("999"), std::string::npos) << msg;
  EXPECT_NE(msg.find(fmt::format("version {}", proto::kVersion)), std::string::npos) << msg;
  expect_daemon_serves(d, "after-version");
}

TEST(Failures, MalformedHellosAreRefused) {
  DaemonProcess d;
  {
    RawClient c;
    char junk[5] = {1, 2, 3, 4, 5};
    proto::HelloReply reply{};
    ASSERT_TRUE(c.connect_raw(d.socket(), junk, sizeof junk, &reply));
    EXPECT_EQ(reply.status, GSYNC_ERR_PROTOCOL) << reply.message;
  }
  {
    RawClient c;
    auto h = RawClient::hello("shape", 2, 5);  // rank 5 of a 2-rank job
    proto::HelloReply reply{};
    ASSERT_TRUE(c.connect_raw(d.socket(), &h, sizeof h, &reply));
    EXPECT_EQ(reply.status, GSYNC_ERR_INVALID) << reply.message;
    EXPECT_NE(std::string(reply.message).find("rank=5"), std::string::npos) << reply.message;
  }
  {
    RawClient c;
    auto h = RawClient::hello("multi", 8, 0);
    h.local_size = 4;  // spans hosts: needs a cluster this daemon does not have
    proto::HelloReply reply{};
    ASSERT_TRUE(c.connect_raw(d.socket(), &h, sizeof h, &reply));
    EXPECT_EQ(reply.status, GSYNC_ERR_REFUSED) << reply.message;
  }
  expect_daemon_serves(d, "after-hellos");
}

TEST(Failures, UserNotAllowedIsRefusedAndLogged) {
  if (geteuid() != 0) GTEST_SKIP() << "SKIPPED: needs root to run a client as another uid";
  DaemonProcess d({}, "[auth]\nallowed_uids = [4242]\n");
  auto res = run_ranks(2, [&](int r) {
    if (setgid(r == 0 ? 65534 : 4242) != 0 || setuid(r == 0 ? 65534 : 4242) != 0) return 3;
    gsync_comm_t* comm = nullptr;
    int rc = connect_rank(d.socket(), fmt::format("perm{}", r), 1, 0, &comm);
    if (r == 1) {  // uid 4242 is in allowed_uids
      RANK_CHECK(rc == 0, "allowed uid refused: {}", gsync_last_error());
      gsync_close(comm);
      return 0;
    }
    RANK_CHECK(rc == GSYNC_ERR_PERMISSION, "got {} ({})", rc, gsync_last_error());
    report(gsync_last_error());
    return 0;
  });
  for (auto& r : res) EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(res[0].output.find("uid 65534"), std::string::npos) << res[0].output;
  EXPECT_NE(d.log().find("refused client"), std::string::npos);
}

// A client process as another user (uid, gid): returns gsync_connect's code
// (0 after a clean close), and reports the error text. Root only.
int connect_as(const std::string& socket, uid_t uid, gid_t gid, const std::string& job) {
  if (setgroups(0, nullptr) != 0 || setgid(gid) != 0 || setuid(uid) != 0) return 99;
  gsync_comm_t* comm = nullptr;
  int rc = connect_rank(socket, job, 1, 0, &comm);
  report(gsync_last_error());
  if (rc == 0) gsync_close(comm);
  return -rc;  // exit codes are positive
}

TEST(Failures, ClientLimitRefusesTheNextClientNamingTheLimit) {
  DaemonProcess d({}, "[limits]\nmax_clients = 2\n");
  std::vector<gsync_comm_t*> held;
  for (int r = 0; r < 2; r++) {
    gsync_comm_t* comm = nullptr;
    ASSERT_EQ(connect_rank(d.socket(), fmt::format("held{}", r), 1, 0, &comm), 0) << gsync_last_error();
    held.push_back(comm);
  }
  gsync_comm_t* third = nullptr;
  EXPECT_EQ(connect_rank(d.socket(), "third", 1, 0, &third), GSYNC_ERR_REFUSED);
  EXPECT_NE(std::string(gsync_last_error()).find("limit of 2 clients ([limits] max_clients)"),
            std::string::npos)
      << gsync_last_error();
  gsync_close(held[0]);
  // A freed place takes the next client.
  EXPECT_TRUE(wait_until([&] { return connect_rank(d.socket(), "fourth", 1, 0, &third) == 0; }))
      << gsync_last_error();
  gsync_close(third);
  gsync_close(held[1]);
}

TEST(Failures, SocketModeKeepsOtherUsersOut) {
  if (geteuid() != 0) GTEST_SKIP() << "SKIPPED: needs root to run a client as another uid";
  DaemonProcess d({}, "[daemon]\nsocket_mode = 0o600\n[auth]\nallowed_uids = [4242]\n");
  struct stat st{};
  ASSERT_EQ(stat(d.socket().c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  // Allowed by [auth], but the socket's mode does not let it connect: the
  // kernel refuses it (EACCES), which libgsync reports as a permission error.
  auto res = run_ranks(1, [&](int) { return connect_as(d.socket(), 4242, 4242, "mode"); });
  EXPECT_EQ(res[0].code, -GSYNC_ERR_PERMISSION) << res[0].output;
  EXPECT_NE(res[0].output.find("Permission denied"), std::string::npos) << res[0].output;
}

TEST(Failures, AllowedGidsAdmitTheirGroupOnly) {
  if (geteuid() != 0) GTEST_SKIP() << "SKIPPED: needs root to run a client as another uid";
  DaemonProcess d({}, "[auth]\nallowed_gids = [4343]\n");
  auto res = run_ranks(2, [&](int r) {
    return connect_as(d.socket(), 5000 + r, r == 0 ? 4343 : 4344, fmt::format("gid{}", r));
  });
  EXPECT_EQ(res[0].code, 0) << "gid 4343 is allowed: " << res[0].output;
  EXPECT_EQ(res[1].code, -GSYNC_ERR_PERMISSION) << res[1].output;
  EXPECT_NE(res[1].output.find("gid 4344"), std::string::npos) << res[1].output;
}

TEST(Failures, TheDaemonsOwnUidIsAllowedAndOthersAreNot) {
  if (geteuid() != 0) GTEST_SKIP() << "SKIPPED: needs root to run a daemon as another uid";
  DaemonProcess d({}, "", "debug", /*run_as_uid=*/4545, /*run_as_gid=*/4545);
  auto res = run_ranks(3, [&](int r) {
    if (r == 2) return connect_as(d.socket(), 0, 0, "own-root");  // root is always allowed
    return connect_as(d.socket(), r == 0 ? 4545 : 4546, 4545, fmt::format("own{}", r));
  });
  EXPECT_EQ(res[0].code, 0) << "the daemon's own uid: " << res[0].output;
  EXPECT_EQ(res[1].code, -GSYNC_ERR_PERMISSION) << res[1].output;
  EXPECT_NE(res[1].output.find("uid 4546"), std::string::npos) << res[1].output;
  EXPECT_EQ(res[2].code, 0) << "root: " << res[2].output;
}

TEST(Failures, ArenaExhaustionIsAClearError) {
  DaemonProcess d({}, "[limits]\nmax_arena = \"64M\"\ndefault_arena = \"32M\"\n");
  auto res = run_ranks(1, [&](int) {
    gsync_comm_t* comm = nullptr;
    int rc = connect_rank(d.socket(), "big-arena", 1, 0, &comm, 1ull << 30);
    RANK_CHECK(rc == GSYNC_ERR_NOMEM, "oversized arena: got {} ({})", rc, gsync_last_error());
    RANK_CHECK(std::string(gsync_last_error()).find("max_arena") != std::string::npos, "{}",
               gsync_last_error());
    RANK_CHECK(connect_rank(d.socket(), "small-arena", 1, 0, &comm, 4 << 20) == 0, "{}",
               gsync_last_error());
    void* p = nullptr;
    rc = gsync_alloc(comm, 8 << 20, &p);
    RANK_CHECK(rc == GSYNC_ERR_NOMEM, "alloc past arena: got {}", rc);
    report(gsync_last_error());
    // A staged (non-arena) buffer larger than the arena fails the same way.
    std::vector<float> big(4 << 20);
    gsync_request_t* req = nullptr;
    rc = gsync_allreduce(comm, 1, 0, big.data(), big.size(), GSYNC_FLOAT32, GSYNC_SUM, 0, &req);
    RANK_CHECK(rc == GSYNC_ERR_NOMEM, "staged past arena: got {}", rc);
    gsync_close(comm);
    return 0;
  });
  EXPECT_EQ(res[0].code, 0) << res[0].output;
  EXPECT_NE(res[0].output.find("arena"), std::string::npos) << res[0].output;
  expect_daemon_serves(d, "after-arena");
}

}  // namespace
}  // namespace gsync::test
