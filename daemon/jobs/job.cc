// SPDX-License-Identifier: Apache-2.0
#include "daemon/jobs/job.h"

#include <fmt/format.h>

#include "protocol/wire.h"

namespace gsync {

uint64_t Op::bytes() const { return count * proto::dtype_size(dtype); }

std::string Op::describe(const std::string& job) const {
  return fmt::format("job {} {} key {} step {}", job, opcode_name(opcode), id.key, id.step);
}

int Job::live_ranks() const {
  int n = 0;
  for (const auto& s : slots)
    if (s.session) n++;
  return n;
}

const RankSlot* Job::first_dead() const {
  for (const auto& s : slots)
    if (s.dead) return &s;
  return nullptr;
}

const Job::Tombstone* Job::find_tombstone(const OpId& id) const {
  for (const auto& t : tombstones)
    if (t.id == id) return &t;
  return nullptr;
}

const char* opcode_name(uint8_t opcode) {
  switch (opcode) {
    case proto::kOpAllreduce: return "allreduce";
    case proto::kOpBroadcast: return "broadcast";
    case proto::kOpBarrier: return "barrier";
    default: return "unknown-op";
  }
}

const char* dtype_name(uint8_t dtype) {
  static const char* names[] = {"float32", "float16", "bfloat16", "float64", "int32"};
  return dtype < 5 ? names[dtype] : "unknown-dtype";
}

const char* redop_name(uint8_t redop) {
  static const char* names[] = {"sum", "avg", "weighted_avg", "min", "max"};
  return redop < 5 ? names[redop] : "unknown-redop";
}

}  // namespace gsync
