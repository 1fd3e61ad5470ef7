// SPDX-License-Identifier: Apache-2.0
//
// What a test bed asks the system while it builds and watches the hosts:
// whether a daemon listens (unix socket, TCP port, in a namespace), whether
// a host answers, which loopback ports are free, and the namespaces' own
// processes.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "daemon/core/status.h"

namespace gsync::testbed {

// Whether a unix socket bound to path is listening in pid's network
// namespace.
bool unix_listening(pid_t pid, const std::string& path);
// Whether a TCP socket listens on port in netns ("" = ours).
bool listens_on(const std::string& netns, uint16_t port);
// "" when addr:port answers (connected or refused) within timeout_ms, else why not.
std::string tcp_probe(const std::string& addr, uint16_t port, int timeout_ms);
// n free loopback ports below the ephemeral range, none of *taken (which
// they join); seed spreads concurrent callers over the range.
Status pick_loopback_ports(int n, unsigned seed, std::set<uint16_t>* taken,
                           std::vector<uint16_t>* out);
std::vector<pid_t> netns_pids(const std::string& ns);
// Deletes a namespace after SIGKILLing what still runs in it.
Status delete_netns(const std::string& ns);

}  // namespace gsync::testbed
