// SPDX-License-Identifier: Apache-2.0
//
// The cross-host services: the layers above the control plane that talk to
// their peers through it - the collective engine, the parameter server,
// batch leases. Each is added once, from gsyncd.cc, with what it owns: the
// control message types (a message's first byte) and the tag of its
// one-sided writes (a mask and value of the immediate, and of the cookie).
// The control plane hands a service its messages and writes, and tells
// every service, in the order they were added, when a peer is lost or a
// peer's rank leaves a job. It names none of their messages: a new service,
// or a new message of one, touches its own layer and gsyncd.cc only
// (docs/contributing.md). Event thread only.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/cluster/messages.h"
#include "daemon/core/status.h"

namespace gsync::cluster {

class CrossHostService {
 public:
  virtual ~CrossHostService() = default;
  // One of the control messages it owns (first byte: its type).
  virtual void on_message(int peer, std::string_view msg) = 0;
  // A peer's one-sided write into a region of this host landed, and one of
  // this host's writes ended; only for the service whose tag they carry.
  virtual void on_write(int peer, uint32_t region, uint64_t offset, uint64_t len, uint64_t imm) {
    (void)peer, (void)region, (void)offset, (void)len, (void)imm;
  }
  virtual void on_write_done(int peer, uint64_t cookie, const Status& st) {
    (void)peer, (void)cookie, (void)st;
  }
  // The link to peer is gone: whatever waits on it fails with why.
  virtual void on_peer_lost(int peer, const Status& why) { (void)peer, (void)why; }
  // A rank of `peer` left the job: the ops of the job that host has begun
  // and still finishes are `open`; any other can never get its part.
  virtual void on_peer_left_job(std::string_view job, int peer, const std::vector<proto::OpId>& open,
                                const Status& why) {
    (void)job, (void)peer, (void)open, (void)why;
  }
  // The ops of the job this host has begun and not finished (its JobLeave
  // lists them when a local rank leaves).
  virtual std::vector<proto::OpId> open_ops(std::string_view job) const {
    (void)job;
    return {};
  }
  // Tensor bytes written to peer: as they went on the wire (encoded where
  // a codec applied) and the fp32 bytes they stand for (gsyncctl peers).
  struct Payload {
    uint64_t wire = 0, logical = 0;
  };
  virtual Payload payload_sent(int peer) const {
    (void)peer;
    return {};
  }
};

// What a service owns. Writes are its when (imm & write_mask) ==
// write_tag; a mask of 0 owns none. Two services' write tags may not both
// match one immediate.
struct ServiceClaim {
  std::string name;               // for errors and logs: "the parameter server"
  std::vector<uint8_t> messages;  // control message types
  uint64_t write_mask = 0, write_tag = 0;
};

class ServiceRegistry {
 public:
  // reserved: the control plane's own message types.
  explicit ServiceRegistry(std::vector<uint8_t> reserved) : reserved_(std::move(reserved)) {}

  // A message type taken already (by a service or the control plane), a
  // write tag another's could also match, or a service added twice: an
  // error naming both claimants, and nothing added.
  Status add(CrossHostService* service, ServiceClaim claim);
  // The service goes (its destructor): nothing reaches it after.
  void remove(CrossHostService* service);

  CrossHostService* for_message(uint8_t type) const;
  CrossHostService* for_write(uint64_t imm_or_cookie) const;
  // Every service, in the order added.
  std::vector<CrossHostService*> all() const;

 private:
  struct Entry {
    CrossHostService* service;
    ServiceClaim claim;
  };
  std::vector<uint8_t> reserved_;
  std::vector<Entry> entries_;
};

}  // namespace gsync::cluster
