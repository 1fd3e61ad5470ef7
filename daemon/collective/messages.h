// SPDX-License-Identifier: Apache-2.0
//
// The collective engine's control messages (docs/protocol.md, "Daemon to
// daemon"): the rendezvous of an op (OpReady), a small op's transfer with
// its data (OpData) and an op's abort (OpAbort), on the framing of
// cluster/messages.h. Claimed from gsyncd.cc (cluster/services.h).
#pragma once

#include <cstdint>

#include "daemon/cluster/messages.h"

namespace gsync::collective {

using cluster::kJobMax;

constexpr uint8_t kOpReady = 3;
constexpr uint8_t kOpAbort = 4;
constexpr uint8_t kOpData = 5;  // an OpReady header naming one transfer of a small op, then its data
inline constexpr uint8_t kEngineMessages[] = {kOpReady, kOpAbort, kOpData};

// "My local contribution to (job, key, step) is being prepared; write into
// these regions of mine." Also carries the op's shape so hosts that disagree
// find out before any data moves. The same header starts an OpData, one
// transfer of a small op's schedule with its data (no rendezvous; weight_sum
// is then the weight of what the data holds).
struct OpReady {
  uint8_t type = kOpReady;
  uint8_t algo = 0, opcode = 0, dtype = 0, redop = 0;
  uint8_t xfer = 0, slot = 0;  // OpData: the transfer's kind (collective::Xfer) and slot
  uint8_t compress = 0;  // the op's compression, as a SubmitEntry carries it
  char job[kJobMax] = {};
  uint64_t key = 0, step = 0, count = 0, chunk_bytes = 0;
  double weight_sum = 0;  // the host's share of the weights (weighted average)
  uint32_t token = 0;     // names the op in the immediates of writes to this host
  uint32_t data_region = 0, scratch_region = 0;
  uint32_t compress_arg = 0;
  uint64_t slot_bytes = 0;  // scratch slot stride
};

struct OpAbort {
  uint8_t type = kOpAbort;
  uint8_t pad[3] = {};
  int32_t code = 0;
  char job[kJobMax] = {};
  uint64_t key = 0, step = 0;
  char message[240] = {};
};

}  // namespace gsync::collective
