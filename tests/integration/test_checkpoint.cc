// SPDX-License-Identifier: Apache-2.0
//
// Checkpoints of the parameter server (docs/fault-tolerance.md) on real
// daemons and real disks: a daemon killed in the middle of a bsp run and
// the job resumed ends bit for bit where a run without the crash ends; a
// daemon killed with SIGKILL at 200 random moments, writes in flight
// included, never leaves a file that loads half written; gsyncctl shows
// the checkpoints and forces one; a full disk fails the checkpoint with a
// clear error while training goes on.
#include <gtest/gtest.h>
#include <dirent.h>
#include <poll.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <random>
#include <thread>

#include "daemon/storage/checkpoint_files.h"
#include "tests/integration/bed_util.h"
#include "tests/integration/client_util.h"
#include "tests/integration/ps_util.h"

namespace gsync::test {
namespace {

using tools::run_command;

constexpr uint64_t kKey = 5;

std::string temp_dir(const char* name) {
  std::string t = fmt::format("/tmp/gsync-{}-XXXXXX", name);
  const char* d = mkdtemp(t.data());
  return d ? std::string(d) : std::string();
}

// Whether job has a row in the daemon's jobs report.
bool job_present(const std::string& admin, const std::string& job) {
  nlohmann::json j = admin_json(admin, "jobs");
  if (!j.is_object() || !j["jobs"].is_array()) return true;  // cannot tell: not gone
  for (const auto& row : j["jobs"])
    if (row.value("job", "") == job) return true;
  return false;
}

// The checkpoint block of job's key in the daemon's jobs report (null when none).
nlohmann::json checkpoint_of(const std::string& admin, const std::string& job) {
  nlohmann::json row = job_row(admin, job);
  if (row.is_object() && row["parameters"].is_array())
    for (const auto& k : row["parameters"])
      if (k.value("key", 0ull) == kKey) return k["checkpoint"];
  return nullptr;
}

// One byte to a pipe / one byte from it within timeout_ms (false: none came).
void signal_pipe(int fd) {
  char c = 'x';
  [[maybe_unused]] ssize_t n = write(fd, &c, 1);
}
bool await_pipe(int fd, int timeout_ms) {
  pollfd p{fd, POLLIN, 0};
  if (poll(&p, 1, timeout_ms) != 1) return false;
  char c;
  return read(fd, &c, 1) == 1;
}

PsRun checkpointed(uint32_t every_clocks, uint32_t every_ms = 0) {
  PsRun s;
  gsync_ps_opts_init(&s.opts);
  s.opts.lr = 0.05f;
  s.opts.momentum = 0.9f;
  s.opts.weight_decay = 0.01f;
  s.opts.checkpoint_clocks = every_clocks;
  s.opts.checkpoint_ms = every_ms;
  return s;
}

// Declares the key (rank 0's buffer holds the initial values); returns the
// clock it resumed from through *resumed, or a negative code.
int declare(gsync_comm_t* comm, float* buf, size_t n, int rank, const PsRun& s,
            uint64_t* resumed) {
  for (size_t i = 0; i < n; i++) buf[i] = rank == 0 ? init(i) : -1.0f;
  gsync_request_t* req;
  if (int rc = gsync_ps_declare(comm, kKey, buf, n, GSYNC_FLOAT32, &s.opts, &req); rc != 0)
    return rc;
  int rc = gsync_wait(req, 60000);
  if (rc == 0) rc = gsync_ps_resume_clock(req, resumed);
  gsync_request_free(req);
  return rc;
}

int push_pull(gsync_comm_t* comm, float* buf, size_t n, int rank, uint64_t c) {
  gsync_push_opts_t po;
  gsync_push_opts_init(&po);
  po.weight = weight_of(rank);
  for (size_t i = 0; i < n; i++) buf[i] = grad(rank, c, i);
  gsync_request_t* req;
  if (int rc = gsync_ps_push_pull(comm, kKey, c, buf, n, GSYNC_FLOAT32, &po, &req); rc != 0)
    return rc;
  int rc = gsync_wait(req, 60000);
  gsync_request_free(req);
  return rc;
}

// A bsp job on three hosts checkpoints every 4 clocks; host 3's daemon is
// killed with SIGKILL while the job trains. The job is run again: every
// host agrees on the newest clock all three hold, the workers get its
// parameters and go on, and the end is bit for bit the parameters of a run
// that never crashed (the reference, which the uncrashed run matches:
// ParameterServer.BspSgdOnFourHostsIsBitExact).
TEST(Checkpoint, BspRunWithADaemonKilledEndsBitIdentical) {
  const std::string dir = temp_dir("ckpt-crash");
  auto bed = make_bed({3}, "ring", 20000, {"--checkpoint-dir", dir});
  ASSERT_TRUE(bed);
  const std::vector<int> per_host{1, 1, 1};
  auto p = places(per_host);
  const size_t n = 100000;
  const PsRun s = checkpointed(4);
  const std::string job = "ckpt-crash";
  // Run 1: until the daemon dies under it.
  int progress[2];
  ASSERT_EQ(pipe(progress), 0);
  std::vector<ChildResult> first;
  std::thread ranks([&] {
    first = run_ranks(3, [&](int r) {
      gsync_comm_t* comm;
      RANK_CHECK(connect_ps(*bed, job, p, r, s, &comm) == 0, "{}", gsync_last_error());
      void* mem;
      RANK_CHECK(gsync_alloc(comm, n * 4, &mem) == 0, "{}", gsync_last_error());
      auto* buf = static_cast<float*>(mem);
      uint64_t resumed = 99;
      RANK_CHECK(declare(comm, buf, n, r, s, &resumed) == 0, "{}", gsync_last_error());
      RANK_CHECK(resumed == 0, "a fresh job resumed from clock {}", resumed);
      for (uint64_t c = 0; c < 100000; c++) {
        if (push_pull(comm, buf, n, r, c) != 0) {
          report(fmt::format("stopped at clock {}\n", c));
          break;
        }
        if (r == 0 && c == 13) signal_pipe(progress[1]);
      }
      gsync_close(comm);
      return 0;
    }, 300);
  });
  // Killed while it trains: past clock 13, with checkpoints of 4, 8 and 12
  // (and maybe later ones) on disk, and one being written or due.
  EXPECT_TRUE(await_pipe(progress[0], 120000)) << "the job never reached clock 13";
  bed->kill_daemon(2, SIGKILL);
  ranks.join();
  for (size_t r = 0; r < first.size(); r++) {
    EXPECT_EQ(first[r].code, 0) << "rank " << r << ": " << first[r].output;
    EXPECT_NE(first[r].output.find("stopped at clock"), std::string::npos) << first[r].output;
  }
  ASSERT_TRUE(bed->start_daemon(2));
  for (int h = 0; h < 3; h++)
    ASSERT_TRUE(wait_until([&] { return !job_present(bed->admin_socket(h), job); }))
        << "the job's ranks left, but host " << h << " still has it";
  // Run 2: resumed.
  auto second = run_ranks(3, [&](int r) {
    gsync_comm_t* comm;
    RANK_CHECK(connect_ps(*bed, job, p, r, s, &comm) == 0, "{}", gsync_last_error());
    void* mem;
    RANK_CHECK(gsync_alloc(comm, n * 4, &mem) == 0, "{}", gsync_last_error());
    auto* buf = static_cast<float*>(mem);
    uint64_t from = 0;
    RANK_CHECK(declare(comm, buf, n, r, s, &from) == 0, "{}", gsync_last_error());
    RANK_CHECK(from >= 12 && from % 4 == 0, "resumed from clock {}", from);
    std::vector<float> want = reference(s, per_host, n, from);
    RANK_CHECK(std::memcmp(buf, want.data(), n * 4) == 0, "the parameters of clock {} differ",
               from);
    for (uint64_t c = from; c < from + 10; c++)
      RANK_CHECK(push_pull(comm, buf, n, r, c) == 0, "clock {}: {}", c, gsync_last_error());
    want = reference(s, per_host, n, from + 10);
    for (size_t i = 0; i < n; i++)
      RANK_CHECK(std::memcmp(&buf[i], &want[i], 4) == 0, "element {}: got {:.9g}, want {:.9g}",
                 i, buf[i], want[i]);
    report(fmt::format("resumed {}\n", from));
    RANK_CHECK(gsync_barrier(comm, 1, 60000) == 0, "barrier: {}", gsync_last_error());
    gsync_close(comm);
    return 0;
  }, 300);
  for (size_t r = 0; r < second.size(); r++)
    EXPECT_EQ(second[r].code, 0) << "rank " << r << ": " << second[r].output;
  EXPECT_EQ(second[0].output, second[1].output);
  EXPECT_EQ(second[0].output, second[2].output);
  run_command("rm -rf " + dir);
}

// A single rank's job on its own daemon, held between steps by pipes so
// the test can look and ask in between.
struct HeldRank {
  int to_rank[2], from_rank[2];
  pid_t pid = -1;
};

// gsyncctl jobs shows a key's checkpoints; gsyncctl checkpoint JOB asks
// for one, taken at the next clock; a job without checkpoints is told so.
TEST(Checkpoint, GsyncctlShowsAndForcesCheckpoints) {
  const char* ctl = std::getenv("GSYNCCTL");
  if (!ctl) GTEST_SKIP() << "SKIPPED: GSYNCCTL not set (run through meson test)";
  const std::string dir = temp_dir("ckpt-ctl");
  DaemonProcess d({"--checkpoint-dir", dir});
  const size_t n = 65536;
  const PsRun s = checkpointed(0, 3600 * 1000);  // by time, hourly: only forced ones here
  HeldRank h;
  ASSERT_EQ(pipe(h.to_rank), 0);
  ASSERT_EQ(pipe(h.from_rank), 0);
  h.pid = spawn([&] {
    gsync_comm_t* comm;
    if (connect_rank(d.socket(), "ctl-ckpt", 1, 0, &comm) != 0) return 1;
    void* mem;
    if (gsync_alloc(comm, n * 4, &mem) != 0) return 2;
    auto* buf = static_cast<float*>(mem);
    uint64_t from;
    if (declare(comm, buf, n, 0, s, &from) != 0) return 3;
    for (uint64_t c = 0; c < 6; c++) {
      if (push_pull(comm, buf, n, 0, c) != 0) return 4;
      if (c == 2) {  // after clock 3 is reached: the parent asks for one
        signal_pipe(h.from_rank[1]);
        if (!await_pipe(h.to_rank[0], 60000)) return 5;
      }
    }
    signal_pipe(h.from_rank[1]);
    await_pipe(h.to_rank[0], 60000);
    gsync_close(comm);
    return 0;
  });
  ASSERT_TRUE(await_pipe(h.from_rank[0], 60000)) << d.log();
  std::string out = run_command(fmt::format("{} -s {} checkpoint ctl-ckpt 2>&1", ctl,
                                            d.admin_socket()));
  EXPECT_NE(out.find("job ctl-ckpt: every key"), std::string::npos) << out;
  out = run_command(fmt::format("{} -s {} checkpoint no-such-job 2>&1; echo rc=$?", ctl,
                                d.admin_socket()));
  EXPECT_NE(out.find("job no-such-job has no parameter-server key"), std::string::npos) << out;
  EXPECT_EQ(out.find("rc=0"), std::string::npos) << out;
  signal_pipe(h.to_rank[1]);
  ASSERT_TRUE(await_pipe(h.from_rank[0], 60000)) << d.log();
  // Asked at clock 3 (between clocks): taken at clock 4, the next one reached.
  ASSERT_TRUE(wait_until([&] {
    nlohmann::json c = checkpoint_of(d.admin_socket(), "ctl-ckpt");
    return c.is_object() && c["last"].is_object() && !c.value("writing", true);
  })) << admin_query(d.admin_socket(), "jobs");
  nlohmann::json c = checkpoint_of(d.admin_socket(), "ctl-ckpt");
  EXPECT_EQ(c["last"]["clock"], 4) << c.dump();
  EXPECT_EQ(c["taken"], 1) << c.dump();
  EXPECT_EQ(c["last"]["bytes"], storage::kPayloadOffset + 2 * n * 4) << c.dump();  // values, momentum
  out = run_command(fmt::format("{} -s {} jobs 2>&1", ctl, d.admin_socket()));
  EXPECT_NE(out.find("checkpoints: last clock 4"), std::string::npos) << out;
  storage::ShardId id;
  id.job = "ctl-ckpt";
  id.key = kKey;
  id.count = n;
  id.end = n;
  id.hosts = 1;
  id.options.lr = s.opts.lr;
  id.options.momentum = s.opts.momentum;
  id.options.weight_decay = s.opts.weight_decay;
  storage::Loaded l;
  Status st = storage::load(storage::job_folder(dir, "ctl-ckpt"), id, 4, &l);
  ASSERT_TRUE(st) << st.message();
  std::vector<float> want = reference(s, {1}, n, 4);
  EXPECT_EQ(std::memcmp(l.payload.data(), want.data(), n * 4), 0);
  signal_pipe(h.to_rank[1]);
  int status;
  waitpid(h.pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  run_command("rm -rf " + dir);
}

// The checkpoint directory on a 1 MiB tmpfs and a shard of 2 MiB: every
// checkpoint fails with an error that names the file and the disk's
// complaint, nothing half written is left, and every step of training
// completes.
TEST(Checkpoint, FullDiskFailsTheCheckpointAndTrainingGoesOn) {
  const std::string dir = temp_dir("ckpt-full");
  if (mount("tmpfs", dir.c_str(), "tmpfs", 0, "size=1m") != 0)
    GTEST_SKIP() << "SKIPPED: cannot mount a 1 MiB tmpfs (" << strerror(errno)
                 << "); needs root";
  {
    DaemonProcess d({"--checkpoint-dir", dir});
    const size_t n = 512 * 1024;
    PsRun s = checkpointed(2);
    s.opts.momentum = 0;  // one array: 2 MiB
    auto res = run_ranks(1, [&](int) {
      gsync_comm_t* comm;
      RANK_CHECK(connect_rank(d.socket(), "full-disk", 1, 0, &comm) == 0, "{}", gsync_last_error());
      void* mem;
      RANK_CHECK(gsync_alloc(comm, n * 4, &mem) == 0, "{}", gsync_last_error());
      auto* buf = static_cast<float*>(mem);
      uint64_t from;
      RANK_CHECK(declare(comm, buf, n, 0, s, &from) == 0, "{}", gsync_last_error());
      for (uint64_t c = 0; c < 8; c++)
        RANK_CHECK(push_pull(comm, buf, n, 0, c) == 0, "clock {}: {}", c, gsync_last_error());
      std::vector<float> want = reference(s, {1}, n, 8);
      RANK_CHECK(std::memcmp(buf, want.data(), n * 4) == 0, "the parameters differ");
      RANK_CHECK(wait_until([&] {
                   nlohmann::json c = checkpoint_of(d.admin_socket(), "full-disk");
                   return c.is_object() && c.value("failed", 0) >= 1 && !c.value("writing", true);
                 }),
                 "no failed checkpoint: {}", admin_query(d.admin_socket(), "jobs"));
      nlohmann::json c = checkpoint_of(d.admin_socket(), "full-disk");
      report(c["last_error"].is_string() ? c["last_error"].get<std::string>() : c.dump());
      RANK_CHECK(c["taken"] == 0, "{}", c.dump());
      gsync_close(comm);
      return 0;
    });
    ASSERT_EQ(res[0].code, 0) << res[0].output;
    EXPECT_NE(res[0].output.find("No space left on device"), std::string::npos) << res[0].output;
    EXPECT_NE(res[0].output.find(dir), std::string::npos) << res[0].output;
    EXPECT_NE(d.log().find("training goes on, the last good checkpoint is kept"),
              std::string::npos);
    // Nothing half written stays behind.
    std::string left = run_command("find " + dir + " -type f");
    EXPECT_EQ(left, "") << left;
  }
  umount2(dir.c_str(), MNT_DETACH);
  rmdir(dir.c_str());
}

// The newest checkpoint file in folder that loads, and its clock (0: none).
uint64_t newest_loadable(const std::string& folder, const storage::ShardId& id,
                         storage::Loaded* out) {
  for (uint64_t clock : storage::listed_clocks(folder, id))
    if (storage::load(folder, id, clock, out)) return clock;
  return 0;
}

// A daemon killed with SIGKILL 200 times at random moments while a job
// trains with a checkpoint at every clock (so that writes, renames and
// removals are in flight at many of the kills). After every kill, every
// checkpoint file there is whole (a ".tmp-" file is not one); the job
// resumes each time from a clock no older than the time before; and the
// newest file holds, bit for bit, the state the reference reaches at its
// clock.
TEST(Checkpoint, SigkillAtRandomMomentsNeverLeavesAHalfWrittenCheckpoint) {
  const std::string dir = temp_dir("ckpt-kill");
  const size_t n = 65536;
  const PsRun s = checkpointed(1);
  const std::string job = "kill-torture";
  storage::ShardId id;
  id.job = job;
  id.key = kKey;
  id.count = n;
  id.end = n;
  id.hosts = 1;
  id.options.lr = s.opts.lr;
  id.options.momentum = s.opts.momentum;
  id.options.weight_decay = s.opts.weight_decay;
  const std::string folder = storage::job_folder(dir, job);
  std::mt19937 rng(20261202);
  uint64_t last_resumed = 0, resumed_at_all = 0, mid_write = 0;
  Reference ref(s, {1}, n);
  for (int kill = 0; kill < 200; kill++) {
    DaemonProcess d({"--checkpoint-dir", dir}, "", "warn");
    int ready[2];
    ASSERT_EQ(pipe(ready), 0);
    pid_t rank = spawn([&] {
      gsync_comm_t* comm;
      if (connect_rank(d.socket(), job, 1, 0, &comm) != 0) return 1;
      void* mem;
      if (gsync_alloc(comm, n * 4, &mem) != 0) return 2;
      auto* buf = static_cast<float*>(mem);
      uint64_t from = 0;
      if (declare(comm, buf, n, 0, s, &from) != 0) return 3;
      [[maybe_unused]] ssize_t w = write(ready[1], &from, sizeof from);
      for (uint64_t c = from;; c++)
        if (push_pull(comm, buf, n, 0, c) != 0) break;
      return 0;
    });
    close(ready[1]);
    uint64_t from = ~0ull;
    pollfd pf{ready[0], POLLIN, 0};
    ASSERT_EQ(poll(&pf, 1, 60000), 1) << "kill " << kill << ": the rank never declared\n"
                                      << d.log();
    ASSERT_EQ(read(ready[0], &from, sizeof from), ssize_t(sizeof from))
        << "kill " << kill << ": the declaration failed\n" << d.log();
    close(ready[0]);
    EXPECT_GE(from, last_resumed) << "kill " << kill;
    last_resumed = from;
    resumed_at_all += from > 0;
    // The fault: at a random moment of the training.
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 30000));
    ::kill(d.pid(), SIGKILL);
    int status;
    waitpid(rank, &status, 0);
    DIR* dp = opendir(folder.c_str());
    ASSERT_TRUE(dp || kill == 0) << folder;
    if (dp) {
      while (dirent* e = readdir(dp)) {
        std::string name = e->d_name;
        mid_write += name.rfind(storage::kTempPrefix, 0) == 0;
        if (name.size() < 5 || name.compare(name.size() - 5, 5, ".ckpt") != 0 ||
            name.rfind(storage::kTempPrefix, 0) == 0)
          continue;
        uint64_t clock = std::stoull(name.substr(name.rfind("-c") + 2));
        storage::Loaded l;
        Status st = storage::load(folder, id, clock, &l);
        EXPECT_TRUE(st) << "kill " << kill << ": " << st.message();
      }
      closedir(dp);
    }
    storage::Loaded l;
    uint64_t newest = newest_loadable(folder, id, &l);
    ASSERT_GE(newest, ref.clock()) << "kill " << kill;
    if (newest > 0 && (kill % 10 == 9 || kill == 199)) {
      ref.run_to(newest);
      EXPECT_EQ(std::memcmp(l.payload.data(), ref.values().data(), n * 4), 0)
          << "kill " << kill << ": the values of clock " << newest;
      EXPECT_EQ(std::memcmp(l.payload.data() + n, ref.momentum().data(), n * 4), 0)
          << "kill " << kill << ": the momentum of clock " << newest;
    }
  }
  // Kills that left a ".tmp-" file behind came in the middle of a write.
  std::printf("%llu of 200 kills came in the middle of a checkpoint's write; the newest clock "
              "was %llu\n",
              static_cast<unsigned long long>(mid_write),
              static_cast<unsigned long long>(last_resumed));
  EXPECT_GT(mid_write, 0u) << "no kill came in the middle of a write: the test tests less";
  EXPECT_GT(resumed_at_all, 150u) << "most restarts should resume from a checkpoint";
  EXPECT_GT(last_resumed, 200u);
  run_command("rm -rf " + dir);
}

}  // namespace
}  // namespace gsync::test
