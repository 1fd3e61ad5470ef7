// SPDX-License-Identifier: Apache-2.0
//
// The checks of what a client sends that need no job state: the identity
// in its hello (check_join_request) and every field of a submission entry
// it wrote into shared memory (check_submission). Pure functions, so the
// fuzz targets (tests/fuzz/fuzz_client_hello.cc, fuzz_submission.cc) reach
// exactly what the daemon runs; JobManager adds what depends on the jobs
// (is the rank taken, do the ranks agree).
#pragma once

#include <cstdint>
#include <string>

#include "daemon/core/status.h"
#include "daemon/shm/handshake.h"
#include "protocol/ops.h"
#include "protocol/wire.h"

namespace gsync {

// The job id and the shape a rank claims (world_size, rank, local_size,
// local_rank). multi_host_ok: this daemon has a cluster, so a job may span
// hosts.
Status check_join_request(const JoinRequest& r, bool multi_host_ok);

// Every field of e, for a job of world_size ranks and a session whose
// arena has arena_bytes. who names the rank in errors ("job j rank 2 (local
// 2, pid 7)"). On success *shape is the op e asks for and *bytes the bytes
// of its tensor at e.offset, inside the arena.
Status check_submission(const proto::SubmitEntry& e, int world_size, uint64_t arena_bytes,
                        const std::string& who, proto::OpShape* shape, uint64_t* bytes);

// "allreduce of 100 float32 (sum)": what one rank asked for, in errors.
std::string describe_shape(const proto::OpShape& s);

}  // namespace gsync
