// SPDX-License-Identifier: Apache-2.0
//
// Device memory a client shares with the daemon (protocol/device.h): the
// requests that come on its socket after the hello, checked here, and the
// session's table of mapped allocations they change. Nothing in a request
// is trusted: a malformed one gets an error reply naming what is wrong, and
// the session goes on.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "daemon/core/status.h"
#include "daemon/shm/session.h"
#include "protocol/device.h"

namespace gsync {

class Worker;

// The most allocations one session may have mapped at once.
constexpr size_t kMaxDeviceAllocations = 1024;

// The checks on the n bytes of one received message: its size, magic and
// kind, the allocation id's range, a registration's size (1 byte to 1 TiB)
// and NUL-terminated PCI bus id. A status naming the first failure.
Status parse_device_request(const void* msg, size_t n, proto::DeviceRequest* out);

// Carries out a checked request for s and answers it through reply, once.
// A release, or a registration its checks refuse, is answered before this
// returns. A registration that passes them imports fd (the allocation's
// POSIX fd handle, -1 when the message carried none; not taken: the
// caller closes it, a copy travels) and maps it on worker's thread (null:
// inline), since the first import on a GPU also makes the daemon's context
// there; reply then runs on the event thread when it is done, and the
// allocation is entered in the session's table only if the session is
// still open. A release drops the session's reference (ops still running
// over it keep theirs); the last reference's unmap runs on worker's thread.
using DeviceReplyFn = std::function<void(const proto::DeviceReply&)>;
void handle_device_request(const std::shared_ptr<Session>& s, const proto::DeviceRequest& r,
                           int fd, Worker* worker, DeviceReplyFn reply);

// The reply to a request with this id and seq (of a message too short to
// have them: 0).
proto::DeviceReply device_reply(uint64_t alloc_id, uint64_t seq, const Status& st);
// The alloc_id and seq of a message of n bytes, as far as it has them.
void request_ids(const void* msg, size_t n, uint64_t* alloc_id, uint64_t* seq);

}  // namespace gsync
