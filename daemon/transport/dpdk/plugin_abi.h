// SPDX-License-Identifier: Apache-2.0
//
// What gsyncd and its DPDK plugin (plugin.cc) must agree on: the build's
// version and the size of each type that crosses between them. A plugin of
// another build says another string, and gsyncd does not call it.
#pragma once

#include <fmt/format.h>

#include <string>

#include "daemon/transport/transport.h"
#include "gsync_build_config.h"

namespace gsync::transport {

inline std::string dpdk_plugin_abi() {
  return fmt::format("gsync {}; ContextOptions {} B, Status {} B, Context {} B",
                     GSYNC_VERSION_STRING, sizeof(ContextOptions), sizeof(Status),
                     sizeof(Context));
}

}  // namespace gsync::transport
