// SPDX-License-Identifier: Apache-2.0
//
// A submission entry as a client may write it into its ring (it can write
// anything), checked by check_submission (daemon/shm/client_checks.h) as the
// jobs layer does before it touches the tensor. Input: 64 bytes of
// SubmitEntry, then the job's world size (1 byte) and the arena's size (8
// bytes). Properties: an entry that passes names a tensor inside the arena
// (offset + bytes cannot wrap past it), or in device memory (not for the
// parameter server, and inside an allocation where in_allocation says so), of count x the dtype's size bytes,
// a known op, a root inside the job; an error names the rank and the tag.
#include <cmath>
#include <cstring>

#include "daemon/shm/client_checks.h"
#include "protocol/compression.h"
#include "protocol/device.h"
#include "protocol/lease.h"
#include "protocol/ps.h"
#include "tests/fuzz/fuzz_target.h"

GSYNC_FUZZ_TARGET(submission) {
  using namespace gsync;
  fuzz::Input in(data, size);
  auto e = in.take<proto::SubmitEntry>();
  int world = 1 + in.byte();
  uint64_t arena = in.take<uint64_t>() % (uint64_t{1} << 40);
  proto::OpShape shape;
  uint64_t bytes = ~0ull;
  Status st = check_submission(e, world, arena, "job fuzz rank 0 (local 0, pid 1)", &shape, &bytes);
  if (!st) {
    FUZZ_CHECK(st.code() < 0);
    FUZZ_CHECK(st.message().find("job fuzz rank 0") == 0);
    FUZZ_CHECK(st.message().find(std::to_string(e.tag)) != std::string::npos);
    return 0;
  }
  if (shape.opcode == proto::Opcode::kLease) {
    // A lease: an epoch of 1 to kMaxLeaseBatches batches, nothing else.
    FUZZ_CHECK(e.count > 0 && e.count <= proto::kMaxLeaseBatches && bytes == 0);
    FUZZ_CHECK(e.offset == 0 && e.weight == 0 && e.compress == 0 && e.root == 0);
    return 0;
  }
  if (proto::is_ps(shape.opcode)) {
    // A parameter-server op: float data, no codec; a push weighs >= 0.
    FUZZ_CHECK(e.compress == 0 && !shape.compress.on() && e.count > 0);
    FUZZ_CHECK(shape.dtype == proto::DType::kF32 || shape.dtype == proto::DType::kF16 ||
               shape.dtype == proto::DType::kBF16);
    if (shape.opcode == proto::Opcode::kPush || shape.opcode == proto::Opcode::kPushPull)
      FUZZ_CHECK(std::isfinite(e.weight) && e.weight >= 0 && std::isfinite(shape.lr) &&
                 shape.lr >= 0);
    if (shape.opcode == proto::Opcode::kPsDeclare)
      FUZZ_CHECK(e.offset >= sizeof(proto::PsDeclareHeader));
  } else {
    proto::Compression c;
    FUZZ_CHECK(proto::from_entry(e.compress, e.compress_arg, &c).empty() && c == shape.compress);
  }
  if (shape.compress.on())
    FUZZ_CHECK(shape.opcode == proto::Opcode::kAllreduce && shape.dtype == proto::DType::kF32);
  if (shape.opcode == proto::Opcode::kBarrier) {
    FUZZ_CHECK(e.count == 0 && bytes == 0);
    return 0;
  }
  FUZZ_CHECK(bytes == e.count * proto::dtype_size(shape.dtype));
  FUZZ_CHECK(bytes / proto::dtype_size(shape.dtype) == e.count);  // no wrap
  if (proto::is_device_offset(e.offset)) {
    // In a client's device memory: the jobs layer checks it against the
    // allocation (Session::device_range), with in_allocation.
    FUZZ_CHECK(!proto::is_ps(shape.opcode));
    FUZZ_CHECK(proto::from_entry_offset(e.offset).offset % proto::dtype_size(shape.dtype) == 0);
    const uint64_t alloc = arena;  // any allocation size
    if (proto::in_allocation(e.offset, bytes, alloc)) {
      const proto::DeviceOffset d = proto::from_entry_offset(e.offset);
      FUZZ_CHECK(d.offset + bytes <= alloc && d.offset + bytes >= d.offset);
      FUZZ_CHECK(proto::to_entry_offset(d) == e.offset);
    }
  } else {
    FUZZ_CHECK(e.offset <= arena && bytes <= arena - e.offset);
  }
  if (shape.opcode == proto::Opcode::kBroadcast) FUZZ_CHECK(shape.root >= 0 && shape.root < world);
  if (shape.opcode == proto::Opcode::kAllreduce) FUZZ_CHECK(proto::defined(shape.dtype, shape.redop));
  return 0;
}
