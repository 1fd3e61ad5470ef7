// SPDX-License-Identifier: Apache-2.0
//
// What the TCP provider owns once per daemon: the io_uring ring every socket
// operation goes through, the eventfd the ring signals on each completion
// (Context::event_fd), and the listening socket. Acquired in that order in
// create(), released in reverse in the destructor.
#pragma once

#include <liburing.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "daemon/core/status.h"

namespace gsync::transport::tcp {

// What a completion is for. A CQE's user_data is an 8-byte aligned owner
// pointer (a Connection, or null for the context's own operations) with the
// op in the low 3 bits.
enum class Op : uint8_t {
  kIgnore = 0,  // cancels, timer updates: nothing to do when they complete
  kRecv = 1,
  kSend = 2,
  kConnect = 3,
  kLinkTimeout = 4,
  kCancel = 5,  // a cancel aimed at a connection's own operations
  kAccept = 6,
  kTimer = 7,
};

inline uint64_t make_tag(const void* owner, Op op) {
  return reinterpret_cast<uint64_t>(owner) | static_cast<uint64_t>(op);
}
inline Op tag_op(uint64_t tag) { return static_cast<Op>(tag & 7); }
template <typename T>
T* tag_owner(uint64_t tag) {
  return reinterpret_cast<T*>(tag & ~uint64_t{7});
}

struct Completion {
  uint64_t tag;
  int32_t res;
  uint32_t flags;
};

// A resolved socket address and its printable form ("10.0.0.1:7700").
struct Endpoint {
  sockaddr_storage addr{};
  socklen_t len = 0;
  std::string text;
};

Status resolve(const std::string& address, uint16_t port, Endpoint* out);
std::string endpoint_text(const sockaddr* sa, socklen_t len);

// TCP_NODELAY (frames are whole messages; Nagle would hold back the last
// piece of every write), SO_KEEPALIVE as a backstop to heartbeats, and
// buffer_bytes of socket buffers each way (0: the kernel's autotuning). The
// kernel doubles the value and caps it at net.core.{w,r}mem_max; Device
// reports what it granted.
Status tune_socket(int fd, int buffer_bytes);

class Device {
 public:
  static Status create(const std::string& listen_address, uint16_t port, int buffer_bytes,
                       std::unique_ptr<Device>* out);
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  // An SQE whose completion carries tag; never null (submits to make room).
  // Every SQE not tagged kIgnore counts in outstanding() until its
  // completion has been taken with next().
  io_uring_sqe* sqe(uint64_t tag);
  // Makes room for n SQEs that must go to the kernel in one submission
  // (a linked connect + timeout).
  void reserve(unsigned n);
  void submit();

  // The next completion, if one is ready.
  bool next(Completion* c);
  // Blocks up to timeout_ms for any completion; for the destructor's drain.
  void wait_any(int timeout_ms);
  int outstanding() const { return outstanding_; }

  int event_fd() const { return event_fd_; }
  // Resets event_fd before the completions are looked at, so that one
  // posted after this makes it readable again.
  void drain_event_fd();
  // Makes event_fd readable: work is waiting that no completion announces.
  void notify();
  // While the caller harvests completions itself the ring posts them without
  // signalling event_fd (IORING_CQ_EVENTFD_DISABLED): a send or recv that a
  // submit completes inline would otherwise wake the event loop once more,
  // for nothing. quiet(false) signals if a completion arrived meanwhile.
  void quiet(bool on);
  // A completion is posted: what a polling caller looks at instead of
  // event_fd. Reads only the rings' shared memory.
  bool ready() const;

  int listen_fd() const { return listen_fd_; }
  const Endpoint& listen_endpoint() const { return listen_; }
  int granted_sndbuf() const { return granted_sndbuf_; }
  int granted_rcvbuf() const { return granted_rcvbuf_; }

 private:
  Device() = default;
  void account(uint64_t tag);

  io_uring ring_{};
  bool ring_ok_ = false;
  int event_fd_ = -1;
  int listen_fd_ = -1;
  Endpoint listen_;
  int granted_sndbuf_ = 0, granted_rcvbuf_ = 0;
  int outstanding_ = 0;
  bool quiet_ = false;
};

}  // namespace gsync::transport::tcp
