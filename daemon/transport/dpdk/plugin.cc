// SPDX-License-Identifier: Apache-2.0
//
// The DPDK provider as a plugin (gsync-transport-dpdk.so): the two entry
// points make_context (factory.cc) looks up after dlopen. The plugin is
// built from the same tree as gsyncd and shares its types (ContextOptions,
// Context, Status) through gsyncd's exported symbols, so both must come
// from one build: the ABI string carries the version and the layout of what
// crosses, and gsyncd refuses a plugin whose string is not its own.
#include "daemon/transport/dpdk/plugin_abi.h"
#include "daemon/transport/transport.h"

extern "C" {

__attribute__((visibility("default"))) const char* gsync_transport_dpdk_abi() {
  static const std::string abi = gsync::transport::dpdk_plugin_abi();
  return abi.c_str();
}

// The context, owned by the caller (released from make_dpdk_context's
// unique_ptr; gsyncd wraps it again), or null with *err set.
__attribute__((visibility("default"))) gsync::transport::Context* gsync_transport_dpdk_make(
    const gsync::transport::ContextOptions* options, gsync::Status* err) {
  return gsync::transport::make_dpdk_context(*options, err).release();
}

}  // extern "C"
