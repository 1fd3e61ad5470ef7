// SPDX-License-Identifier: Apache-2.0
//
// One asynchronous operation. The state is shared by the caller's handle and
// the session's table of in-flight tags, so a handle freed while pending
// (abandoned) still has its completion consumed and its staging block
// released, and a handle kept after gsync_close still reads safely.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "protocol/ops.h"

namespace gsync::client {

class Comm;

// Guarded by the owning Comm's mutex.
struct RequestState {
  uint64_t tag = 0;
  uint64_t key = 0;
  uint64_t step = 0;
  proto::Opcode opcode = proto::Opcode::kAllreduce;

  bool done = false;
  bool abandoned = false;  // handle freed while pending
  int status = 0;          // valid once done
  uint32_t value = 0;      // valid once done: a declaration's resume clock
  std::string error;       // valid once done with status != 0
  std::string text;        // a successful answer's text: a world query's (protocol/world.h), a rolled-back push's

  // Copy path: the tensor lives outside the arena and travels through a
  // staging block. The copy out happens in the caller's gsync_test/wait,
  // outside the session lock, not in whichever thread drains the ring.
  bool staging_held = false;
  uint64_t staging_offset = 0;
  uint64_t data_skip = 0;  // the tensor's place in the block (a declaration's options come first)
  uint64_t bytes = 0;
  void* user_buf = nullptr;
  bool copy_out = false;          // broadcast roots need none
  bool copy_out_pending = false;  // completed successfully, not yet copied
  // Arena blocks handed over by a request freed while this op, which uses
  // them, was in flight (a reproducible allreduce's scratch): freed with
  // its completion.
  std::vector<uint64_t> free_on_done;
};

class Reproducible;

}  // namespace gsync::client

// The opaque C handle.
struct gsync_request {
  std::shared_ptr<gsync::client::Comm> comm;
  std::shared_ptr<gsync::client::RequestState> state;
  // A reproducible allreduce: its inner ops; state is its own (reproducible.h).
  std::shared_ptr<gsync::client::Reproducible> repro;
};
