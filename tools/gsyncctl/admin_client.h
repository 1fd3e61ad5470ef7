// SPDX-License-Identifier: Apache-2.0
//
// The client side of gsyncd's admin protocol: connect to the unix stream
// socket, write one command line ("status\n"), read the reply until the
// daemon closes (one JSON document). See daemon/admin/admin_server.h.
#pragma once

#include <chrono>
#include <string>

namespace gsync::cli {

// Sends command and stores the whole reply in *reply. On failure returns
// false and sets *error to a sentence naming the socket path and the errno
// text. A reply not complete within timeout is a failure, so a wedged daemon
// cannot hang scripts that call gsyncctl.
bool admin_query(const std::string& socket_path, const std::string& command,
                 std::chrono::milliseconds timeout, std::string* reply, std::string* error);

}  // namespace gsync::cli
