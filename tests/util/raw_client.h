// SPDX-License-Identifier: Apache-2.0
//
// A client that speaks the wire protocol by hand, without libgsync, so tests
// can send what the library never would: other versions, short hellos,
// garbage ring entries, corrupt ring indices.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "protocol/device.h"
#include "protocol/wire.h"

namespace gsync::test {

class RawClient {
 public:
  ~RawClient();
  // Connects and sends hello as given (len bytes of it). Returns the reply.
  bool connect_raw(const std::string& socket, const void* hello, size_t len,
                   proto::HelloReply* reply);
  // A well-formed hello for job/world/rank; then maps the shared memory.
  bool connect(const std::string& socket, const std::string& job, int world, int rank,
               proto::HelloReply* reply);
  static proto::HelloRequest hello(const std::string& job, int world, int rank);

  // Writes e at the ring tail and publishes it (and rings the doorbell).
  void submit(const proto::SubmitEntry& e);
  // Waits up to timeout_ms for one completion.
  bool next_completion(proto::CompleteEntry* out, int timeout_ms);
  // True once the daemon has closed our socket.
  bool closed_by_daemon(int timeout_ms);
  // Sends len bytes on the socket (with fds by SCM_RIGHTS) and waits up to
  // timeout_ms for the device memory reply (protocol/device.h).
  bool device_request(const void* msg, size_t len, const std::vector<int>& fds,
                      proto::DeviceReply* reply, int timeout_ms);
  // Its two halves, for a client that sends several before it reads.
  bool send_device_request(const void* msg, size_t len, const std::vector<int>& fds);
  bool device_reply(proto::DeviceReply* reply, int timeout_ms);

  proto::ShmHeader* header() { return reinterpret_cast<proto::ShmHeader*>(base_); }
  uint8_t* arena() { return base_ + header()->arena_offset; }
  void ring_doorbell();

 private:
  int sock_ = -1, memfd_ = -1, sq_efd_ = -1, cq_efd_ = -1;
  uint8_t* base_ = nullptr;
  uint64_t bytes_ = 0;
};

}  // namespace gsync::test
