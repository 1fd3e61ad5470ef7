// SPDX-License-Identifier: Apache-2.0
//
// What the collective algorithms see of the network: peers (one pair per
// remote daemon), regions of local memory registered for peers to write into,
// one-sided writes with an immediate value that tells the receiver what
// landed, and small in-order control messages. The same shape as RDMA
// WRITE_WITH_IMM plus SEND on an RC queue pair, so the verbs provider
// (transport/verbs/) and the TCP provider (transport/tcp/) are siblings with
// the same file set: device, context, pair, buffer. docs/transport.md.
//
// Threading: a Context is driven by exactly one thread, the one that calls
// poll(); every handler runs on that thread, inside poll(). No method may be
// called from another thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/core/status.h"

namespace gsync::transport {

// One daemon of the cluster as the transport needs to know it.
struct PeerInfo {
  std::string host_id;  // "h11"
  std::string address;  // IPv4/IPv6 literal or name
  uint16_t port = 0;
  std::string rack;
  // The same host at the same endpoint (set_peer leaves such a host be).
  bool operator==(const PeerInfo&) const = default;
};

// Checked at connect time on both ends; a mismatch refuses the link with a
// message naming both sides' values.
struct Identity {
  std::string cluster_name;
  uint32_t protocol_version = 0;
  std::string build_id;
};

// The cluster key's length: 32 random bytes (docs/security.md).
constexpr size_t kClusterKeyBytes = 32;

struct ContextOptions {
  Identity identity;
  // The shared cluster key, kClusterKeyBytes raw bytes. Every connection
  // proves it in the handshake, both ways (docs/transport.md,
  // "Authentication"); a context without one refuses to start.
  std::string cluster_key;
  // The whole cluster, in cluster order. An entry with an empty host_id is
  // an index no host holds (yet): membership from etcd, set_peer.
  std::vector<PeerInfo> hosts;
  int self = -1;                // index of this daemon in hosts
  std::string listen_address;   // default: hosts[self].address
  int streams = 2;              // TCP connections per peer in this host's rack
  // TCP connections per peer in another rack; 0: `streams`. Across a rack's
  // uplink the link's rate, not one core's TCP work, limits a stream, and
  // more flows only crowd the uplink's queue (docs/transport.md, "Streams").
  int cross_rack_streams = 1;
  // SO_SNDBUF and SO_RCVBUF of each TCP connection (the kernel doubles it);
  // 0 leaves them to the kernel's autotuning. Small buffers keep the bytes
  // in flight in cache (docs/transport.md, "Socket buffers").
  int socket_buffer_bytes = 256 << 10;
  uint32_t heartbeat_ms = 200;  // control keepalive period
  uint32_t peer_timeout_ms = 2000;  // silence after which a peer is declared down
  uint32_t reconnect_min_ms = 50, reconnect_max_ms = 2000;  // backoff
  // The verbs provider (transport/verbs/): which RDMA device, port and GID.
  struct Verbs {
    std::string device;   // "": the first device with an active port
    int port = 0;         // 0: the first active port
    int gid_index = -1;   // -1: a RoCE v2 GID (the listen address's if present)
    bool required = false;  // make_context fails instead of falling back to TCP
  } verbs;
  // The DPDK provider (transport/dpdk/): an Ethernet port of its own, taken
  // over with DPDK's environment (EAL) from these arguments.
  struct Dpdk {
    bool wanted = false;    // [cluster] transport = "dpdk"
    std::string eal_args;   // "--no-huge --no-pci -m 256 --vdev=net_memif0,role=server,..."
    std::string port;       // the device name ("net_memif0"); "": the first port
    uint32_t mbufs = 8191;  // the packet buffer pool
    uint32_t window = 512;  // frames in flight per link, each way
    uint32_t payload = 0;   // bytes per frame; 0: what the port's MTU allows
    uint32_t idle_poll_us = 1000;  // an idle port is looked at this often (the loop's timers: 1 ms at least)
    uint32_t drop_ppm = 0;  // test hook: received frames dropped on purpose, per million
    // The receive poll: kRxOff (the event loop polls the port), kRxAnyCpu
    // or a CPU number (a dedicated lcore, floating or pinned).
    static constexpr int kRxOff = -2, kRxAnyCpu = -1;
    int rx_lcore = kRxOff;
    bool required = false;  // no fallback to TCP when the port is unusable
  } dpdk;
};

// A region of this daemon's memory that peers may write into.
struct Region {
  uint32_t id = 0;  // 0 is never a valid id
  uint8_t* base = nullptr;
  uint64_t bytes = 0;
};

enum class PeerState : uint8_t { kConnecting, kUp, kDown };

// A pair's last failure and when it happened: gsyncctl peers shows its age,
// so a connect refused at start-up is not read as news about a link now up.
struct LastError {
  std::string text;
  std::chrono::steady_clock::time_point at{};
  void set(std::string why) {
    text = std::move(why);
    at = std::chrono::steady_clock::now();
  }
  void clear() { *this = LastError{}; }
  bool empty() const { return text.empty(); }
};

struct PeerStats {
  PeerState state = PeerState::kConnecting;
  uint64_t bytes_sent = 0, bytes_received = 0;
  uint64_t writes_sent = 0, writes_received = 0;
  uint64_t connects = 0;          // successful link establishments
  std::string last_error;         // why the link last went down, "" if never
  std::chrono::steady_clock::time_point last_error_at{};  // when, for its age
  std::string transport = "tcp";  // "tcp", "verbs", "dpdk"
  int streams = 0;                // TCP connections (or QPs) of the link
  // Verbs only (empty / zero on TCP): where the link runs and how it fares.
  std::string verbs_device;      // "rxe0"
  int verbs_port = 0;
  int verbs_gid_index = -1;
  uint32_t verbs_qpn = 0, verbs_remote_qpn = 0;
  uint64_t verbs_completion_errors = 0;  // work completions with an error status
  // DPDK only: the port, both ends' MACs and how the reliability fares.
  struct Dpdk {
    std::string port;  // "net_memif0"
    std::string mac, remote_mac;
    uint32_t link = 0, remote_link = 0;  // this incarnation's ids
    uint64_t frames_sent = 0, frames_resent = 0, timeouts = 0, frames_received = 0;
    uint64_t duplicates = 0;  // frames of this link that came again
    // The port's, the same for every peer on it: frames taken no further,
    // by reason (frame.h's Drop: other traffic, truncated, malformed, ...),
    // frames the port itself lost (its ring full, no buffer) and frames
    // not built for want of a buffer.
    uint64_t dropped = 0;
    std::vector<std::pair<std::string, uint64_t>> dropped_by_reason;
    uint64_t port_missed = 0, tx_no_buffer = 0;
    std::string rx_lcore;  // "lcore 1 on CPU 3"; "": the event loop polls the port
    uint64_t rx_wakeups = 0;    // the receive lcore woke a sleeping event loop
    uint64_t rx_ring_full = 0;  // frames it freed: the event loop had fallen behind
    bool rx_armed = false;      // the event loop waits for its wake-up (idle)
    double srtt_us = 0, rto_us = 0;
  } dpdk;
};

struct Handlers {
  // A peer's write into our region [offset, offset+len) has fully landed.
  std::function<void(int peer, uint32_t region, uint64_t offset, uint64_t len, uint64_t imm)>
      on_write;
  // Our write finished; its source memory may be reused. On failure (link
  // lost) st says why; the data may or may not have landed.
  std::function<void(int peer, uint64_t cookie, const Status& st)> on_write_done;
  // A control message from a peer; messages from one peer arrive in order.
  std::function<void(int peer, std::string_view msg)> on_control;
  // Link state changes. After on_peer_down every write to that peer that has
  // not completed gets on_write_done with an error, and the context keeps
  // trying to reconnect; on_peer_up reports the new link.
  std::function<void(int peer)> on_peer_up;
  std::function<void(int peer, const Status& why)> on_peer_down;
};

class Context {
 public:
  virtual ~Context() = default;

