// SPDX-License-Identifier: Apache-2.0
//
// gsyncctl: asks a running gsyncd for its status, jobs or clients over the
// admin socket and prints the reply as text (or as JSON with --json); and
// `gsyncctl keygen -o PATH` makes a new cluster key file (docs/security.md).
//
// Exit status: 0 ok; 1 the daemon answered with an error; 2 the daemon could
// not be reached or its reply was not understood; 64 bad command line; 73
// keygen could not create the key file.

#include <CLI/CLI.hpp>
#include <chrono>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <string>

#include "daemon/cluster/cluster_key.h"
#include "gsync_build_config.h"
#include "tools/gsyncctl/admin_client.h"
#include "tools/gsyncctl/render.h"
#include "tools/gsyncctl/trace.h"

namespace {

constexpr const char* kDefaultAdminSocket = "/run/gsync/gsyncd-admin.sock";
constexpr int kExitDaemonError = 1;
constexpr int kExitUnreachable = 2;
constexpr int kExitUsage = 64;       // EX_USAGE, sysexits(3)
constexpr int kExitCantCreate = 73;  // EX_CANTCREAT
constexpr int kDefaultTimeoutMs = 10000;

struct Command {
  const char* name;
  const char* help;
  std::string (*render)(const nlohmann::json&);
};

constexpr Command kCommands[] = {
    {"status", "daemon summary and the configuration in force", gsync::cli::render_status},
    {"jobs", "jobs with their ranks, operations and throughput", gsync::cli::render_jobs},
    {"clients", "connected client sessions (one per rank process)", gsync::cli::render_clients},
    {"peers", "the cluster's other daemons: state, address, rack, transport, traffic",
     gsync::cli::render_peers},
    {"ops", "ops in flight (who has not arrived, what they wait for) and recent timelines",
     gsync::cli::render_ops},
};

// Never prints the key: it goes to the file alone.
int keygen(const std::string& path) {
  if (gsync::Status st = gsync::create_cluster_key(path); !st) {
    std::fprintf(stderr, "gsyncctl keygen: %s\n", st.message().c_str());
    return kExitCantCreate;
  }
  std::printf(
      "gsyncctl keygen: wrote a new cluster key to %s (mode 0600). Copy it to every host of "
      "the cluster, readable only by the daemon's user, set [cluster] key_file (or "
      "--cluster-key) and restart every daemon.\n",
      path.c_str());
  return std::fflush(stdout) == 0 ? 0 : kExitCantCreate;
}

// gsyncctl trace: every daemon's `ops`, then one file.
int write_trace(const std::vector<std::string>& sockets, const std::string& out,
                const std::string& job, double seconds, int timeout_ms) {
  std::vector<gsync::cli::TraceSource> sources;
  for (const std::string& s : sockets) {
    std::string reply, error;
    if (!gsync::cli::admin_query(s, "ops", std::chrono::milliseconds(timeout_ms), &reply, &error)) {
      std::fprintf(stderr, "gsyncctl: %s\n", error.c_str());
      return kExitUnreachable;
    }
    nlohmann::json j = nlohmann::json::parse(reply, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) {
      std::fprintf(stderr, "gsyncctl: the reply from %s to \"ops\" is not a JSON object\n",
                   s.c_str());
      return kExitUnreachable;
    }
    sources.push_back({s, std::move(j)});
  }
  size_t ops = 0;
  const std::string text =
      gsync::cli::chrome_trace(sources, job, seconds, &ops)
          .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) +
      "\n";
  FILE* f = std::fopen(out.c_str(), "w");
  if (!f || std::fwrite(text.data(), 1, text.size(), f) != text.size() || std::fclose(f) != 0) {
    std::fprintf(stderr, "gsyncctl: cannot write %s: %s\n", out.c_str(), std::strerror(errno));
    return kExitCantCreate;
  }
  std::printf("%s: %zu ops of %zu daemon%s (open it in ui.perfetto.dev or chrome://tracing)\n",
              out.c_str(), ops, sources.size(), sources.size() == 1 ? "" : "s");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"gsyncctl: inspect a running gsyncd over its admin socket"};
  app.set_version_flag("--version", GSYNC_VERSION_STRING);
  std::string socket_path = kDefaultAdminSocket;
  bool as_json = false;
  int timeout_ms = kDefaultTimeoutMs;
  app.add_option("-s,--socket", socket_path, "admin socket of the daemon")
      ->envname("GSYNC_ADMIN_SOCKET")
      ->capture_default_str();
  app.add_flag("--json", as_json, "print the daemon's JSON reply (pretty-printed)");
  app.add_option("--timeout-ms", timeout_ms, "give up when the daemon has not answered by then")
      ->capture_default_str()
      ->check(CLI::Range(1, 3600 * 1000));
  // Global options may also follow the command: "gsyncctl status --json".
  app.fallthrough();
  app.require_subcommand(1);
  bool stragglers = false;
  for (const Command& c : kCommands) {
    CLI::App* sub = app.add_subcommand(c.name, c.help);
    if (std::string(c.name) == "jobs")
      sub->add_flag("--stragglers", stragglers,
                    "every rank's arrival lag behind the first (median, p99) and share of ops "
                    "it came last to");
  }
  std::string key_path;
  CLI::App* keygen_cmd =
      app.add_subcommand("keygen", "write a new random cluster key to a file (mode 0600)");
  keygen_cmd->add_option("-o,--output", key_path, "the key file to create (never overwritten)")
      ->required();
  std::string trace_out, trace_job;
  double trace_seconds = 0;
  std::vector<std::string> trace_sockets;
  CLI::App* trace_cmd = app.add_subcommand(
      "trace", "write the recent ops of one or more daemons as a Chrome trace / Perfetto file");
  trace_cmd->add_option("-o,--output", trace_out, "the trace file (JSON)")->required();
  trace_cmd->add_option("--job", trace_job, "only this job's ops");
  trace_cmd->add_option("--seconds", trace_seconds, "only ops that ended in the last N seconds");
  trace_cmd->add_option("sockets", trace_sockets,
                        "admin sockets of the daemons to draw (default: --socket)");
  std::string checkpoint_job;
  CLI::App* checkpoint_cmd = app.add_subcommand(
      "checkpoint", "ask every shard of a parameter-server job for a checkpoint now");
  checkpoint_cmd->add_option("job", checkpoint_job, "the job id")->required();

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : kExitUsage;
  }

  if (keygen_cmd->parsed()) return keygen(key_path);
  if (trace_cmd->parsed()) {
    if (trace_sockets.empty()) trace_sockets.push_back(socket_path);
    return write_trace(trace_sockets, trace_out, trace_job, trace_seconds, timeout_ms);
  }
  std::string name = app.get_subcommands().front()->get_name();
  const Command* command = nullptr;
  std::string request = name;
  if (checkpoint_cmd->parsed()) request = "checkpoint " + checkpoint_job;
  for (const Command& c : kCommands) {
    if (name == c.name) command = &c;
  }

  std::string reply_text, error;
  if (!gsync::cli::admin_query(socket_path, request, std::chrono::milliseconds(timeout_ms),
                               &reply_text, &error)) {
    std::fprintf(stderr, "gsyncctl: %s\n", error.c_str());
    return kExitUnreachable;
  }
  nlohmann::json reply = nlohmann::json::parse(reply_text, nullptr, /*allow_exceptions=*/false);
  if (reply.is_discarded() || !reply.is_object()) {
    std::fprintf(stderr, "gsyncctl: the reply from %s to \"%s\" is not a JSON object: %.200s\n",
                 socket_path.c_str(), name.c_str(), reply_text.c_str());
    return kExitUnreachable;
  }
  if (auto it = reply.find("error"); it != reply.end()) {
    std::string message = it->is_string() ? it->get<std::string>() : it->dump();
    std::fprintf(stderr, "gsyncctl: gsyncd (%s): %s\n", socket_path.c_str(), message.c_str());
    return kExitDaemonError;
  }

  std::string out;
  if (as_json)
    out = reply.dump(2) + "\n";
  else if (command && stragglers)
    out = gsync::cli::render_stragglers(reply);
  else if (command)
    out = command->render(reply);
  else  // checkpoint
    out = fmt::format("job {}: {}\n", checkpoint_job, reply.value("requested", std::string()));
  std::fputs(out.c_str(), stdout);
  // A closed pipe or full disk must not look like success to a script.
  if (std::fflush(stdout) != 0) return kExitUnreachable;
  return 0;
}
