// SPDX-License-Identifier: Apache-2.0
//
// Socket-level pieces of the client handshake: listening sockets, reading
// the peer's credentials, reading a hello, sending the reply with the
// session's fds. The decisions (who may join what) are the daemon's.
#pragma once

#include <string>
#include <vector>

#include "daemon/core/status.h"
#include "daemon/core/unix_socket.h"
#include "daemon/shm/session.h"
#include "protocol/wire.h"

namespace gsync {

// Who a client says it is in its hello: the job and its place in it.
struct JoinRequest {
  std::string job_id;
  int world_size = 0, rank = -1, local_rank = -1, local_size = 0;
  uint32_t sync = 0;  // as the hello carried it (protocol/ps.h), not yet checked
  uint32_t guard = 0;  // as the hello carried it (protocol/guard.h), not yet checked
  uint32_t plan = 0;   // as the hello carried it (protocol/plan_choice.h), not yet checked
  int min_hosts = 0, max_hosts = 0;  // an elastic job's (min_hosts > 0)
};

// SO_PEERCRED of a connected unix socket.
bool peer_credentials(int fd, Peer* peer);

// Reads one hello. Refuses short messages, bad magic and other versions
// with a status whose message names both versions.
Status read_hello(int fd, proto::HelloRequest* hello);
// The checks of read_hello on the n bytes of one received message (n may
// exceed sizeof *hello: a client that sent more is refused).
Status parse_hello(const void* msg, size_t n, proto::HelloRequest* hello);

// Who a checked hello says the client is.
JoinRequest join_request(const proto::HelloRequest& hello);

// Sends the reply; with fds (status 0) they travel by SCM_RIGHTS.
bool send_reply(int fd, const proto::HelloReply& reply, const std::vector<int>& fds);

// The reply that refuses a client; its message is st's, made printable
// (text.h) and cut to the field.
proto::HelloReply refusal(const Status& st);

}  // namespace gsync
