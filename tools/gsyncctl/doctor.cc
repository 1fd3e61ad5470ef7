// SPDX-License-Identifier: Apache-2.0
#include "tools/gsyncctl/doctor.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>

#include <fmt/format.h>

#include "tools/gsyncctl/admin_client.h"
#include "tools/gsyncctl/host_checks.h"
#include "tools/gsyncctl/peer_checks.h"
#include "tools/gsyncctl/table.h"

namespace gsync::cli {

using nlohmann::json;

namespace {

// The daemon's reply to cmd as a JSON object; false with why when it did
// not answer, did not answer JSON, or answered an error.
bool ask(const DoctorOptions& o, const std::string& cmd, json* out, std::string* why) {
  std::string text;
  if (!admin_query(o.socket, cmd, std::chrono::milliseconds(o.timeout_ms), &text, why))
    return false;
  *out = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (out->is_discarded() || !out->is_object()) {
    *why = fmt::format("the reply to \"{}\" is not a JSON object: {:.200}", cmd, text);
    return false;
  }
  if (auto it = out->find("error"); it != out->end()) {
    *why = it->is_string() ? it->get<std::string>() : it->dump();
    return false;
  }
  return true;
}

uint64_t size_at(const json& status, const char* key, uint64_t otherwise) {
  if (!status.contains("config") || !status["config"].is_object()) return otherwise;
  const json& c = status["config"];
  if (!c.contains("limits") || !c["limits"].is_object()) return otherwise;
  const json& l = c["limits"];
  return l.contains(key) && l[key].is_number_unsigned() ? l[key].get<uint64_t>() : otherwise;
}

// The daemon's pid, when it is a gsyncd of this host's /proc (a daemon in
// another pid namespace reports a pid that means something else here).
pid_t daemon_pid(const json& status, const std::string& root) {
  if (!status.contains("pid") || !status["pid"].is_number_integer()) return 0;
  pid_t pid = status["pid"].get<pid_t>();
  std::string comm = read_small_file(fmt::format("{}/proc/{}/comm", root, pid));
  return pid > 0 && comm.rfind("gsyncd", 0) == 0 ? pid : 0;
}

Check daemon_check(const DoctorOptions& o, bool reached, const json& status,
                   const std::string& why) {
  if (!reached)
    return fail("daemon", why,
                "start it (`systemctl start gsyncd`), or name its admin socket with --socket "
                "or $GSYNC_ADMIN_SOCKET; the host's own checks below ran without it");
  return ok("daemon", fmt::format("gsyncd {} (pid {}, up {}) answers on {}; {}",
                                  status.value("version", std::string("?")),
                                  status.value("pid", 0),
                                  format_duration(status.value("uptime_s", 0.0)), o.socket,
                                  status.value("transport", std::string("?"))),
            json{{"version", status.value("version", std::string())},
                 {"pid", status.value("pid", 0)}});
}

void add_cluster_checks(const DoctorOptions& o, std::vector<Check>* out) {
  json peers, probe;
  std::string why;
  if (!ask(o, "peers", &peers, &why)) {
    out->push_back(fail("cluster", "the daemon did not report its peers: " + why,
                        "see the daemon's log (`journalctl -u gsyncd`)"));
    return;
  }
  if (peers["cluster"].is_null() || !peers["peers"].is_array() || peers["peers"].empty()) {
    out->push_back(ok("cluster", peers["cluster"].is_null()
                                     ? "single host (no [cluster] file): no peers to check"
                                     : "a cluster of this host alone: no peers to check"));
    return;
  }
  for (auto& c : reach_checks(peers, o.connect_timeout_ms)) out->push_back(std::move(c));
  for (auto& c : version_checks(peers)) out->push_back(std::move(c));
  if (!ask(o, "probe", &probe, &why)) {
    out->push_back(fail("probe", "the daemon did not probe its links: " + why,
                        "a gsyncd older than this gsyncctl has no `probe`: update it on every "
                        "host"));
    return;
  }
  for (auto& c : probe_checks(probe, o.root)) out->push_back(std::move(c));
}

// Text from outside (a peer's error, a host id) reaches the terminal
// without its control characters.
std::string printable(const std::string& s) {
  std::string out = s;
  for (char& c : out)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  return out;
}

}  // namespace

std::vector<Check> doctor_checks(const DoctorOptions& o) {
  std::vector<Check> out;
  json status;
  std::string why;
  const bool reached = ask(o, "status", &status, &why);
  out.push_back(daemon_check(o, reached, status, why));
  ArenaNeed need;
  if (reached) {
    need.default_arena = size_at(status, "default_arena", need.default_arena);
    need.max_arena = size_at(status, "max_arena", need.max_arena);
    need.from_daemon = true;
  }
  std::vector<Check> rdma = check_rdma(o.root);
  bool have_rdma = false;
  for (const Check& c : rdma) have_rdma |= c.level == Level::kOk;
  out.push_back(check_memlock(o.root, reached ? daemon_pid(status, o.root) : 0, need, have_rdma));
  out.push_back(check_memfd());
  out.push_back(check_hugepages(o.root));
  for (auto& c : rdma) out.push_back(std::move(c));
  out.push_back(check_gpudirect(o.root, have_rdma));
  out.push_back(check_pcie_path(o.root));
  if (reached) add_cluster_checks(o, &out);
  return out;
}

std::string render_doctor(const std::vector<Check>& checks) {
  std::string out;
  int n[3] = {0, 0, 0};
  for (const Check& c : checks) {
    n[static_cast<int>(c.level)]++;
    out += fmt::format("{:<4}  {}: {}\n", level_name(c.level), printable(c.name),
                       printable(c.found));
    if (c.level != Level::kOk && !c.fix.empty()) out += "      fix: " + printable(c.fix) + "\n";
  }
  out += fmt::format("doctor: {} ok, {} warn, {} fail\n", n[0], n[1], n[2]);
  return out;
}

json doctor_json(const std::vector<Check>& checks) {
  json list = json::array();
  int n[3] = {0, 0, 0};
  for (const Check& c : checks) {
    n[static_cast<int>(c.level)]++;
    list.push_back({{"check", c.name},
                    {"level", level_name(c.level)},
                    {"found", c.found},
                    {"fix", c.fix.empty() ? json(nullptr) : json(c.fix)},
                    {"data", c.data}});
  }
  return {{"checks", list}, {"ok", n[0]}, {"warn", n[1]}, {"fail", n[2]}};
}

int doctor_exit_status(const std::vector<Check>& checks) {
  for (const Check& c : checks)
    if (c.level == Level::kFail) return 1;
  return 0;
}

int run_doctor(const DoctorOptions& options, bool as_json) {
  const std::vector<Check> checks = doctor_checks(options);
  const std::string out =
      as_json ? doctor_json(checks).dump(2, ' ', false, json::error_handler_t::replace) + "\n"
              : render_doctor(checks);
  std::fputs(out.c_str(), stdout);
  // A closed pipe must not read as a clean bill of health.
  if (std::fflush(stdout) != 0) return 2;
  return doctor_exit_status(checks);
}

}  // namespace gsync::cli