  // Listens and starts connecting to every peer.
  virtual Status start(Handlers handlers) = 0;

  // Cheap (a table entry on TCP; verbs caches its memory registrations under
  // it). The plan cache registers a tensor's buffers once and keeps them
  // across steps (pipeline/plan_cache.h): deregistration is what costs, a
  // round trip with every verbs peer.
  virtual Region register_region(void* base, uint64_t bytes) = 0;
  // Writes that arrive for the region afterwards are discarded, not treated
  // as malformed: ids are never reused, so a late write (from an op that
  // failed elsewhere) is told apart from a bad one. released runs, inside
  // poll() or before this returns, once no receive into the region is in
  // progress; the region's memory must stay valid until then.
  virtual void deregister_region(uint32_t id, std::function<void()> released) = 0;

  // One-sided write of [src, src+len) into the peer's region remote_region at
  // remote_offset; imm reaches the peer's on_write with the data. src must
  // stay valid until on_write_done(cookie). Writes to one peer may land out
  // of order (several streams).
  virtual void write(int peer, const void* src, uint64_t len, uint32_t remote_region,
                     uint64_t remote_offset, uint64_t imm, uint64_t cookie) = 0;
  // A small message (<= kMaxControl bytes), delivered in order.
  virtual void send_control(int peer, std::string_view msg) = 0;

