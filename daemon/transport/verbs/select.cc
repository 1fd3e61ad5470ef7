// SPDX-License-Identifier: Apache-2.0
//
// make_context: verbs where an RDMA device is usable, else TCP, said once
// in the log with the reason. Built with or without libibverbs (config.h's
// GSYNC_HAVE_VERBS), so the daemon always calls this one function.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "daemon/transport/transport.h"
#include "gsync_build_config.h"

#if GSYNC_HAVE_VERBS
#include "daemon/transport/verbs/context.h"
#endif

namespace gsync::transport {

std::unique_ptr<Context> make_context(const ContextOptions& options, bool prefer_verbs,
                                      Status* err) {
  std::string why;
  if (!prefer_verbs) {
    why = "verbs not asked for";
  } else {
#if GSYNC_HAVE_VERBS
    std::unique_ptr<verbs::VerbsContext> v;
    Status st = verbs::VerbsContext::create(options, &v);
    if (st) {
      const auto& c = v->device().choice();
      spdlog::info("transport: verbs on {} port {} GID[{}] {} ({})", c.device, c.port, c.gid_index,
                   c.gid_text, c.gid_type);
      if (err != nullptr) *err = Status::ok();
      return v;
    }
    why = st.message();
#else
    why = "built without libibverbs";
#endif
    if (options.verbs.required) {
      if (err != nullptr)
        *err = Status(GSYNC_ERR_UNSUPPORTED,
                      fmt::format("transport verbs is required but unusable: {}", why));
      return nullptr;
    }
  }
  spdlog::info("transport: tcp ({})", why);
  return make_tcp_context(options, err);
}

}  // namespace gsync::transport
