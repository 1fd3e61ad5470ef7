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

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "daemon/ps/checkpoint_sets.h"
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

// Checkpoint sets (issue #38, item 3): a file names its set in its header,
// files_at finds every key's file of a clock, check_file checks another
// key's file without knowing its shape, and prune removes what is older
// than keep_from but never the file just written.
TEST(CheckpointFiles, ASetIsNamedFoundAndChecked) {
  const std::string root = temp_dir(), folder = job_folder(root, "unit job/1");
  std::vector<float> v(500, 2.0f);
  const CheckpointSet set = checkpoint_set({7, 3, 3});
  EXPECT_EQ(set.keys, 2u);
  EXPECT_EQ(set, checkpoint_set({3, 7}));
  EXPECT_NE(set, checkpoint_set({3, 8}));
  EXPECT_EQ(checkpoint_set({}), CheckpointSet{});
  for (uint64_t key : {3, 7}) {
    WriteJob j;
    j.folder = folder;
    j.id = shard();
    j.id.key = key;
    j.clock = 12;
    j.set = set;
    j.snapshot = std::make_shared<Snapshot>(std::vector<const float*>{v.data()}, v.size());
    ASSERT_TRUE(CheckpointWriter::write_now(j).ok);
  }
  Loaded l;
  ASSERT_TRUE(load(folder, shard(), 12, &l));
  EXPECT_EQ(l.header.version, 2u);
  EXPECT_EQ(l.header.set_keys, 2u);
  EXPECT_EQ(l.header.set_hash, set.hash);
  auto files = files_at(folder, 2, 12);
  ASSERT_EQ(files.size(), 2u);
  EXPECT_EQ(files[0].key, 3u);
  EXPECT_EQ(files[1].key, 7u);
  EXPECT_EQ(files[1].begin, 500u);
  EXPECT_EQ(files[1].end, 1000u);
  EXPECT_TRUE(files_at(folder, 3, 12).empty());  // another host count
  EXPECT_TRUE(files_at(folder, 2, 11).empty());
  uint64_t count = 0;
  EXPECT_TRUE(check_file(folder, files[1].name, "unit job/1", 7, 2, 12, &count));
  EXPECT_EQ(count, 1000u);
  Status st = check_file(folder, files[1].name, "unit job/1", 8, 2, 12, &count);
  EXPECT_NE(st.message().find("not job unit job/1 key 8"), std::string::npos) << st.message();
  FILE* f = std::fopen((folder + "/" + files[1].name).c_str(), "r+b");
  ASSERT_TRUE(f);
  std::fseek(f, long(kPayloadOffset) + 8, SEEK_SET);
  std::fputc(0x11, f);
  std::fclose(f);
  st = check_file(folder, files[1].name, "unit job/1", 7, 2, 12, &count);
  EXPECT_NE(st.message().find("checksum does not match"), std::string::npos) << st.message();
  // prune: older than keep_from goes, the newest stays whatever keep_from says.
  for (uint64_t clock : {4, 8, 16}) ASSERT_TRUE(write_clock(folder, clock, v, 10).ok);
  EXPECT_EQ(prune(folder, shard(), 10, 8), 1);  // clock 4
  EXPECT_EQ(listed_clocks(folder, shard()), (std::vector<uint64_t>{16, 12, 8}));
  EXPECT_EQ(prune(folder, shard(), 10, 100), 2);
  EXPECT_EQ(listed_clocks(folder, shard()), (std::vector<uint64_t>{16}));
  std::system(("rm -rf " + root).c_str());
}

// A version 1 file (before sets) still loads, as a set of itself.
TEST(CheckpointFormat, AVersionOneHeaderIsRead) {
  CheckpointHeader h = make_header(shard(), 4, 4, 8, 0);
  EXPECT_EQ(check_header(h, shard()), "");
  h.version = 1;
  h.set_keys = 0;
  h.set_hash = 0;
  CheckpointHeader v1 = h;
  v1.header_hash = hash_bytes(&v1, offsetof(CheckpointHeader, header_hash));
  EXPECT_EQ(check_header(v1, shard()), "");
  v1.set_keys = 2;
  v1.header_hash = hash_bytes(&v1, offsetof(CheckpointHeader, header_hash));
  EXPECT_NE(check_header(v1, shard()), "");
  v1.version = 3;
  v1.set_keys = 0;
  v1.header_hash = hash_bytes(&v1, offsetof(CheckpointHeader, header_hash));
  EXPECT_NE(check_header(v1, shard()).find("reads versions 1 to 2"), std::string::npos);
}

}  // namespace
}  // namespace gsync::storage

namespace gsync::ps {
namespace {

// Which files a job keeps: the oldest of the newest `keep` sets whole on
// every host; a set whole on some hosts only keeps the older ones.
TEST(CheckpointSets, KeepCountsSetsWholeOnEveryHost) {
  using Sets = std::vector<std::set<uint64_t>>;
  EXPECT_EQ(whole_everywhere(Sets{{4, 8, 12}, {4, 8}, {8, 12}}), (std::vector<uint64_t>{8}));
  EXPECT_EQ(keep_from(Sets{{4, 8, 12}, {4, 8, 12}}, 2), 8u);
  EXPECT_EQ(keep_from(Sets{{4, 8, 12}, {4, 8, 12}}, 1), 12u);
  EXPECT_EQ(keep_from(Sets{{4, 8, 12}, {4, 8, 12}}, 8), 4u);  // fewer than keep: the oldest
  // 12 is whole on the first host only: 8 and 4 stay on both.
  EXPECT_EQ(keep_from(Sets{{4, 8, 12}, {4, 8}}, 1), 8u);
  EXPECT_EQ(keep_from(Sets{{12}, {8}}, 3), 0u);  // none whole everywhere: nothing old goes
  EXPECT_EQ(keep_from(Sets{}, 3), 0u);
}

}  // namespace
}  // namespace gsync::ps
