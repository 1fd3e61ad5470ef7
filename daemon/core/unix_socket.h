// SPDX-License-Identifier: Apache-2.0
//
// The listening unix sockets of the daemon (clients, admin).
#pragma once

#include <string>

#include "daemon/core/status.h"

namespace gsync {

// Binds a unix socket at path (replacing a stale socket file, never another
// kind of file), listens, and sets mode on it. Returns the fd or -1 + *err.
int listen_unix(const std::string& path, int type, unsigned mode, Status* err);

}  // namespace gsync
