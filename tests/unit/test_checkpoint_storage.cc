// SPDX-License-Identifier: Apache-2.0
//
// The storage layer's pieces on their own (daemon/storage/): a snapshot
// keeps the values of its moment while the event thread goes on writing
// (copy-before-write), whichever side copies a block; the writer keeps the
// newest files, skips a damaged one for an older one, and says what failed
// and where when a folder cannot be made.
#include <gtest/gtest.h>
#include <poll.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "daemon/storage/checkpoint_files.h"
#include "daemon/storage/checkpoint_writer.h"
#include "daemon/storage/snapshot.h"

namespace gsync::storage {
namespace {

std::string temp_dir() {
  char t[] = "/tmp/gsync-storage-XXXXXX";
  const char* d = mkdtemp(t);
  return d ? std::string(d) : std::string();
}

// The event thread's writes race the copier: every block of the snapshot
// still holds the values it had when the snapshot was made.
TEST(Snapshot, KeepsTheValuesOfItsMomentWhileTheyChange) {
  const size_t n = Snapshot::kBlock * 5 + 123;
  std::vector<float> a(n), b(n);
  for (size_t i = 0; i < n; i++) {
    a[i] = float(i);
    b[i] = -float(i);
  }
  for (int round = 0; round < 20; round++) {
    auto snap = std::make_shared<Snapshot>(std::vector<const float*>{a.data(), b.data()}, n);
    ASSERT_TRUE(snap->ok());
    std::thread copier([snap] { snap->copy_rest(); });
    // The event thread writes block by block from the back, as an update does.
    for (size_t at = n; at > 0;) {
      const size_t begin = at > Snapshot::kBlock ? at - Snapshot::kBlock : 0;
      snap->before_write(begin, at);
      for (size_t i = begin; i < at; i++) {
        a[i] += 1.0f;
        b[i] -= 1.0f;
      }
      at = begin;
    }
    copier.join();
    ASSERT_TRUE(snap->complete());
    const auto* got = reinterpret_cast<const float*>(snap->payload());
    for (size_t i = 0; i < n; i++) {
      ASSERT_EQ(got[i], float(i) + float(round)) << "round " << round << " element " << i;
      ASSERT_EQ(got[n + i], -float(i) - float(round)) << "round " << round << " element " << i;
    }
  }
}

ShardId shard() {
  ShardId id;
  id.job = "unit job/1";
  id.key = 3;
  id.count = 1000;
  id.begin = 500;
  id.end = 1000;
  id.hosts = 2;
  return id;
}

WriteResult write_clock(const std::string& folder, uint64_t clock, std::vector<float>& values,
                        int keep = 3) {
  WriteJob j;
  j.folder = folder;
  j.id = shard();
  j.clock = clock;
  j.keep = keep;
  j.snapshot = std::make_shared<Snapshot>(std::vector<const float*>{values.data()}, values.size());
  return CheckpointWriter::write_now(j);
}

TEST(CheckpointFiles, KeepsTheNewestAndSkipsADamagedOne) {
  const std::string root = temp_dir(), folder = job_folder(root, "unit job/1");
  EXPECT_EQ(folder, root + "/unit%20job%2F1");
  std::vector<float> v(500);
  for (uint64_t clock = 1; clock <= 5; clock++) {
    for (size_t i = 0; i < v.size(); i++) v[i] = float(clock * 1000 + i);
    WriteResult r = write_clock(folder, clock, v);
    ASSERT_TRUE(r.ok) << r.error;
    EXPECT_EQ(r.bytes, kPayloadOffset + 500 * 4);
  }
  EXPECT_EQ(listed_clocks(folder, shard()), (std::vector<uint64_t>{5, 4, 3}));
  // One byte of the newest payload changed: that one is skipped.
  FILE* f = std::fopen((folder + "/" + file_name(shard(), 5)).c_str(), "r+b");
  ASSERT_TRUE(f);
  std::fseek(f, long(kPayloadOffset) + 40, SEEK_SET);
  std::fputc(0x5a, f);
  std::fclose(f);
  Loaded l;
  Status st = load(folder, shard(), 5, &l);
  EXPECT_FALSE(st);
  EXPECT_NE(st.message().find("the payload's checksum does not match"), std::string::npos)
      << st.message();
  EXPECT_EQ(valid_clocks(folder, shard(), 8), (std::vector<uint64_t>{4, 3}));
  ASSERT_TRUE(load(folder, shard(), 4, &l));
  EXPECT_EQ(l.payload[7], 4007.0f);
  // A file of another shard is never taken for this one.
  ShardId other = shard();
  other.begin = 0;
  other.end = 500;
  EXPECT_TRUE(valid_clocks(folder, other, 8).empty());
  std::system(("rm -rf " + root).c_str());
}

TEST(CheckpointWriter, AFolderThatCannotBeMadeIsNamed) {
  std::vector<float> v(500, 1.0f);
  WriteResult r = write_clock("/proc/gsync-no/such", 1, v);
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.error.find("/proc/gsync-no"), std::string::npos) << r.error;
  EXPECT_NE(r.error.find("cannot make the folder"), std::string::npos) << r.error;
}

TEST(CheckpointWriter, ResultsComeBackThroughItsFd) {
  const std::string root = temp_dir();
  std::vector<float> v(500, 2.0f);
  CheckpointWriter w;
  WriteJob j;
  j.tag = 77;
  j.folder = root;
  j.id = shard();
  j.clock = 9;
  j.snapshot = std::make_shared<Snapshot>(std::vector<const float*>{v.data()}, v.size());
  w.submit(j);
  pollfd p{w.done_fd(), POLLIN, 0};
  ASSERT_EQ(poll(&p, 1, 30000), 1) << "no result in 30 s";
  std::vector<WriteResult> got = w.take();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_TRUE(got[0].ok) << got[0].error;
  EXPECT_EQ(got[0].tag, 77u);
  EXPECT_EQ(got[0].clock, 9u);
  std::system(("rm -rf " + root).c_str());
}

// Several checkpoints queued at once are written one at a time, in the
// order given, and come back in that order; one that fails (its folder
// cannot be made) leaves the next written.
TEST(CheckpointWriter, QueuedCheckpointsComeBackInTheirOrder) {
  const std::string root = temp_dir();
  std::vector<float> v(500, 3.0f);
  CheckpointWriter w;
  for (uint64_t c = 1; c <= 6; c++) {
    WriteJob j;
    j.tag = 100 + c;
    j.folder = c == 3 ? "/proc/gsync-no/such" : root;
    j.id = shard();
    j.clock = c;
    j.keep = 10;
    j.snapshot = std::make_shared<Snapshot>(std::vector<const float*>{v.data()}, v.size());
    w.submit(j);
  }
  std::vector<WriteResult> got;
  while (got.size() < 6) {
    pollfd p{w.done_fd(), POLLIN, 0};
    ASSERT_EQ(poll(&p, 1, 30000), 1) << "no result in 30 s";
    for (WriteResult& r : w.take()) got.push_back(std::move(r));
  }
  ASSERT_EQ(got.size(), 6u);
  for (uint64_t c = 1; c <= 6; c++) {
    const WriteResult& r = got[c - 1];
    EXPECT_EQ(r.tag, 100 + c);
    EXPECT_EQ(r.clock, c);
    EXPECT_EQ(r.ok, c != 3) << r.error;
  }
  EXPECT_EQ(valid_clocks(root, shard(), 10), (std::vector<uint64_t>{6, 5, 4, 2, 1}));
  std::system(("rm -rf " + root).c_str());
}

}  // namespace
}  // namespace gsync::storage
