// SPDX-License-Identifier: Apache-2.0
//
// make_context. Built with libibverbs (config.h's GSYNC_HAVE_VERBS) and
// prefer_verbs, it is always the verbs context: with a usable RDMA device it
// picks verbs or TCP per peer (same rack and a device on both ends); without
// one it offers no verbs to any peer and carries every link over its
// internal TCP context, so daemons with and without a device speak the same
// protocol. Which, and why, is said once in the log. The plain TCP context
// where verbs is not asked for, or the build has no libibverbs; the daemon
// always calls this one function.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "daemon/transport/transport.h"
#include "gsync_build_config.h"

#if GSYNC_HAVE_VERBS
#include "daemon/transport/verbs/context.h"
#endif
#include "daemon/transport/composite/context.h"

namespace gsync::transport {

std::unique_ptr<Context> make_context(const ContextOptions& options, bool prefer_verbs,
                                      Status* err) {
  if (options.dpdk.wanted) {
#if GSYNC_HAVE_DPDK
    return make_dpdk_context(options, err);
#else
    std::string why = "built without DPDK (meson feature dpdk)";
    if (options.dpdk.required) {
      if (err != nullptr)
        *err = Status(GSYNC_ERR_UNSUPPORTED,
                      fmt::format("transport dpdk is required but unusable: {}", why));
      return nullptr;
    }
    // The composite's protocol with no fast link, so daemons with DPDK
    // still talk to this one.
    std::unique_ptr<composite::CompositeContext> c;
    Status st = composite::CompositeContext::create(options, nullptr, why, &c);
    if (err != nullptr) *err = st;
    if (!st) return nullptr;
    spdlog::warn("transport: tcp on every link ({})", why);
    return c;
#endif
  }
  if (!prefer_verbs) {
    spdlog::info("transport: tcp (verbs not asked for)");
    return make_tcp_context(options, err);
  }
#if GSYNC_HAVE_VERBS
  std::unique_ptr<verbs::VerbsContext> v;
  Status st = verbs::VerbsContext::create(options, &v, !options.verbs.required);
  if (!st) {
    if (err != nullptr)
      *err = options.verbs.required
                 ? Status(GSYNC_ERR_UNSUPPORTED,
                          fmt::format("transport verbs is required but unusable: {}", st.message()))
                 : st;
    return nullptr;
  }
  if (v->has_device()) {
    const auto& c = v->device().choice();
    spdlog::info("transport: verbs on {} port {} GID[{}] {} ({}) for peers in rack '{}' that "
                 "have a device too, tcp for the others (each link is named once it is up)",
                 c.device, c.port, c.gid_index, c.gid_text, c.gid_type,
                 options.hosts[size_t(options.self)].rack);
  } else {
    spdlog::info("transport: tcp ({}) on every link: no usable RDMA device here (the verbs "
                 "transport's protocol, offering no verbs link to peers)",
                 v->no_device_reason());
  }
  if (err != nullptr) *err = Status::ok();
  return v;
#else
  std::string why = "built without libibverbs";
  if (options.verbs.required) {
    if (err != nullptr)
      *err = Status(GSYNC_ERR_UNSUPPORTED,
                    fmt::format("transport verbs is required but unusable: {}", why));
    return nullptr;
  }
  spdlog::info("transport: tcp ({})", why);
  return make_tcp_context(options, err);
#endif
}

}  // namespace gsync::transport
