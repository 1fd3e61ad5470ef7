// SPDX-License-Identifier: Apache-2.0
//
// Socket-level pieces of the client handshake: listening sockets, reading
// the peer's credentials, reading a hello, sending the reply with the
// session's fds. The decisions (who may join what) are the daemon's.
#pragma once

#include <string>
#include <vector>

#include "daemon/core/status.h"
#include "daemon/shm/session.h"
#include "protocol/wire.h"

namespace gsync {

// Binds a unix socket at path (replacing a stale socket file, never another
// kind of file), listens, and sets mode on it. Returns the fd or -1 + *err.
int listen_unix(const std::string& path, int type, unsigned mode, Status* err);

// SO_PEERCRED of a connected unix socket.
bool peer_credentials(int fd, Peer* peer);

// Reads one hello. Refuses short messages, bad magic and other versions
// with a status whose message names both versions.
Status read_hello(int fd, proto::HelloRequest* hello);

// Sends the reply; with fds (status 0) they travel by SCM_RIGHTS.
bool send_reply(int fd, const proto::HelloReply& reply, const std::vector<int>& fds);

proto::HelloReply refusal(const Status& st);

}  // namespace gsync
