// SPDX-License-Identifier: Apache-2.0
//
// make_context: the verbs context where an RDMA device is usable (it then
// picks verbs or TCP per peer: same rack and a device on both ends), else
// the plain TCP context, said once in the log with the reason. Built with or without libibverbs (config.h's
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
      spdlog::info("transport: verbs on {} port {} GID[{}] {} ({}) for peers in rack '{}' that "
                   "have a device too, tcp for the others (each link is named once it is up)",
                   c.device, c.port, c.gid_index, c.gid_text, c.gid_type,
                   options.hosts[size_t(options.self)].rack);
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
