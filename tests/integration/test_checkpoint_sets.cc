// SPDX-License-Identifier: Apache-2.0
//
// Checkpoint sets (issue #38, item 3; docs/fault-tolerance.md, "Checkpoint
// sets") on real daemons and real files: a job of three keys on two hosts,
// checkpointed every 4 clocks, leaves sets 4, 8 and 12 on disk. Then every
// state a crash around the checkpoint of clock 12 can leave on one host -
// before, during (a ".tmp-" file) and after each key's write, and a
// damaged file - is laid in the folder and the job run again: every key
// resumes at the same clock (12 only when the whole set is there, else 8),
// with that clock's parameters, and ends after clock 16 bit for bit where a
// run without the crash ends. And `keep` counts sets: with keep = 1, a set
// that one host could not write keeps the older set on every host.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdio>
#include <filesystem>
#include <functional>

#include "daemon/ps/shards.h"
#include "daemon/storage/checkpoint_files.h"
#include "tests/integration/bed_util.h"
#include "tests/integration/client_util.h"
#include "tests/integration/ps_util.h"

namespace gsync::test {
namespace {

namespace fs = std::filesystem;
using tools::run_command;

const std::vector<uint64_t> kKeys = {5, 6, 7};
size_t count_of(uint64_t key) { return 4000 + 1000 * key; }  // 9000, 10000, 11000
const std::vector<int> kPerHost = {1, 1};
constexpr const char* kJob = "ckpt-sets";

PsRun every4() {
  PsRun s;
  gsync_ps_opts_init(&s.opts);
  s.opts.lr = 0.05f;
  s.opts.momentum = 0.9f;
  s.opts.checkpoint_clocks = 4;
  return s;
}

// Host h's file of key at clock (hosts share the bed's folder).
std::string file_of(const std::string& folder, int h, uint64_t key, uint64_t clock) {
  storage::ShardId id;
  id.key = key;
  id.hosts = 2;
  const ps::Shard sh = ps::place(count_of(key), 2)[size_t(h)];
  id.begin = sh.begin;
  id.end = sh.end;
  return folder + "/" + storage::file_name(id, clock);
}

// Whether every host's report says every key's last checkpoint is of
// `clock` and none is being written.
bool written_up_to(const testbed::Testbed& bed, uint64_t clock) {
  for (int h = 0; h < 2; h++) {
    nlohmann::json row = job_row(bed.admin_socket(h), kJob);
    if (!row.is_object() || !row["parameters"].is_array() || row["parameters"].size() != 3)
      return false;
    for (const auto& k : row["parameters"]) {
      const auto& c = k["checkpoint"];
      if (!c.is_object() || c.value("writing", true) || !c["last"].is_object() ||
          c["last"].value("clock", 0ull) != clock)
        return false;
    }
  }
  return true;
}

// The job run once on both hosts: declares the keys, checks every key
// resumed at `want_from` with that clock's parameters, trains to `to`,
// checks the bits, and waits until its last checkpoints are written.
// Returns the ranks' results.
std::vector<ChildResult> run_job(const testbed::Testbed& bed, uint64_t want_from, uint64_t to) {
  const PsRun s = every4();
  auto p = places(kPerHost);
  auto res = run_ranks(2, [&](int r) {
    gsync_comm_t* comm;
    RANK_CHECK(connect_ps(bed, kJob, p, r, s, &comm) == 0, "{}", gsync_last_error());
    std::vector<float*> bufs;
    for (uint64_t key : kKeys) {
      void* mem;
      RANK_CHECK(gsync_alloc(comm, count_of(key) * 4, &mem) == 0, "{}", gsync_last_error());
      bufs.push_back(static_cast<float*>(mem));
    }
    std::vector<gsync_request_t*> reqs(kKeys.size());
    for (size_t k = 0; k < kKeys.size(); k++) {
      for (size_t i = 0; i < count_of(kKeys[k]); i++) bufs[k][i] = r == 0 ? init(i) : -1.0f;
      RANK_CHECK(gsync_ps_declare(comm, kKeys[k], bufs[k], count_of(kKeys[k]), GSYNC_FLOAT32,
                                  &s.opts, &reqs[k]) == 0,
                 "{}", gsync_last_error());
    }
    for (size_t k = 0; k < kKeys.size(); k++) {
      uint64_t from = 99;
      RANK_CHECK(gsync_wait(reqs[k], 60000) == 0, "declare: {}", gsync_request_error(reqs[k]));
      RANK_CHECK(gsync_ps_resume_clock(reqs[k], &from) == 0, "{}", gsync_last_error());
      gsync_request_free(reqs[k]);
      RANK_CHECK(from == want_from, "key {} resumed at clock {}, not {}", kKeys[k], from,
                 want_from);
      std::vector<float> want = reference(s, kPerHost, count_of(kKeys[k]), from);
      RANK_CHECK(std::memcmp(bufs[k], want.data(), want.size() * 4) == 0,
                 "key {}: the parameters of clock {} differ", kKeys[k], from);
    }
    gsync_push_opts_t po;
    gsync_push_opts_init(&po);
    po.weight = weight_of(r);
    for (uint64_t c = want_from; c < to; c++) {
      for (size_t k = 0; k < kKeys.size(); k++) {
        for (size_t i = 0; i < count_of(kKeys[k]); i++) bufs[k][i] = grad(r, c, i);
        RANK_CHECK(gsync_ps_push_pull(comm, kKeys[k], c, bufs[k], count_of(kKeys[k]),
                                      GSYNC_FLOAT32, &po, &reqs[k]) == 0,
                   "{}", gsync_last_error());
      }
      for (size_t k = 0; k < kKeys.size(); k++) {
        RANK_CHECK(gsync_wait(reqs[k], 60000) == 0, "clock {}: {}", c,
                   gsync_request_error(reqs[k]));
        gsync_request_free(reqs[k]);
      }
    }
    for (size_t k = 0; k < kKeys.size(); k++) {
      std::vector<float> want = reference(s, kPerHost, count_of(kKeys[k]), to);
      RANK_CHECK(std::memcmp(bufs[k], want.data(), want.size() * 4) == 0,
                 "key {}: the parameters after clock {} differ", kKeys[k], to);
    }
    // The job's last checkpoints are on disk before it ends.
    RANK_CHECK(r != 0 || wait_until([&] { return written_up_to(bed, to / 4 * 4); }),
               "the checkpoints of clock {} were never all written", to / 4 * 4);
    RANK_CHECK(gsync_barrier(comm, 1, 60000) == 0, "barrier: {}", gsync_last_error());
    gsync_close(comm);
    return 0;
  }, 300);
  for (int h = 0; h < 2; h++)
    EXPECT_TRUE(wait_until([&] { return !job_row(bed.admin_socket(h), kJob).is_object(); }))
        << "host " << h << " still has the job";
  return res;
}

void expect_ok(const std::vector<ChildResult>& res, const std::string& what) {
  for (size_t r = 0; r < res.size(); r++)
    EXPECT_EQ(res[r].code, 0) << what << ": rank " << r << ": " << res[r].output;
}

struct Scenario {
  std::string what;
  std::function<void(const std::string& folder)> crash;  // on the saved sets 4, 8, 12
  uint64_t resumes_at;
};

TEST(CheckpointSets, EveryCrashAroundACheckpointResumesEveryKeyAtOneClock) {
  const std::string dir = fs::temp_directory_path() / ("gsync-ckpt-sets-" + std::to_string(getpid()));
  fs::create_directories(dir);
  auto bed = make_bed({2}, "ring", 30000, {"--checkpoint-dir", dir});
  ASSERT_TRUE(bed);
  const std::string folder = storage::job_folder(dir, kJob), saved = dir + "/saved";
  expect_ok(run_job(*bed, 0, 14), "the first run");  // sets 4, 8, 12
  for (uint64_t key : kKeys)
    for (int h = 0; h < 2; h++) ASSERT_TRUE(fs::exists(file_of(folder, h, key, 12))) << key;
  fs::copy(folder, saved);
  std::vector<Scenario> cases;
  for (size_t i = 0; i < kKeys.size(); i++) {
    // Host 2 crashed before key i's file of clock 12, while it was written
    // (its ".tmp-" file, half there), or after it.
    auto drop_from = [i](size_t first) {
      return [i, first](const std::string& f) {
        for (size_t k = first; k < kKeys.size(); k++) fs::remove(file_of(f, 1, kKeys[k], 12));
        (void)i;
      };
    };
    cases.push_back({fmt::format("before key {}'s write", kKeys[i]), drop_from(i), 8});
    cases.push_back({fmt::format("during key {}'s write", kKeys[i]),
                     [i, drop = drop_from(i)](const std::string& f) {
                       const std::string name = file_of(f, 1, kKeys[i], 12);
                       fs::copy_file(name, fs::path(name).parent_path() /
                                               (storage::kTempPrefix +
                                                fs::path(name).filename().string()));
                       drop(f);
                       fs::resize_file(fs::path(name).parent_path() /
                                           (storage::kTempPrefix + fs::path(name).filename().string()),
                                       storage::kPayloadOffset + 100);
                     },
                     8});
    cases.push_back({fmt::format("after key {}'s write", kKeys[i]), drop_from(i + 1),
                     i + 1 == kKeys.size() ? 12u : 8u});
  }
  cases.push_back({"key 6's file of clock 12 on host 1 damaged", [](const std::string& f) {
                     FILE* fp = std::fopen(file_of(f, 0, 6, 12).c_str(), "r+b");
                     ASSERT_TRUE(fp);
                     std::fseek(fp, long(storage::kPayloadOffset) + 64, SEEK_SET);
                     std::fputc(0x42, fp);
                     std::fclose(fp);
                   }, 8});
  cases.push_back({"key 7's files of 12 and 8 gone on host 2, of 4 on host 1",
                   [](const std::string& f) {
                     fs::remove(file_of(f, 1, 7, 12));
                     fs::remove(file_of(f, 1, 7, 8));
                     fs::remove(file_of(f, 0, 7, 4));
                   }, 0});
  for (const Scenario& c : cases) {
    SCOPED_TRACE(c.what);
    fs::remove_all(folder);
    fs::copy(saved, folder);
    c.crash(folder);
    expect_ok(run_job(*bed, c.resumes_at, 16), c.what);
  }
  run_command("rm -rf " + dir);
}

// keep = 1 counts sets whole on every host: host 2 cannot write key 7's
// file of clock 12 (a folder stands where it would be renamed to), so set
// 12 is whole on host 1 only, and every key keeps its file of 8 on both
// hosts; the job resumes at 8. Per-key counting would have left every key
// with its file of 12 alone, key 7 on host 2 with 8: no set in common.
TEST(CheckpointSets, KeepCountsSetsWholeOnEveryHost) {
  const std::string dir = fs::temp_directory_path() / ("gsync-ckpt-keep-" + std::to_string(getpid()));
  fs::create_directories(dir);
  auto bed = make_bed({2}, "ring", 30000, {"--checkpoint-dir", dir, "--checkpoint-keep", "1"});
  ASSERT_TRUE(bed);
  const std::string folder = storage::job_folder(dir, kJob);
  fs::create_directories(file_of(folder, 1, 7, 12));  // the write of 12 fails on host 2
  const PsRun s = every4();
  auto p = places(kPerHost);
  // The first run cannot use run_job: its last checkpoint of key 7 on
  // host 2 fails; it waits for the others.
  auto res = run_ranks(2, [&](int r) {
    gsync_comm_t* comm;
    RANK_CHECK(connect_ps(*bed, kJob, p, r, s, &comm) == 0, "{}", gsync_last_error());
    std::vector<float*> bufs;
    for (uint64_t key : kKeys) {
      void* mem;
      RANK_CHECK(gsync_alloc(comm, count_of(key) * 4, &mem) == 0, "{}", gsync_last_error());
      bufs.push_back(static_cast<float*>(mem));
      gsync_request_t* req;
      for (size_t i = 0; i < count_of(key); i++) bufs.back()[i] = init(i);
      RANK_CHECK(gsync_ps_declare(comm, key, bufs.back(), count_of(key), GSYNC_FLOAT32, &s.opts,
                                  &req) == 0, "{}", gsync_last_error());
      RANK_CHECK(gsync_wait(req, 60000) == 0, "declare: {}", gsync_request_error(req));
      gsync_request_free(req);
    }
    gsync_push_opts_t po;
    gsync_push_opts_init(&po);
    po.weight = weight_of(r);
    for (uint64_t c = 0; c < 14; c++)
      for (size_t k = 0; k < kKeys.size(); k++) {
        for (size_t i = 0; i < count_of(kKeys[k]); i++) bufs[k][i] = grad(r, c, i);
        gsync_request_t* req;
        RANK_CHECK(gsync_ps_push_pull(comm, kKeys[k], c, bufs[k], count_of(kKeys[k]),
                                      GSYNC_FLOAT32, &po, &req) == 0, "{}", gsync_last_error());
        RANK_CHECK(gsync_wait(req, 60000) == 0, "clock {}: {}", c, gsync_request_error(req));
        gsync_request_free(req);
      }
    RANK_CHECK(r != 0 || wait_until([&] {
                 for (int h = 0; h < 2; h++) {
                   nlohmann::json row = job_row(bed->admin_socket(h), kJob);
                   if (!row.is_object()) return false;
                   uint64_t done = 0;
                   for (const auto& k : row["parameters"]) {
                     const auto& ck = k["checkpoint"];
                     if (ck.value("writing", true)) return false;
                     done += ck.value("taken", 0ull) + ck.value("failed", 0ull);
                   }
                   if (done != 9) return false;  // 3 keys x clocks 4, 8, 12
                 }
                 return true;
               }),
               "the checkpoints of clocks 4, 8 and 12 never all ended");
    RANK_CHECK(gsync_barrier(comm, 1, 60000) == 0, "barrier: {}", gsync_last_error());
    gsync_close(comm);
    return 0;
  }, 300);
  expect_ok(res, "the first run");
  for (int h = 0; h < 2; h++)
    ASSERT_TRUE(wait_until([&] { return !job_row(bed->admin_socket(h), kJob).is_object(); }));
  for (uint64_t key : kKeys)
    for (int h = 0; h < 2; h++)
      EXPECT_TRUE(fs::exists(file_of(folder, h, key, 8))) << "host " << h << " key " << key;
  fs::remove_all(file_of(folder, 1, 7, 12));
  expect_ok(run_job(*bed, 8, 16), "the resumed run");
  // Set 8 was whole everywhere from the start of this run: the writes of
  // 12 and 16 took every older file (a shard's files go at its writes).
  for (uint64_t key : kKeys)
    for (int h = 0; h < 2; h++) {
      EXPECT_TRUE(fs::exists(file_of(folder, h, key, 16))) << "host " << h << " key " << key;
      EXPECT_FALSE(fs::exists(file_of(folder, h, key, 4))) << "host " << h << " key " << key;
    }
  expect_ok(run_job(*bed, 16, 20), "the run after it");
  run_command("rm -rf " + dir);
}

}  // namespace
}  // namespace gsync::test
