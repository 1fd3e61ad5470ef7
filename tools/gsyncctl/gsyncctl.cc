// SPDX-License-Identifier: Apache-2.0
//
// gsyncctl: asks a running gsyncd for its status, jobs or clients over the
// admin socket and prints the reply as text (or as JSON with --json);
// `gsyncctl keygen -o PATH` makes a new cluster key file (docs/security.md);
// `trace` and `report` write one or more daemons' replies to a file
// (trace.h, report.h).
//
// Exit status: 0 ok; 1 the daemon answered with an error; 2 the daemon could
// not be reached or its reply was not understood; 64 bad command line; 73
// keygen could not create the key file, or trace or report their file.

#include <CLI/CLI.hpp>
#include <chrono>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <unistd.h>
#include <utility>
#include <vector>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <string>

#include "daemon/cluster/cluster_key.h"
#include "gsync_build_config.h"
#include "tools/gsyncctl/admin_client.h"
#include "tools/gsyncctl/doctor.h"
#include "tools/gsyncctl/render.h"
#include "tools/gsyncctl/report.h"
#include "tools/gsyncctl/trace.h"
#include "tools/gsyncctl/trace_clock.h"
#include "tools/gsyncctl/tune.h"

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

// One admin reply as a JSON object, or the exit status that says why not
// (the message printed).
int query_json(const std::string& socket, const std::string& command, int timeout_ms,
               nlohmann::json* out) {
  std::string reply, error;
  if (!gsync::cli::admin_query(socket, command, std::chrono::milliseconds(timeout_ms), &reply,
                               &error)) {
    std::fprintf(stderr, "gsyncctl: %s\n", error.c_str());
    return kExitUnreachable;
  }
  *out = nlohmann::json::parse(reply, nullptr, /*allow_exceptions=*/false);
  if (out->is_discarded() || !out->is_object()) {
    std::fprintf(stderr, "gsyncctl: the reply from %s to \"%s\" is not a JSON object: %.200s\n",
                 socket.c_str(), command.c_str(), reply.c_str());
    return kExitUnreachable;
  }
  if (auto it = out->find("error"); it != out->end()) {
    std::string message = it->is_string() ? it->get<std::string>() : it->dump();
    std::fprintf(stderr, "gsyncctl: gsyncd (%s): %s\n", socket.c_str(), message.c_str());
    return kExitDaemonError;
  }
  return 0;
}

// A partly written file is removed: a page or trace cut short must not
// pass for a whole one.
int write_file(const std::string& path, const std::string& text) {
  FILE* f = std::fopen(path.c_str(), "w");
  int err = f ? 0 : errno;
  if (f && std::fwrite(text.data(), 1, text.size(), f) != text.size()) err = errno;
  if (f && std::fclose(f) != 0 && err == 0) err = errno;
  if (err == 0) return 0;
  if (f) std::remove(path.c_str());
  std::fprintf(stderr, "gsyncctl: cannot write %s: %s\n", path.c_str(), std::strerror(err));
  return kExitCantCreate;
}

// gsyncctl trace: every daemon's `ops`, the first one's `probe` when
// another is on a different host (trace_clock.h), then one file.
int write_trace(const std::vector<std::string>& sockets, const std::string& out,
                const std::string& job, double seconds, int timeout_ms) {
  std::vector<gsync::cli::TraceSource> sources;
  for (const std::string& s : sockets) {
    nlohmann::json j;
    if (int rc = query_json(s, "ops", timeout_ms, &j); rc != 0) return rc;
    sources.push_back({s, std::move(j)});
  }
  // A failed probe costs only the offsets: each daemon is drawn on its own
  // clock, and the file and the summary say why.
  nlohmann::json probe;
  if (gsync::cli::needs_probe(sources) &&
      query_json(sockets.front(), "probe", timeout_ms, &probe) != 0 && !probe.contains("error"))
    probe = {{"error", "no reply"}};
  const auto shifts = gsync::cli::clock_shifts(sources, probe);
  size_t ops = 0;
  const std::string text =
      gsync::cli::chrome_trace(sources, job, seconds, &ops, shifts)
          .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) +
      "\n";
  if (int rc = write_file(out, text); rc != 0) return rc;
  std::printf("%s: %zu ops of %zu daemon%s (open it in ui.perfetto.dev or chrome://tracing)\n%s",
              out.c_str(), ops, sources.size(), sources.size() == 1 ? "" : "s",
              gsync::cli::clock_summary(sources, shifts).c_str());
  return 0;
}

// "2026-12-02 12:20:31 UTC on host h1": where the report's page was made.
std::string made_when_and_where() {
  char when[64] = "?", host[256] = "?";
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  if (gmtime_r(&now, &utc)) std::strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", &utc);
  if (gethostname(host, sizeof host - 1) != 0) std::strcpy(host, "?");
  return fmt::format("made {} on {} by gsyncctl {}", when, host, GSYNC_VERSION_STRING);
}

// gsyncctl report: every daemon's status, jobs, peers and ops, then one page.
int write_report(const std::vector<std::string>& sockets, const std::string& out,
                 const std::string& job, int timeout_ms) {
  std::vector<gsync::cli::ReportSource> sources;
  for (const std::string& s : sockets) {
    gsync::cli::ReportSource src{s, {}, {}, {}, {}};
    for (auto [command, reply] : {std::pair{"status", &src.status}, std::pair{"jobs", &src.jobs},
                                  std::pair{"peers", &src.peers}, std::pair{"ops", &src.ops}})
      if (int rc = query_json(s, command, timeout_ms, reply); rc != 0) return rc;
    sources.push_back(std::move(src));
  }
  size_t jobs = 0;
  const std::string page = gsync::cli::html_report(sources, job, made_when_and_where(), &jobs);
  if (int rc = write_file(out, page); rc != 0) return rc;
  std::printf("%s: %zu job%s of %zu daemon%s (a static page: open it in any browser)\n",
              out.c_str(), jobs, jobs == 1 ? "" : "s", sources.size(),
              sources.size() == 1 ? "" : "s");
  return 0;
}

