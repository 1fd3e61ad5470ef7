// SPDX-License-Identifier: Apache-2.0
//
// Checkpoint files as a restarted daemon reads them (daemon/storage/):
// whatever is on the disk is untrusted (a torn write, a bad sector,
// another program). Input: a shard's size and optimizer, its values, then
// edits (offset, xor byte) applied to the file a writer made of them, and
// a length to cut it to or grow it by. Property: the file loads exactly
// when it is the writer's file unchanged, and then gives back the values
// and the clock it was written with; a changed file is refused with a
// reason naming it, never read past its end, never taken.
#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "daemon/storage/checkpoint_files.h"
#include "daemon/storage/checkpoint_writer.h"
#include "tests/fuzz/fuzz_target.h"

namespace gs = gsync::storage;

namespace {

const std::string& folder() {
  static const std::string f = [] {
    spdlog::set_level(spdlog::level::off);
    char tmpl[] = "/tmp/gsync-fuzz-ckpt-XXXXXX";
    const char* d = mkdtemp(tmpl);
    return std::string(d ? d : "/tmp");
  }();
  return f;
}

std::vector<uint8_t> file_bytes(const std::string& path) {
  std::vector<uint8_t> out;
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return out;
  uint8_t buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0) out.insert(out.end(), buf, buf + n);
  close(fd);
  return out;
}

void put_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  FUZZ_CHECK(fd >= 0);
  FUZZ_CHECK(write(fd, bytes.data(), bytes.size()) == ssize_t(bytes.size()));
  close(fd);
}

}  // namespace

GSYNC_FUZZ_TARGET(checkpoint) {
  gsync::fuzz::Input in(data, size);
  gs::ShardId id;
  id.job = "fuzz/job";
  id.key = 7;
  id.begin = in.byte() % 16;
  id.end = id.begin + 1 + in.byte() % 64;
  id.count = id.end + in.byte() % 8;
  id.hosts = 1 + in.byte() % 4;
  const uint8_t opt = in.byte() % 3;
  id.options.optimizer = static_cast<gsync::proto::Optimizer>(opt);
  id.options.momentum = opt == 0 && (in.byte() & 1) ? 0.5f : 0.0f;
  const uint64_t clock = 1 + in.byte();
  const size_t n = id.elements(), arrays = size_t(gs::arrays_of(id.options));
  std::vector<std::vector<float>> src(arrays, std::vector<float>(n));
  for (auto& a : src)
    for (float& v : a) v = float(in.byte()) - 100.0f;
  std::vector<const float*> ptrs;
  for (auto& a : src) ptrs.push_back(a.data());

  gs::WriteJob job;
  job.folder = folder();
  job.id = id;
  job.clock = clock;
  job.steps = 3;
  job.updates = 5;
  job.keep = 8;
  job.snapshot = std::make_shared<gs::Snapshot>(ptrs, n);
  gs::WriteResult w = gs::CheckpointWriter::write_now(job);
  FUZZ_CHECK(w.ok);
  std::vector<uint8_t> bytes = file_bytes(w.path), original = bytes;
  FUZZ_CHECK(bytes.size() == gs::kPayloadOffset + n * 4 * arrays);

  const int edits = in.byte() % 4;
  for (int e = 0; e < edits; e++) {
    size_t at = in.take<uint16_t>() % bytes.size();
    bytes[at] ^= in.byte();
  }
  const int8_t resize = static_cast<int8_t>(in.byte());
  if (resize < 0 && size_t(-resize) <= bytes.size())
    bytes.resize(bytes.size() - size_t(-resize));
  else if (resize > 0 && resize < 16)
    bytes.resize(bytes.size() + size_t(resize), 0);
  put_bytes(w.path, bytes);

  gs::Loaded l;
  gsync::Status st = gs::load(folder(), id, clock, &l);
  if (bytes == original) {
    FUZZ_CHECK(st.is_ok());
    FUZZ_CHECK(l.header.clock == clock && l.header.steps == 3 && l.header.updates == 5);
    for (size_t a = 0; a < arrays; a++)
      FUZZ_CHECK(std::memcmp(l.payload.data() + a * n, src[a].data(), n * 4) == 0);
  } else {
    FUZZ_CHECK(!st.is_ok());
    FUZZ_CHECK(st.message().find(w.path) == 0);
  }
  unlink(w.path.c_str());
  return 0;
}
