// SPDX-License-Identifier: Apache-2.0
//
// The bytes of one checkpoint file (docs/fault-tolerance.md, "The
// checkpoint format"): a fixed 512-byte little-endian header, zeros up to
// byte kPayloadOffset, then the shard's fp32 arrays one after the other
// (values, then the optimizer's first and second moments where it keeps
// them). The payload starts 4 KiB in so that the file is written with
// O_DIRECT from one aligned buffer (no page cache between the state and
// the disk). The header names what the
// file is of (job, key, the tensor's shape, the shard, the options), the
// clock it was taken at, and two XXH3-64 hashes: of the payload, and of
// the header itself up to its last field. A file is taken only when both
// match and every field is what the reader expects; anything else is
// named and the file skipped. Pure: the fuzz target fuzz_checkpoint feeds
// it junk.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "protocol/ps.h"

namespace gsync::storage {

constexpr char kCheckpointMagic[8] = {'G', 'S', 'Y', 'N', 'C', 'K', 'P', 'T'};
// 1: the first. 2: the set the file belongs to (set_keys, set_hash: the
// keys of its job this host checkpointed at that clock), read by
// ps/checkpoints.cc to resume every key of a job at one clock. A version 1
// file is a set of itself.
constexpr uint32_t kCheckpointVersion = 2;

struct CheckpointHeader {
  char magic[8];
  uint32_t version;
  uint32_t header_bytes;  // sizeof(CheckpointHeader)
  char job[64];           // NUL-padded
  uint64_t key;
  uint64_t count;         // the whole tensor's elements
  uint64_t shard_begin, shard_end;
  uint32_t hosts;         // the job's hosts: the shards' places depend on it
  uint8_t dtype;          // proto::DType the workers use
  uint8_t arrays;         // fp32 arrays after the header: 1, 2 or 3
  uint8_t pad[2];
  uint32_t sync;          // proto::to_wire(Sync)
  uint32_t pad2;
  proto::PsDeclareHeader options;  // as declared (proto::to_header)
  uint64_t clock;         // every worker pushes this clock next (bsp: clocks applied)
  uint64_t steps;         // optimizer steps taken (Adam's t)
  uint64_t updates;       // pushes applied, all told
  uint64_t created_unix_ns;
  uint64_t payload_bytes;
  uint64_t payload_hash;  // XXH3-64 of the payload
  // The checkpoint set of this clock on this host (version 2; 0 and 0 in
  // version 1): how many keys of the job it holds, and the XXH3-64 of
  // their ids, ascending, as little-endian u64s (checkpoint_set()).
  uint32_t set_keys;
  uint32_t pad3;
  uint64_t set_hash;
  uint8_t reserved[248];  // zero
  uint64_t header_hash;   // XXH3-64 of the bytes before this field
};
static_assert(sizeof(CheckpointHeader) == 512);
constexpr uint64_t kPayloadOffset = 4096;
constexpr uint64_t kFileAlign = 4096;

// What a checkpoint is of: a reader wants a file with exactly these.
struct ShardId {
  std::string job;
  uint64_t key = 0, count = 0, begin = 0, end = 0;
  uint32_t hosts = 0;
  proto::DType dtype = proto::DType::kF32;
  proto::PsOptions options;
  proto::Sync sync;
  uint64_t elements() const { return end - begin; }
};

// The keys of a job whose files of one clock make a whole set on a host.
struct CheckpointSet {
  uint32_t keys = 0;  // 0: no set (a version 1 file)
  uint64_t hash = 0;
  bool operator==(const CheckpointSet&) const = default;
};
CheckpointSet checkpoint_set(std::vector<uint64_t> keys);

// The number of fp32 arrays an optimizer keeps (values included).
int arrays_of(const proto::PsOptions& o);

uint64_t hash_bytes(const void* data, size_t bytes);

// A header for `id` at `clock`, its payload hash given; header_hash set.
CheckpointHeader make_header(const ShardId& id, uint64_t clock, uint64_t steps, uint64_t updates,
                             uint64_t payload_hash, const CheckpointSet& set = {});

// The header's own checks: "" or what is wrong with it (a name for the
// file goes in front). Checks the magic, version, sizes and header hash,
// (check_header_alone), and that it is of `want` (every field of ShardId).
std::string check_header(const CheckpointHeader& h, const ShardId& want);
// The checks that need nothing but the header.
std::string check_header_alone(const CheckpointHeader& h);

}  // namespace gsync::storage
