// SPDX-License-Identifier: Apache-2.0
//
// The contract between libgsync and gsyncd: the hello exchanged on the unix
// socket and the layout of the shared memory the daemon hands back.
// Header-only and shared by both sides; docs/protocol.md explains it.
// Everything the client writes here is untrusted by the daemon.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "protocol/ops.h"

namespace gsync::proto {

// Bumped on any change of the structs below. The first two fields of
// HelloRequest and HelloReply (magic, version) never move, so peers of any
// version can read each other's version and name both in the refusal.
// 3: SubmitEntry's flags and reserved became compress and compress_arg;
//    HelloRequest's reserved became sync; the parameter-server opcodes.
// 4: CompleteEntry's reserved became value (a declaration's resume clock);
//    the declaration header carries the checkpoint options; HelloRequest
//    grew guard (the anomaly guard) and reserved.
// 5: the lease opcode (protocol/lease.h); a push may weigh 0 (a step
//    without data).
// 6: HelloRequest's reserved became plan (the job's algorithm and chunk
//    size, protocol/plan_choice.h).
// 7: the world opcode; HelloRequest grew min_hosts and max_hosts (an
//    elastic job) and reserved.
// 8: device memory (protocol/device.h): requests on the socket after the
//    hello; SubmitEntry::offset with bit 63 set names an allocation of it.
constexpr uint32_t kVersion = 8;
constexpr uint32_t kHelloMagic = 0x4e595347;  // "GSYN"
constexpr uint32_t kShmMagic = 0x4d485347;    // "GSHM"
constexpr size_t kJobIdMax = 64;              // including the NUL
constexpr size_t kMessageMax = 240;           // error text, including the NUL

// Client -> daemon, one SOCK_SEQPACKET message right after connect.
struct HelloRequest {
  uint32_t magic;
  uint32_t version;
  char job_id[kJobIdMax];
  int32_t world_size;
  int32_t rank;
  int32_t local_rank;
  int32_t local_size;
  uint64_t arena_bytes;  // 0: daemon default
  uint32_t timeout_ms;   // 0: daemon default
  uint32_t sync;         // the job's sync mode (protocol/ps.h to_wire); 0: bsp
  uint32_t guard;        // the job's anomaly guard (protocol/guard.h to_wire); 0: off
  uint32_t plan;         // the job's algorithm and chunk size (protocol/plan_choice.h); 0: auto
  uint16_t min_hosts;    // an elastic job: > 0 (world_size and rank then 0)
  uint16_t max_hosts;    // an elastic job's bound; 0: none
  uint32_t reserved;
};
static_assert(sizeof(HelloRequest) == 120);

// Daemon -> client. On status == 0 the message carries, by SCM_RIGHTS, three
// fds in this order: the sealed memfd, the submission doorbell eventfd
// (client writes), the completion doorbell eventfd (daemon writes).
struct HelloReply {
  uint32_t magic;
  uint32_t version;  // the daemon's kVersion
  int32_t status;    // 0 or a negative GSYNC_ERR_* code
  uint32_t reserved;
  uint64_t session_id;
  uint64_t shm_bytes;
  uint32_t default_timeout_ms;
  uint32_t reserved2;
  char message[256];  // why, when status != 0
};
static_assert(sizeof(HelloReply) == 296);

// Barriers are matched like other ops, by (key, step), under this key; an
// allreduce or broadcast may not use it.
constexpr uint64_t kBarrierKey = ~uint64_t{0};

// One submission: 64 bytes, copied out by the daemon before any use.
struct SubmitEntry {
  uint64_t tag;     // the client's request id, echoed in the completion
  uint64_t key;     // tensor key; (key, step) matches ops across ranks
  uint64_t step;
  uint64_t offset;  // of the tensor, from the start of the arena
  uint64_t count;   // elements
  double weight;    // GSYNC_WEIGHTED_AVG
  uint32_t timeout_ms;  // 0: session default
  uint8_t opcode;  // proto::Opcode (protocol/ops.h)
  uint8_t dtype;   // proto::DType = enum gsync_dtype
  uint8_t redop;   // proto::RedOp = enum gsync_redop
  // Compression (protocol/compression.h, to_entry): codec, hops, error
  // feedback; all zero for none.
  uint8_t compress;
  int32_t root;           // broadcast: the root's rank
  uint32_t compress_arg;  // the codec's parameter: int8 block, topk fraction
};
static_assert(sizeof(SubmitEntry) == 64);

struct CompleteEntry {
  uint64_t tag;
  int32_t status;  // 0 or a negative GSYNC_ERR_* code
  uint32_t value;  // a result beside the data: a declaration's resume clock, a lease's batch
  char message[kMessageMax];
};
static_assert(sizeof(CompleteEntry) == 256);

// Offset 0 of the memfd. The static part is written by the daemon before the
// fd is sealed and sent; the daemon keeps its own copy and never reads it
// back. Ring indices are free-running uint32 counters; slot = index & (n-1).
struct ShmHeader {
  uint32_t magic;
  uint32_t version;
  uint64_t total_bytes;
  uint64_t session_id;
  uint32_t sq_entries;  // power of two
  uint32_t cq_entries;  // power of two
  uint64_t sq_offset;
  uint64_t cq_offset;
  uint64_t arena_offset;
  uint64_t arena_bytes;

  alignas(64) std::atomic<uint32_t> sq_tail;  // written by the client
  alignas(64) std::atomic<uint32_t> sq_head;  // written by the daemon
  alignas(64) std::atomic<uint32_t> cq_tail;  // written by the daemon
  alignas(64) std::atomic<uint32_t> cq_head;  // written by the client
  // Client threads blocked on the completion eventfd. The daemon signals the
  // eventfd only when this is non-zero; both sides order the check against
  // their ring update with a seq_cst fence (Dekker), so no wakeup is lost.
  alignas(64) std::atomic<uint32_t> cq_waiters;
  // Non-zero while the daemon looks at sq_tail by itself (its polling
  // window): a submission then rings no doorbell. The same Dekker pairing
  // as cq_waiters: the client publishes sq_tail, fences, reads this; the
  // daemon clears this, fences, reads sq_tail once more before it sleeps.
  alignas(64) std::atomic<uint32_t> sq_polled;
};
static_assert(std::atomic<uint32_t>::is_always_lock_free);
// The offsets docs/protocol.md section 4 gives.
static_assert(offsetof(ShmHeader, sq_tail) == 64 && offsetof(ShmHeader, cq_waiters) == 320 &&
              offsetof(ShmHeader, sq_polled) == 384);

constexpr uint64_t kPage = 4096;
constexpr uint64_t kArenaAlign = 2u << 20;  // lets THP back the arena

constexpr uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

struct ShmLayout {
  uint64_t sq_offset, cq_offset, arena_offset, total_bytes;
};

constexpr ShmLayout layout_for(uint32_t sq_entries, uint32_t cq_entries, uint64_t arena_bytes) {
  ShmLayout l{};
  l.sq_offset = kPage;
  l.cq_offset = align_up(l.sq_offset + uint64_t{sq_entries} * sizeof(SubmitEntry), kPage);
  l.arena_offset = align_up(l.cq_offset + uint64_t{cq_entries} * sizeof(CompleteEntry), kArenaAlign);
  l.total_bytes = l.arena_offset + align_up(arena_bytes, kPage);
  return l;
}

}  // namespace gsync::proto