// gsyncctl trace and report: a file made from one or more daemons' replies.
struct FileCommand {
  CLI::App* cmd = nullptr;
  std::string out, job;
  double seconds = 0;  // trace only
  std::vector<std::string> sockets;
};

void add_file_commands(CLI::App& app, FileCommand* trace, FileCommand* report) {
  trace->cmd = app.add_subcommand(
      "trace", "write the recent ops of one or more daemons as a Chrome trace / Perfetto file");
  trace->cmd->add_option("-o,--output", trace->out, "the trace file (JSON)")->required();
  trace->cmd->add_option("--job", trace->job, "only this job's ops");
  trace->cmd->add_option("--seconds", trace->seconds, "only ops that ended in the last N seconds");
  trace->cmd->add_option("sockets", trace->sockets,
                         "admin sockets of the daemons to draw (default: --socket)");
  report->cmd = app.add_subcommand(
      "report", "write one static HTML page of one or more daemons' jobs, stragglers, slowest "
                "recent ops and peers");
  report->cmd->add_option("-o,--output", report->out, "the page (HTML)")->required();
  report->cmd->add_option("--job", report->job, "only this job");
  report->cmd->add_option("sockets", report->sockets,
                          "admin sockets of the daemons to show (default: --socket)");
}

void add_global_options(CLI::App& app, std::string* socket_path, bool* as_json, int* timeout_ms) {
  app.add_option("-s,--socket", *socket_path, "admin socket of the daemon")
      ->envname("GSYNC_ADMIN_SOCKET")
      ->capture_default_str();
  app.add_flag("--json", *as_json, "print the daemon's JSON reply (pretty-printed)");
  app.add_option("--timeout-ms", *timeout_ms, "give up when the daemon has not answered by then")
      ->capture_default_str()
      ->check(CLI::Range(1, 3600 * 1000));
  // Global options may also follow the command: "gsyncctl status --json".
  app.fallthrough();
  app.require_subcommand(1);
}

// What a query prints: the reply itself with --json, else its command's
// rendering; a checkpoint request (no command) one line.
std::string reply_text(const nlohmann::json& reply, const Command* command, bool as_json,
                       bool stragglers, const std::string& checkpoint_job) {
  if (as_json) return reply.dump(2) + "\n";
  if (command && stragglers) return gsync::cli::render_stragglers(reply);
  if (command) return command->render(reply);
  return fmt::format("job {}: {}\n", checkpoint_job, reply.value("requested", std::string()));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"gsyncctl: inspect a running gsyncd over its admin socket"};
  app.set_version_flag("--version", GSYNC_VERSION_STRING);
  std::string socket_path = kDefaultAdminSocket;
  bool as_json = false;
  int timeout_ms = kDefaultTimeoutMs;
  add_global_options(app, &socket_path, &as_json, &timeout_ms);
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
  FileCommand trace, report;
  add_file_commands(app, &trace, &report);
  std::string checkpoint_job;
  CLI::App* checkpoint_cmd = app.add_subcommand(
      "checkpoint", "ask every shard of a parameter-server job for a checkpoint now");
  checkpoint_cmd->add_option("job", checkpoint_job, "the job id")->required();
  gsync::cli::DoctorOptions doctor;
  CLI::App* doctor_cmd = app.add_subcommand(
      "doctor", "pre-flight checks of this host and its cluster, each ok, warn or fail with the "
                "fix; exit status 1 when one fails");
  doctor_cmd->add_option("--connect-timeout-ms", doctor.connect_timeout_ms,
                         "give up on a TCP connection to a peer after this long")
      ->capture_default_str()
      ->check(CLI::Range(1, 60000));
  gsync::cli::TuneCommand tune;
  gsync::cli::add_tune_command(app, &tune);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : kExitUsage;
  }

  if (keygen_cmd->parsed()) return keygen(key_path);
  if (doctor_cmd->parsed()) {
    doctor.socket = socket_path;
    doctor.timeout_ms = timeout_ms;
    return gsync::cli::run_doctor(doctor, as_json);
  }
  if (tune.cmd->parsed()) return gsync::cli::run_tune(tune, socket_path, timeout_ms);
  for (FileCommand* f : {&trace, &report})
    if (f->cmd->parsed() && f->sockets.empty()) f->sockets.push_back(socket_path);
  if (trace.cmd->parsed())
    return write_trace(trace.sockets, trace.out, trace.job, trace.seconds, timeout_ms);
  if (report.cmd->parsed()) return write_report(report.sockets, report.out, report.job, timeout_ms);
  std::string name = app.get_subcommands().front()->get_name();
  const Command* command = nullptr;
  std::string request = name;
  if (checkpoint_cmd->parsed()) request = "checkpoint " + checkpoint_job;
  for (const Command& c : kCommands) {
    if (name == c.name) command = &c;
  }

  nlohmann::json reply;
  if (int rc = query_json(socket_path, request, timeout_ms, &reply); rc != 0) return rc;

  const std::string out = reply_text(reply, command, as_json, stragglers, checkpoint_job);
  std::fputs(out.c_str(), stdout);
  // A closed pipe or full disk must not look like success to a script.
  if (std::fflush(stdout) != 0) return kExitUnreachable;
  return 0;
}
