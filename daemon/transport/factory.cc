// SPDX-License-Identifier: Apache-2.0
//
// make_context. Every context it makes speaks one protocol, the peering context's
// (docs/transport.md, "The peering context"): a TCP bootstrap link to
// each peer, the capability message first, then a link kind chosen per
// peer. Built with libibverbs (config.h's GSYNC_HAVE_VERBS) and
// prefer_verbs, it is the verbs context: with a usable RDMA device it picks
// verbs or TCP per peer (same rack and a device on both ends); without one
// it offers no verbs to any peer. Where verbs is not asked for (transport
// "tcp"), or the build has no libibverbs, it is the peering context with no fast
// link kind: every link over TCP, and still the same protocol, so daemons
// of every transport setting talk to each other. Which, and why, is said
// once in the log; the daemon always calls this one function.
#include <dlfcn.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "daemon/transport/transport.h"
#include "gsync_build_config.h"

#if GSYNC_HAVE_VERBS
#include "daemon/transport/verbs/context.h"
#endif
#include "daemon/transport/peering/context.h"

#if GSYNC_HAVE_DPDK
#include "daemon/transport/dpdk/plugin_abi.h"
#endif

namespace gsync::transport {

#if GSYNC_HAVE_DPDK
// Linked into the program (the provider's tests, bench_dpdk), the provider
// is called directly; gsyncd does not link it and loads the plugin.
[[gnu::weak]] std::unique_ptr<Context> make_dpdk_context(const ContextOptions& options,
                                                         Status* err);

namespace {

using PluginMake = Context* (*)(const ContextOptions*, Status*);
using PluginAbi = const char* (*)();
constexpr const char* kPluginFile = "gsync-transport-dpdk.so";

// Where the plugin may be: $GSYNC_PLUGIN_DIR alone when set; else beside
// a gsyncd that runs from its build tree (build/daemon/gsyncd,
// build/daemon/transport/), then where it installs (GSYNC_PLUGIN_DIR:
// <libdir>/gsync).
std::vector<std::string> plugin_paths() {
  std::vector<std::string> out;
  if (const char* dir = std::getenv("GSYNC_PLUGIN_DIR"); dir != nullptr && *dir != 0) {
    out.push_back(std::string(dir) + "/" + kPluginFile);
    return out;
  }
  char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n > 0) {
    std::string self(exe, size_t(n));
    out.push_back(self.substr(0, self.rfind('/')) + "/transport/" + kPluginFile);
  }
  out.push_back(std::string(GSYNC_PLUGIN_DIR) + "/" + kPluginFile);
  return out;
}

// The plugin's entry point, loaded once; null with *why naming every
// place looked and what each said.
PluginMake load_plugin(std::string* why) {
  static PluginMake make = nullptr;
  static std::string failed;
  if (make != nullptr || !failed.empty()) {
    *why = failed;
    return make;
  }
  std::string tried;
  for (const std::string& path : plugin_paths()) {
    if (access(path.c_str(), F_OK) != 0) {
      tried += fmt::format("{}{}: absent", tried.empty() ? "" : "; ", path);
      continue;
    }
    void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) {
      tried += fmt::format("{}{}: {}", tried.empty() ? "" : "; ", path, dlerror());
      continue;
    }
    auto abi = reinterpret_cast<PluginAbi>(dlsym(h, "gsync_transport_dpdk_abi"));
    auto fn = reinterpret_cast<PluginMake>(dlsym(h, "gsync_transport_dpdk_make"));
    const std::string want = dpdk_plugin_abi();
    if (abi == nullptr || fn == nullptr || want != abi()) {
      tried += fmt::format("{}{}: from another build (it says '{}', this gsyncd '{}')",
                           tried.empty() ? "" : "; ", path, abi != nullptr ? abi() : "nothing",
                           want);
      dlclose(h);
      continue;
    }
    spdlog::info("transport: DPDK provider from {}", path);
    make = fn;
    return make;
  }
  failed = fmt::format("the DPDK provider is not installed (package gsyncd-dpdk; {})", tried);
  *why = failed;
  return nullptr;
}

std::unique_ptr<Context> dpdk_context(const ContextOptions& options, Status* err,
                                      std::string* why) {
  if (make_dpdk_context) return make_dpdk_context(options, err);
  PluginMake make = load_plugin(why);
  if (make == nullptr) return nullptr;
  return std::unique_ptr<Context>(make(&options, err));
}

}  // namespace
#endif

namespace {
// The peering context with no fast link kind: every link over its TCP context,
// offering none to any peer (why: in the log and in each CAPS).
std::unique_ptr<Context> tcp_only(const ContextOptions& options, const std::string& why,
                                  Status* err) {
  std::unique_ptr<peering::PeeringContext> c;
  Status st = peering::PeeringContext::create(options, nullptr, why, &c);
  if (err != nullptr) *err = st;
  if (!st) return nullptr;
  spdlog::info("transport: tcp ({}) on every link", why);
  return c;
}
}  // namespace

std::unique_ptr<Context> make_context(const ContextOptions& options, bool prefer_verbs,
                                      Status* err) {
  if (options.dpdk.wanted) {
#if GSYNC_HAVE_DPDK
    std::string why;
    if (auto c = dpdk_context(options, err, &why); c != nullptr || why.empty()) return c;
#else
    std::string why = "built without DPDK (meson feature dpdk)";
#endif
    if (options.dpdk.required) {
      if (err != nullptr)
        *err = Status(GSYNC_ERR_UNSUPPORTED,
                      fmt::format("transport dpdk is required but unusable: {}", why));
      return nullptr;
    }
    // The peering context's protocol with no fast link, so daemons with DPDK
    // still talk to this one.
    spdlog::warn("transport: dpdk is unusable here: {}", why);
    return tcp_only(options, why, err);
  }
  if (!prefer_verbs) return tcp_only(options, "verbs not asked for", err);
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
  return tcp_only(options, why, err);
#endif
}

}  // namespace gsync::transport
