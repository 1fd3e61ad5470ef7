// SPDX-License-Identifier: Apache-2.0
#include "daemon/storage/checkpoint_format.h"

#include <xxhash.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include <fmt/format.h>

namespace gsync::storage {

int arrays_of(const proto::PsOptions& o) {
  if (o.optimizer != proto::Optimizer::kSgd) return 3;
  return o.momentum != 0 ? 2 : 1;
}

uint64_t hash_bytes(const void* data, size_t bytes) { return XXH3_64bits(data, bytes); }

namespace {
uint64_t header_hash_of(const CheckpointHeader& h) {
  return hash_bytes(&h, offsetof(CheckpointHeader, header_hash));
}
std::string field(const char* s, size_t n) { return std::string(s, strnlen(s, n)); }
}  // namespace

CheckpointSet checkpoint_set(std::vector<uint64_t> keys) {
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  if (keys.empty()) return {};
  std::vector<uint8_t> bytes(keys.size() * 8);
  for (size_t i = 0; i < keys.size(); i++)
    for (int b = 0; b < 8; b++) bytes[i * 8 + size_t(b)] = static_cast<uint8_t>(keys[i] >> (8 * b));
  return {static_cast<uint32_t>(keys.size()), hash_bytes(bytes.data(), bytes.size())};
}

CheckpointHeader make_header(const ShardId& id, uint64_t clock, uint64_t steps, uint64_t updates,
                             uint64_t payload_hash, const CheckpointSet& set) {
  CheckpointHeader h{};
  std::memcpy(h.magic, kCheckpointMagic, sizeof h.magic);
  h.version = kCheckpointVersion;
  h.header_bytes = sizeof h;
  std::memcpy(h.job, id.job.data(), std::min(id.job.size(), sizeof h.job - 1));
  h.key = id.key;
  h.count = id.count;
  h.shard_begin = id.begin;
  h.shard_end = id.end;
  h.hosts = id.hosts;
  h.dtype = static_cast<uint8_t>(proto::wire(id.dtype));
  h.arrays = static_cast<uint8_t>(arrays_of(id.options));
  h.sync = proto::to_wire(id.sync);
  h.options = proto::to_header(id.options.optimizer_only());
  h.clock = clock;
  h.steps = steps;
  h.updates = updates;
  h.created_unix_ns = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(
          std::chrono::system_clock::now().time_since_epoch())
          .count());
  h.payload_bytes = id.elements() * sizeof(float) * uint64_t(h.arrays);
  h.payload_hash = payload_hash;
  h.set_keys = set.keys;
  h.set_hash = set.hash;
  h.header_hash = header_hash_of(h);
  return h;
}

std::string check_header_alone(const CheckpointHeader& h) {
  if (std::memcmp(h.magic, kCheckpointMagic, sizeof h.magic) != 0)
    return "not a gsync checkpoint (bad magic)";
  if (h.version < 1 || h.version > kCheckpointVersion)
    return fmt::format("checkpoint format version {}; this daemon reads versions 1 to {}",
                       h.version, kCheckpointVersion);
  if (h.header_bytes != sizeof h)
    return fmt::format("header of {} bytes; version {} has {}", h.header_bytes, h.version,
                       sizeof h);
  if (h.header_hash != header_hash_of(h)) return "the header's checksum does not match";
  for (uint8_t b : h.reserved)
    if (b != 0) return "the header's reserved bytes are not zero";
  if (h.pad3 != 0 || (h.version == 1 && (h.set_keys != 0 || h.set_hash != 0)))
    return "the header's reserved bytes are not zero";
  if ((h.set_keys == 0) != (h.set_hash == 0)) return "a checkpoint set without its hash";
  return "";
}

std::string check_header(const CheckpointHeader& h, const ShardId& want) {
  if (std::string why = check_header_alone(h); !why.empty()) return why;
  const std::string job = field(h.job, sizeof h.job);
  proto::PsOptions o;
  std::string opt_err = proto::from_header(h.options, &o);
  proto::Sync sync;
  std::string sync_err = proto::from_wire(h.sync, &sync);
  if (job != want.job || h.key != want.key)
    return fmt::format("of job {} key {}, not job {} key {}", job, h.key, want.job, want.key);
  if (h.count != want.count || h.shard_begin != want.begin || h.shard_end != want.end ||
      h.hosts != want.hosts)
    return fmt::format("of elements [{}, {}) of {} on {} hosts, not [{}, {}) of {} on {} hosts",
                       h.shard_begin, h.shard_end, h.count, h.hosts, want.begin, want.end,
                       want.count, want.hosts);
  if (h.dtype != proto::wire(want.dtype))
    return fmt::format("of dtype {}, not {}", proto::dtype_name(h.dtype), proto::name(want.dtype));
  if (!opt_err.empty()) return "its options: " + opt_err;
  if (!(o.optimizer_only() == want.options.optimizer_only()))
    return fmt::format("with {}, not {}", proto::describe(o),
                       proto::describe(want.options.optimizer_only()));
  if (!sync_err.empty()) return "its sync mode: " + sync_err;
  if (!(sync == want.sync))
    return fmt::format("in sync mode {}, not {}", proto::describe(sync), proto::describe(want.sync));
  const int arrays = arrays_of(o);
  if (h.arrays != arrays) return fmt::format("{} arrays; {} keeps {}", h.arrays, proto::name(o.optimizer), arrays);
  if (h.payload_bytes != want.elements() * sizeof(float) * uint64_t(arrays))
    return fmt::format("a payload of {} bytes; the shard's state is {}", h.payload_bytes,
                       want.elements() * sizeof(float) * uint64_t(arrays));
  return "";
}

}  // namespace gsync::storage
