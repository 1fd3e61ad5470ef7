// SPDX-License-Identifier: Apache-2.0
//
// Opening a Comm (the client's side of a session): validate the caller's
// config (connect_config.cc), connect to gsyncd, exchange the hello,
// receive the memfd and the two doorbells,
// map and validate the shared memory (connect.cc). Everything is acquired
// here, in this order, and handed to the Comm as one Connection; see
// docs/protocol.md.
#pragma once

#include <cstdint>
#include <string>

#include "gsync/gsync.h"
#include "protocol/ops.h"
#include "libclient/unique_fd.h"

namespace gsync::client {

// gsync_config_t after validation, with defaults resolved.
struct ConnectParams {
  std::string socket_path;
  std::string socket_source;  // where the path came from, for error text
  std::string job_id;
  int32_t world_size = 0;
  int32_t rank = 0;
  int32_t local_rank = 0;
  int32_t local_size = 0;
  uint64_t arena_bytes = 0;
  uint32_t timeout_ms = 0;
  // The job's compression (cfg.compression or $GSYNC_COMPRESSION), with
  // its defaults filled; applied to the allreduces it can apply to.
  proto::Compression compression;
  uint32_t sync = 0;  // the job's sync mode, as the hello carries it (protocol/ps.h)
  uint32_t guard = 0;  // the job's anomaly guard, as the hello carries it (protocol/guard.h)
  uint32_t plan = 0;   // the job's algorithm and chunk size (protocol/plan_choice.h)
  // An elastic job's bounds (min_hosts > 0); world_size and rank are then 0
  // until gsync_world says them.
  uint16_t min_hosts = 0, max_hosts = 0;
  // Allreduces reproducible unless an op says otherwise (cfg.reproducible,
  // $GSYNC_REPRODUCIBLE; docs/reproducibility.md). The client's business
  // alone: the daemons see ordinary ops.
  bool reproducible = false;
};

// The static part of ShmHeader, read once and checked: the client never
// reads those fields from shared memory again.
struct ShmGeometry {
  uint64_t total_bytes = 0;
  uint32_t sq_entries = 0;
  uint32_t cq_entries = 0;
  uint64_t sq_offset = 0;
  uint64_t cq_offset = 0;
  uint64_t arena_offset = 0;
  uint64_t arena_bytes = 0;
};

struct Connection {
  UniqueFd sock;         // kept open: its closure tells each side the other is gone
  UniqueFd sq_doorbell;  // eventfd, client writes
  UniqueFd cq_doorbell;  // eventfd, daemon writes; O_NONBLOCK set by the client
  SharedMapping shm;
  ShmGeometry geometry;
  uint64_t session_id = 0;
  uint32_t default_timeout_ms = 0;
};

// A public compression struct as the protocol's, defaults filled, its
// rules checked; GSYNC_ERR_INVALID naming `where`'s bad field.
int compression_from_public(const gsync_compression_t& in, const char* where,
                            proto::Compression* out);

// GSYNC_OK or GSYNC_ERR_INVALID with a message naming the bad field.
int parse_config(const gsync_config_t* cfg, ConnectParams* out);
// GSYNC_OK, or a GSYNC_ERR_* code with a message naming the socket, job, rank.
int connect_session(const ConnectParams& params, Connection* out);

}  // namespace gsync::client
