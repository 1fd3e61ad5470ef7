// SPDX-License-Identifier: Apache-2.0
//
// The checks of a peer's op messages (OpReady, OpData, OpAbort) that need
// only the op's plan and this host's schedule: what a peer says about the
// op's shape, whether its rendezvous fits, and where an eager transfer may
// land before the engine copies it into scratch or the tensor. Pure, so the
// fuzz target tests/fuzz/fuzz_control_messages.cc reaches exactly what the
// engine runs (engine.cc, eager.cc); the engine adds what depends on the
// op's progress (a transfer sent twice, a final sum before our part).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "daemon/collective/messages.h"
#include "daemon/collective/plan.h"
#include "daemon/collective/schedule.h"
#include "daemon/core/status.h"

namespace gsync::collective {

// Who is speaking about which op, for the errors: "job j allreduce key 1
// step 0", the peer's host id, this host's.
struct OpParty {
  const std::string& op;
  const std::string& from;
  const std::string& self;
};

// Hosts must agree on an op's shape before any data moves: opcode, count,
// dtype, reduce op, algorithm and chunking of m against plan's.
// GSYNC_ERR_MISMATCH naming both hosts' views.
Status check_same_shape(const Plan& plan, const OpReady& m, const OpParty& who);

// A rendezvous of msg_bytes for an op of plan (eager ops have none).
Status check_rendezvous(const Plan& plan, size_t msg_bytes, const OpParty& who);

// Where an eager transfer lands: the phase of this host's schedule that
// expects it, its kind, and (a partial sum) the scratch slot.
struct EagerLanding {
  size_t phase = 0;
  Xfer kind = Xfer::kReduce;
  uint8_t slot = 0;  // < plan.slots for kReduce; 0 for kCopy
};

// An OpData m carrying data_bytes from participant (-1: a host that takes
// no part), for an op of plan whose first chunk's phases are sched's.
Status check_op_data(const Plan& plan, const Schedule& sched, int participant,
                     const OpReady& m, size_t data_bytes, const OpParty& who,
                     EagerLanding* out);

// What a peer's OpAbort stands for: its message and who sent it, with its
// code if that names an error (0 would read as success), else
// GSYNC_ERR_PROTOCOL.
Status abort_status(const OpAbort& m, const std::string& from);

}  // namespace gsync::collective
