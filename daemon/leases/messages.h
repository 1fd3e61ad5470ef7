// SPDX-License-Identifier: Apache-2.0
//
// Batch leases' messages between daemons (docs/protocol.md, "Batch
// leases"; cluster/messages.h types 11-14). A job's leases are kept by one
// daemon, its keeper: the first of the job's hosts in cluster order. The
// others ask it for their ranks and tell it what their ranks did. Fixed
// little-endian structs; every decode checks the length, strings are read
// up to their field's end.
//
//   LeaseAsk     a host for its rank: a batch of epoch `epoch` (of
//                `batches`) for the rank's clock; `id` is the asker's
//   LeaseGrant   the keeper's answer to an ask: code 0 and the batch id
//                (or proto::kLeaseWait / kLeaseEnd) in value, or an error
//                code and why
//   LeaseSettle  a rank's pushes of a clock were applied on every key
//   LeaseDrop    a rank left: its leases for clocks >= from_clock go back
#pragma once

#include <cstdint>
#include <string_view>

#include "daemon/cluster/messages.h"

namespace gsync::leases {

// Batch leases' message types (cluster/messages.h says which numbers are
// whose); claimed from gsyncd.cc (cluster/services.h).
constexpr uint8_t kLeaseAsk = 11;
constexpr uint8_t kLeaseGrant = 12;
constexpr uint8_t kLeaseSettle = 13;
constexpr uint8_t kLeaseDrop = 14;
inline constexpr uint8_t kLeaseMessages[] = {kLeaseAsk, kLeaseGrant, kLeaseSettle, kLeaseDrop};

struct LeaseAsk {
  uint8_t type = kLeaseAsk;
  uint8_t pad[3] = {};
  int32_t rank = 0;
  char job[cluster::kJobMax] = {};
  uint64_t id = 0;
  uint64_t epoch = 0, batches = 0, clock = 0;
};

struct LeaseGrant {
  uint8_t type = kLeaseGrant;
  uint8_t pad[3] = {};
  int32_t code = 0;  // 0, or a GSYNC_ERR_* code and why in message
  uint64_t id = 0;   // the ask's
  uint32_t value = 0;
  uint32_t pad2 = 0;
  char message[200] = {};
};

struct LeaseSettle {
  uint8_t type = kLeaseSettle;
  uint8_t pad[3] = {};
  int32_t rank = 0;
  char job[cluster::kJobMax] = {};
  uint64_t clock = 0;
};

struct LeaseDrop {
  uint8_t type = kLeaseDrop;
  uint8_t pad[3] = {};
  int32_t rank = 0;
  char job[cluster::kJobMax] = {};
  uint64_t from_clock = 0;
};

// One message off the wire, decoded: only a message of its type's exact
// size is one (the others are malformed).
struct LeaseMessage {
  uint8_t type = 0;
  LeaseAsk ask;
  LeaseGrant grant;
  LeaseSettle settle;
  LeaseDrop drop;
};

inline bool decode(std::string_view msg, LeaseMessage* out) {
  using cluster::decode_exact;
  if (msg.empty()) return false;
  out->type = static_cast<uint8_t>(msg[0]);
  switch (out->type) {
    case kLeaseAsk:
      return decode_exact(msg, &out->ask);
    case kLeaseGrant:
      return decode_exact(msg, &out->grant);
    case kLeaseSettle:
      return decode_exact(msg, &out->settle);
    case kLeaseDrop:
      return decode_exact(msg, &out->drop);
    default:
      return false;
  }
}

}  // namespace gsync::leases
