// SPDX-License-Identifier: Apache-2.0
#include "daemon/storage/checkpoint_files.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <functional>
#include <tuple>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace gsync::storage {

namespace {

std::string prefix_of(const ShardId& id) {
  return fmt::format("k{}-s{}-{}-h{}-c", id.key, id.begin, id.end, id.hosts);
}

// Names in folder that start with prefix and end in ".ckpt", with the
// clock between: (clock, name).
std::vector<std::pair<uint64_t, std::string>> names(const std::string& folder,
                                                    const std::string& prefix) {
  std::vector<std::pair<uint64_t, std::string>> out;
  DIR* d = opendir(folder.c_str());
  if (!d) return out;
  while (dirent* e = readdir(d)) {
    std::string n = e->d_name;
    if (n.size() <= prefix.size() + 5 || n.compare(0, prefix.size(), prefix) != 0 ||
        n.compare(n.size() - 5, 5, ".ckpt") != 0)
      continue;
    std::string digits = n.substr(prefix.size(), n.size() - 5 - prefix.size());
    if (digits.empty() || digits.size() > 19 ||
        !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
      continue;
    out.emplace_back(std::stoull(digits), n);
  }
  closedir(d);
  std::sort(out.begin(), out.end(), [](auto& a, auto& b) { return a.first > b.first; });
  return out;
}

Status read_all(int fd, void* dst, size_t bytes, uint64_t at, const std::string& path) {
  auto* p = static_cast<uint8_t*>(dst);
  size_t done = 0;
  while (done < bytes) {
    ssize_t n = pread(fd, p + done, bytes - done, static_cast<off_t>(at + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      return Status(GSYNC_ERR_INTERNAL, fmt::format("{}: read failed: {}", path, strerror(errno)));
    if (n == 0)
      return Status(GSYNC_ERR_INTERNAL,
                    fmt::format("{}: ends after {} bytes; it should have {}", path, at + done,
                                at + bytes));
    done += size_t(n);
  }
  return Status::ok();
}

}  // namespace

std::string job_folder(const std::string& root, const std::string& job) {
  std::string out = root + "/";
  for (unsigned char c : job) {
    if (std::isalnum(c) || c == '_' || c == '-' || (c == '.' && out.back() != '/'))
      out.push_back(static_cast<char>(c));
    else
      out += fmt::format("%{:02X}", c);
  }
  return out;
}

std::string file_name(const ShardId& id, uint64_t clock) {
  return fmt::format("{}{:012}.ckpt", prefix_of(id), clock);
}

std::vector<uint64_t> listed_clocks(const std::string& folder, const ShardId& id) {
  std::vector<uint64_t> out;
  for (auto& [clock, name] : names(folder, prefix_of(id))) out.push_back(clock);
  return out;
}

namespace {
// Reads path whole: the header, which `of` judges ("" when it is the file
// wanted), the zeros after it, the payload and its hash.
Status load_path(const std::string& path, uint64_t clock,
                 const std::function<std::string(const CheckpointHeader&)>& of, Loaded* out) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return Status(GSYNC_ERR_INTERNAL, fmt::format("{}: cannot open: {}", path, strerror(errno)));
  Loaded l;
  Status st = read_all(fd, &l.header, sizeof l.header, 0, path);
  if (st) {
    if (std::string why = of(l.header); !why.empty())
      st = Status(GSYNC_ERR_INTERNAL, fmt::format("{}: {}", path, why));
    else if (l.header.clock != clock)
      st = Status(GSYNC_ERR_INTERNAL, fmt::format("{}: holds clock {}, its name says {}", path,
                                                  l.header.clock, clock));
  }
  if (st) {
    // The zeros between the header and the payload: a byte changed there
    // is damage too.
    uint8_t gap[kPayloadOffset - sizeof(CheckpointHeader)];
    st = read_all(fd, gap, sizeof gap, sizeof l.header, path);
    if (st && std::any_of(gap, gap + sizeof gap, [](uint8_t b) { return b != 0; }))
      st = Status(GSYNC_ERR_INTERNAL,
                  fmt::format("{}: the bytes between the header and the payload are not zero",
                              path));
  }
  if (st) {
    l.payload.resize(l.header.payload_bytes / sizeof(float));
    st = read_all(fd, l.payload.data(), l.header.payload_bytes, kPayloadOffset, path);
  }
  if (st) {
    char extra;
    if (pread(fd, &extra, 1, static_cast<off_t>(kPayloadOffset + l.header.payload_bytes)) != 0)
      st = Status(GSYNC_ERR_INTERNAL, fmt::format("{}: longer than its header says", path));
  }
  close(fd);
  if (st && hash_bytes(l.payload.data(), l.header.payload_bytes) != l.header.payload_hash)
    st = Status(GSYNC_ERR_INTERNAL, fmt::format("{}: the payload's checksum does not match", path));
  if (st && out) *out = std::move(l);
  return st;
}
}  // namespace

Status load(const std::string& folder, const ShardId& id, uint64_t clock, Loaded* out) {
  return load_path(folder + "/" + file_name(id, clock), clock,
                   [&](const CheckpointHeader& h) { return check_header(h, id); }, out);
}

std::vector<ListedFile> files_at(const std::string& folder, uint32_t hosts, uint64_t clock) {
  // k<key>-s<begin>-<end>-h<hosts>-c<clock>.ckpt
  const std::string tail = fmt::format("-h{}-c{:012}.ckpt", hosts, clock);
  std::vector<ListedFile> out;
  DIR* d = opendir(folder.c_str());
  if (!d) return out;
  while (dirent* e = readdir(d)) {
    const std::string n = e->d_name;
    if (n.size() <= tail.size() || n.compare(n.size() - tail.size(), tail.size(), tail) != 0)
      continue;
    unsigned long long key = 0, begin = 0, end = 0;
    int used = 0;
    if (std::sscanf(n.c_str(), "k%llu-s%llu-%llu%n", &key, &begin, &end, &used) != 3 ||
        size_t(used) != n.size() - tail.size() || n[1] < '0' || n[1] > '9')
      continue;
    out.push_back({key, begin, end, n});
  }
  closedir(d);
  std::sort(out.begin(), out.end(), [](const ListedFile& a, const ListedFile& b) {
    return std::tie(a.key, a.begin) < std::tie(b.key, b.begin);
  });
  return out;
}

Status check_file(const std::string& folder, const std::string& name, const std::string& job,
                  uint64_t key, uint32_t hosts, uint64_t clock, uint64_t* count) {
  return load_path(folder + "/" + name, clock, [&](const CheckpointHeader& h) -> std::string {
    if (std::string why = check_header_alone(h); !why.empty()) return why;
    const std::string of(h.job, strnlen(h.job, sizeof h.job));
    if (of != job || h.key != key || h.hosts != hosts)
      return fmt::format("of job {} key {} on {} hosts, not job {} key {} on {} hosts", of, h.key,
                         h.hosts, job, key, hosts);
    *count = h.count;
    return "";
  }, nullptr);
}

std::vector<uint64_t> valid_clocks(const std::string& folder, const ShardId& id, size_t most,
                                   Loaded* newest, std::vector<CheckpointHeader>* headers) {
  std::vector<uint64_t> out;
  for (uint64_t clock : listed_clocks(folder, id)) {
    if (out.size() >= most) break;
    Loaded l;
    if (Status st = load(folder, id, clock, &l); !st) {
      spdlog::warn("checkpoint skipped: {}", st.message());
      continue;
    }
    if (headers) headers->push_back(l.header);
    if (out.empty() && newest) *newest = std::move(l);
    out.push_back(clock);
  }
  return out;
}

int prune(const std::string& folder, const ShardId& id, int keep, uint64_t keep_from) {
  int removed = 0;
  auto all = names(folder, prefix_of(id));  // newest first
  for (size_t i = 0; i < all.size(); i++)
    if (i > 0 && (i >= size_t(std::max(keep, 1)) || all[i].first < keep_from) &&
        unlink((folder + "/" + all[i].second).c_str()) == 0)
      removed++;
  for (auto& [clock, name] : names(folder, kTempPrefix + prefix_of(id)))
    if (unlink((folder + "/" + name).c_str()) == 0) removed++;
  return removed;
}

}  // namespace gsync::storage