  // Readable when poll() has something to do.
  virtual int event_fd() const = 0;
  // Runs everything that is ready, calling handlers; never blocks.
  virtual void poll() = 0;
  // For a caller that polls: whether poll() has something to do, told
  // without a system call. False where only event_fd can tell.
  virtual bool pending() const { return false; }
  // The caller looks at pending() every time round (on) or sleeps on
  // event_fd (off). While on, the provider may leave event_fd unsignalled
  // for work that pending() reports; set_polled(false) makes event_fd
  // readable if such work is waiting.
  virtual void set_polled(bool on) { (void)on; }
  // How often poll() must run even when event_fd says nothing (a polled
  // port with no receive interrupt: DPDK); zero: never. The caller runs it
  // from a timer, which (unlike an event) opens no polling window: an idle
  // daemon stays asleep between ticks.
  virtual std::chrono::microseconds tick() const { return {}; }

  // Membership that changes while the daemon runs ([cluster] etcd;
  // docs/membership.md). set_peer: host index `peer` is now info; the
  // table grows to hold it. The same host again (id, address, port, rack)
  // is left as it is, or let back in after drop_peer; a host whose
  // endpoint changed is dropped and let in anew. Its link comes up as any
  // other (on_peer_up). Index order is the cluster's order on every daemon
  // (the lower index connects), so the caller hands out indices that every
  // daemon agrees on. A provider that cannot change its table says so.
  virtual Status set_peer(int peer, const PeerInfo& info) {
    return {GSYNC_ERR_UNSUPPORTED,
            "cannot add host " + info.host_id + " at index " + std::to_string(peer) +
                ": links over " + summary() +
                " keep the hosts they started with; membership that changes (etcd) runs on the "
                "tcp transport"};
  }
  // The host left the cluster: its link goes down (on_peer_down with why;
  // its writes fail) and nobody reconnects until set_peer lets it back in.
  // Providers that cannot change their table keep the link.
  virtual void drop_peer(int peer, const Status& why) {
    (void)peer;
    (void)why;
  }

  virtual bool peer_up(int peer) const = 0;
  virtual PeerStats stats(int peer) const = 0;
  // What carries the links, for gsyncctl status ("tcp", "verbs within a rack
  // on rxe0 port 1, tcp otherwise", "tcp on every link: no RDMA device (...)").
  virtual std::string summary() const { return "tcp"; }
  virtual int self() const = 0;
  virtual int size() const = 0;  // hosts in the cluster, self included
};

// The largest control message: a 64 KiB tensor and the op header that goes
// with it (the small-message algorithms send tensors up to 64 KiB inside
// their control messages, docs/algorithms.md).
constexpr size_t kMaxControl = (64 << 10) + 1024;

// The TCP provider on io_uring.
std::unique_ptr<Context> make_tcp_context(const ContextOptions& options, Status* err);

// The DPDK context ([cluster] transport = "dpdk", builds with DPDK):
// inside a rack the links run over the DPDK port where both ends have one,
// TCP otherwise; without a usable port every link is TCP unless
// options.dpdk.required. make_context calls it when options.dpdk.wanted.
std::unique_ptr<Context> make_dpdk_context(const ContextOptions& options, Status* err);

// The verbs provider when prefer_verbs and a usable RDMA device exists
// (libibverbs lists it, the port is active, a GID fits, the context comes
// up), else the TCP provider; which one and why is logged once. Fails only
// where TCP fails, or where options.verbs.required and verbs is unusable.
// With options.dpdk.wanted, the DPDK context instead.
std::unique_ptr<Context> make_context(const ContextOptions& options, bool prefer_verbs,
                                      Status* err);

}  // namespace gsync::transport
