// SPDX-License-Identifier: Apache-2.0
//
// A fast link kind that a peering context (context.h) can choose per
// peer: verbs (transport/verbs/) and DPDK (transport/dpdk/). The peering context does what
// is the same for every such kind - the TCP bootstrap (HELLO, identity
// checks, reconnects, heartbeats), the capability exchange and the link
// choice, the user's control messages, region ids and their retirement
// with every peer - and the provider does only what is its own: its device,
// its per-peer connection (set up by messages over the bootstrap link), its
// one-sided writes and their completions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "daemon/core/status.h"
#include "daemon/transport/peering/frame.h"
#include "daemon/transport/transport.h"

namespace gsync::transport::peering {

// What a provider may ask of the peering context it is part of. Events are queued
// and run in order from the peering context's poll(), never inside the call.
class LinkHost {
 public:
  virtual ~LinkHost() = default;
  virtual const ContextOptions& options() const = 0;
  virtual const Handlers& handlers() const = 0;
  virtual std::string describe_host(int index) const = 0;
  // A message of the provider's own to the peer, over the bootstrap link, in
  // order with everything else on it. Its first byte is the provider's tag
  // (never one of frame.h's Ctl values).
  virtual void send_bootstrap(int peer, const std::string& msg) = 0;
  virtual void post_write_done(int peer, uint64_t cookie, Status st) = 0;
  virtual void post_peer_up(int peer) = 0;
  virtual void post_peer_down(int peer, Status why) = 0;
  // No write of ours into the peer's region `id` is in flight any more
  // (after its RETIRE): the peering context acknowledges it.
  virtual void ack_retire(int peer, uint32_t id) = 0;
  // Wake the caller's poll loop (work is waiting for poll()).
  virtual void notify() = 0;
};

class LinkProvider {
 public:
  virtual ~LinkProvider() = default;

  virtual LinkKind kind() const = 0;
  // "rxe0 port 1 gid 1", told to peers in CAPS and logged.
  virtual std::string detail() const = 0;
  // Readable when poll() has completions; -1 when there is none.
  virtual int event_fd() const = 0;
  virtual void start(LinkHost& host) = 0;
  // A host joined after start() (membership on etcd): make the state of
  // its link, as start() did for the hosts it knew. False: this provider
  // cannot, and the host links over TCP.
  virtual bool add_peer(int peer) {
    (void)peer;
    return false;
  }

  // The peer's link is ours (both ends offer this kind, same rack), or no
  // longer is (the bootstrap link went down).
  virtual void link_up(int peer) = 0;
  virtual void link_down(int peer, const Status& why) = 0;
  // A provider message (its tag first) from the peer's bootstrap link.
  virtual void on_bootstrap(int peer, std::string_view msg) = 0;
  // The peer retired its region id: stop writing into it, and ack_retire
  // once no write of ours into it is in flight.
  virtual void on_retire(int peer, uint32_t id) = 0;

  // Regions peers may write into over this kind of link. add_region makes
  // it known to linked peers; retire_region stops that (writes may still
  // land until every peer acked); drop_region frees what it held.
  virtual void add_region(const Region& r) = 0;
  virtual void retire_region(uint32_t id) = 0;
  virtual void drop_region(uint32_t id) = 0;

  virtual void write(int peer, const void* src, uint64_t len, uint32_t remote_region,
                     uint64_t remote_offset, uint64_t imm, uint64_t cookie) = 0;
  // Completions of every peer, bounded per call; true when more wait.
  virtual bool poll() = 0;
  // For a caller that polls: poll() may have work that event_fd does not
  // signal (a polled port with no interrupts: DPDK).
  virtual bool pending() const { return false; }
  // Context::tick() of the peering context.
  virtual std::chrono::microseconds tick() const { return {}; }

  virtual bool peer_up(int peer) const = 0;
  virtual PeerStats stats(int peer) const = 0;
  // For gsyncctl status: "verbs within a rack on rxe0 port 1 (...)".
  virtual std::string summary() const = 0;
};

}  // namespace gsync::transport::peering
