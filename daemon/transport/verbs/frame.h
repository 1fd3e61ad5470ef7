// SPDX-License-Identifier: Apache-2.0
//
// The verbs provider's two message formats. On the bootstrap TCP link
// (in order, beside the peering context's own messages): the QP
// parameters and region announcements. On the RC queue pair (SEND): the
// descriptor that follows each RDMA WRITE, and credit returns.
// docs/transport.md, "The verbs provider".
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace gsync::transport::verbs {

// First byte of the provider's messages on the bootstrap link (the
// peering context's own tags are in peering/frame.h).
enum class Tag : uint8_t {
  kQpInfo = 'Q',  // this side's queue pair: connect to it
  kReady = 'R',   // this side's QP is RTS and connected to yours
  kRegion = 'G',  // a region peers may write into (address, rkey)
};

struct QpInfo {
  uint32_t qpn = 0;
  uint32_t psn = 0;
  uint16_t lid = 0;
  uint8_t gid[16] = {};
  uint8_t mtu = 0;         // enum ibv_mtu
  uint8_t link_layer = 0;  // IBV_LINK_LAYER_*
  uint32_t recv_slots = 0; // credits the sender starts with
};

struct Ready {
  uint32_t from_qpn = 0;  // the sender's QP ...
  uint32_t to_qpn = 0;    // ... is connected to this one of ours
};

struct RegionInfo {
  uint32_t id = 0;
  uint64_t addr = 0;  // remote virtual address of byte 0 of the region
  uint64_t bytes = 0;
  uint32_t rkey = 0;
  std::string error;  // registration failed here: writes into it fail with this
};

std::string encode(const QpInfo& m);
std::string encode(const Ready& m);
std::string encode(const RegionInfo& m);

bool decode(std::string_view in, QpInfo* m);
bool decode(std::string_view in, Ready* m);
bool decode(std::string_view in, RegionInfo* m);

// On the queue pair. Fixed size, so one receive slot holds any of them and a
// short SEND can go inline.
enum class DescKind : uint8_t { kWrite = 1, kCredit = 2 };

struct Descriptor {
  uint8_t kind = 0;  // DescKind
  uint8_t pad[3] = {};
  uint32_t credits = 0;  // receive slots the sender has reposted since its last return
  uint32_t region = 0;
  uint32_t pad2 = 0;
  uint64_t offset = 0, len = 0, imm = 0;
};
static_assert(sizeof(Descriptor) == 40);

}  // namespace gsync::transport::verbs
