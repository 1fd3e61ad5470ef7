// SPDX-License-Identifier: Apache-2.0
#include "tools/peers/launch.h"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tools/peers/child.h"

namespace gsync::peers {

namespace {

bool executable_file(const std::string& p) {
  return !p.empty() && access(p.c_str(), X_OK) == 0 && std::filesystem::is_regular_file(p);
}

// $env if set; else `name` beside this program, in the build tree's
// tools/peers/ (reached from tools/perf/ or tests/integration/), or in an
// installed libexec folder; else "".
std::string find_driver(const char* env, const char* name) {
  if (const char* p = std::getenv(env); p && *p) return p;
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return "";
  std::string dir(self, static_cast<size_t>(n));
  dir = dir.substr(0, dir.rfind('/'));
  for (const char* rel :
       {"/", "/../peers/", "/../tools/peers/", "/../../tools/peers/", "/../libexec/gsync/"}) {
    std::string c = dir + rel + name;
    if (executable_file(c)) return std::filesystem::path(c).lexically_normal().string();
  }
  return "";
}

std::string slot_address(const HostSlot& s) { return s.address.empty() ? "127.0.0.1" : s.address; }

std::string slot_text(const HostSlot& s) {
  return (s.netns.empty() ? std::string("current netns") : "netns " + s.netns) + ", " +
         slot_address(s);
}

std::string join(const std::vector<std::string>& argv) {
  std::string s;
  for (const auto& a : argv) s += (s.empty() ? "" : " ") + a;
  return s;
}

// The JSON lines a driver printed, as rows; "" or an error.
std::string parse_rows(const std::string& out, Result* r) {
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] != '{') continue;
    auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object() || !j.contains("bytes")) {
      return "unexpected output line: " + line;
    }
    try {
      Row row;
      row.bytes = j.at("bytes").get<uint64_t>();
      row.time_us = j.at("time_us").get<double>();
      row.algbw_gbps = j.at("algbw_gbps").get<double>();
      row.busbw_gbps = j.at("busbw_gbps").get<double>();
      row.wrong = j.at("wrong").get<int64_t>();
      if (j.contains("cpu_s")) row.cpu_s = j["cpu_s"].get<double>();
      if (j.contains("timed_ops")) row.timed_ops = j["timed_ops"].get<int>();
      if (j.contains("algo")) r->algo = j["algo"].get<std::string>();
      r->rows[row.bytes] = row;
    } catch (const nlohmann::json::exception& e) {
      return "bad row " + line + ": " + e.what();
    }
  }
  return "";
}

size_t expected_sizes(uint64_t min_bytes, uint64_t max_bytes) {
  size_t n = 0;
  for (uint64_t b = min_bytes; b <= max_bytes; b *= 4) n++;
  return n;
}

// Common tail of run_gloo / run_mpi_tcp: parse rank 0's output, check that
// every size came back.
void finish(const std::string& out, uint64_t min_bytes, uint64_t max_bytes, Result* r) {
  std::string e = parse_rows(out, r);
  if (e.empty() && r->rows.size() != expected_sizes(min_bytes, max_bytes)) {
    e = "printed " + std::to_string(r->rows.size()) + " of " +
        std::to_string(expected_sizes(min_bytes, max_bytes)) + " sizes";
  }
  if (!e.empty()) r->error = e;
}

bool valid_sizes(uint64_t min_bytes, uint64_t max_bytes, int iters, Result* r) {
  if (min_bytes < 4 || min_bytes % 4 != 0 || max_bytes < min_bytes || iters < 1) {
    r->error = "bad arguments: sizes must be multiples of 4 with min <= max, iters >= 1";
    return false;
  }
  return true;
}

// Removes a flat directory (the FileStore's: one file per key).
void remove_store(const std::string& dir) {
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

// mpirun's arguments for ranks in the test bed's namespaces, each
// namespace one host started through netns-rsh.sh; *net: the network its
// ranks talk over. "" or an error.
std::string add_netns_hosts(const std::vector<HostSlot>& slots, std::vector<std::string>* argv,
                            std::string* net) {
  const std::string rsh = netns_rsh_path();
  if (rsh.empty())
    return "netns-rsh.sh not found (built into tools/peers/; or set GSYNC_NETNS_RSH)";
  // One host name per namespace, in rank order; slots of one namespace
  // are contiguous (rank i = slots[i]), as mpirun fills hosts in order.
  std::vector<std::pair<std::string, int>> hosts;
  for (const auto& s : slots) {
    if (hosts.empty() || hosts.back().first != s.netns) hosts.push_back({s.netns, 0});
    hosts.back().second++;
  }
  std::string map, list;
  for (size_t i = 0; i < hosts.size(); i++) {
    std::string name = "h" + std::to_string(i);
    map += (i ? "," : "") + name + "=" + hosts[i].first;
    list += (i ? "," : "") + name + ":" + std::to_string(hosts[i].second);
  }
  // The bed's addresses are 10.R.x.y: the /16 of the first slot covers them.
  const std::string a = slot_address(slots[0]);
  size_t dot = a.find('.', a.find('.') + 1);
  *net = a.substr(0, dot) + ".0.0/16";
  argv->insert(argv->end(),
               {"--host", list, "--mca", "plm_rsh_agent", "/bin/sh " + rsh + " " + map, "--mca",
                "plm_rsh_no_tree_spawn", "1", "--mca", "mpi_yield_when_idle", "1"});
  return "";
}

// Pinned hosts: each rank confines itself (mpi_allreduce.c) to its slot's
// CPUs, listed by rank: "0;1;0;1", "0,1;2,3". "" when no slot is pinned.
std::string rank_cpus(const std::vector<HostSlot>& slots) {
  std::string cpus;
  bool pinned = false;
  for (size_t i = 0; i < slots.size(); i++) {
    cpus += i ? ";" : "";
    for (size_t k = 0; k < slots[i].cpus.size(); k++)
      cpus += (k ? "," : "") + std::to_string(slots[i].cpus[k]);
    pinned |= !slots[i].cpus.empty();
  }
  return pinned ? cpus : "";
}

}  // namespace

std::string gloo_driver_path() { return find_driver("GSYNC_GLOO_DRIVER", "gloo-allreduce"); }
std::string mpi_driver_path() { return find_driver("GSYNC_MPI_DRIVER", "mpi-allreduce"); }
std::string tcp_stream_path() { return find_driver("GSYNC_TCP_STREAM", "tcp-stream"); }
std::string netns_rsh_path() { return find_driver("GSYNC_NETNS_RSH", "netns-rsh.sh"); }

std::string mpirun_path() {
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path && *path ? path : "/usr/local/bin:/usr/bin:/bin");
  std::string d;
  while (std::getline(dirs, d, ':')) {
    if (d.empty()) continue;
    std::string c = d + "/mpirun";
    if (executable_file(c)) return c;
  }
  return "";
}

Result run_gloo(const std::vector<HostSlot>& slots, uint64_t min_bytes, uint64_t max_bytes,
                int iters, int timeout_s, const std::string& algo) {
  Result r;
  if (!valid_sizes(min_bytes, max_bytes, iters, &r)) return r;
  if (slots.empty()) {
    r.error = "gloo: no host slots";
    return r;
  }
  const std::string driver = gloo_driver_path();
  if (driver.empty()) {
    r.error =
        "gloo: driver gloo-allreduce not found (needs libgloo-dev at build time; or set "
        "GSYNC_GLOO_DRIVER)";
    return r;
  }
  char tmpl[] = "/tmp/gsync-gloo.XXXXXX";
  if (!mkdtemp(tmpl)) {
    r.error = "gloo: mkdtemp: " + errno_text(errno);
    return r;
  }
  const std::string store = tmpl;

  const int n = static_cast<int>(slots.size());
  std::vector<std::unique_ptr<Child>> ranks;
  std::vector<Child*> all;
  for (int i = 0; i < n; i++) {
    std::vector<std::string> argv = {driver};
    auto flag = [&argv](const char* name, const std::string& value) {
      argv.insert(argv.end(), {name, value});
    };
    flag("--rank", std::to_string(i));
    flag("--size", std::to_string(n));
    flag("--store", store);
    flag("--address", slot_address(slots[i]));
    flag("--min-bytes", std::to_string(min_bytes));
    flag("--max-bytes", std::to_string(max_bytes));
    flag("--iters", std::to_string(iters));
    flag("--timeout", std::to_string(timeout_s));
    if (!algo.empty()) flag("--algo", algo);
    if (i == 0) r.command = join(argv);
    ranks.push_back(std::make_unique<Child>(
        "gloo rank " + std::to_string(i) + " (" + slot_text(slots[i]) + ")", std::move(argv)));
    all.push_back(ranks.back().get());
    NetnsFd ns;
    std::string e;
    if (!ns.open(slots[i].netns, &e)) e = ranks.back()->label() + ": " + e;
    if (!e.empty() || !ranks.back()->start(ns.fd(), &e, slots[i].cpus)) {
      r.error = e;
      ranks.clear();  // kills and reaps the ranks already started
      remove_store(store);
      return r;
    }
  }
  // The driver's own alarm fires at timeout_s; this one is the backstop.
  const auto deadline = Clock::now() + std::chrono::seconds(timeout_s + 5);
  r.error = wait_all(all, deadline, "gloo", timeout_s);
  remove_store(store);
  if (r.error.empty()) finish(ranks[0]->out(), min_bytes, max_bytes, &r);
  return r;
}

Result run_mpi_tcp(const std::vector<HostSlot>& slots, uint64_t min_bytes, uint64_t max_bytes,
                   int iters, int timeout_s) {
  Result r;
  if (!valid_sizes(min_bytes, max_bytes, iters, &r)) return r;
  if (slots.empty()) {
    r.error = "mpi: no host slots";
    return r;
  }
  const int ranks = static_cast<int>(slots.size());
  const bool netns = !slots[0].netns.empty();
  const std::string mpirun = mpirun_path(), driver = mpi_driver_path();
  if (mpirun.empty() || driver.empty()) {
    r.error = mpirun.empty() ? "mpi: mpirun not on PATH (openmpi-bin)"
                             : "mpi: driver mpi-allreduce not found (needs libopenmpi-dev at "
                               "build time; or set GSYNC_MPI_DRIVER)";
    return r;
  }
  // ob1 + tcp btl: Debian's Open MPI also has the UCX pml, which would
  // ignore the btl list (peers/README.md).
  std::vector<std::string> argv = {mpirun, "--allow-run-as-root", "--oversubscribe",
                                   "-np",  std::to_string(ranks),  "--mca",
                                   "pml",  "ob1",                  "--mca",
                                   "btl",  "self,tcp"};
  std::string net = "lo";
  if (netns) {
    if (std::string e = add_netns_hosts(slots, &argv, &net); !e.empty()) {
      r.error = "mpi: " + e;
      return r;
    }
  }
  if (std::string cpus = rank_cpus(slots); !cpus.empty())
    argv.insert(argv.end(), {"-x", "GSYNC_PEER_CPUS=" + cpus});
  argv.insert(argv.end(), {"--mca", "btl_tcp_if_include", net, "--mca", "oob_tcp_if_include", net,
                           driver, std::to_string(min_bytes), std::to_string(max_bytes),
                           std::to_string(iters)});
  r.command = join(argv);
  // Across namespaces Open MPI sometimes never gets all its daemons up
  // (seen about once in ten runs: one orted of four missing, mpirun waiting
  // forever). Its ranks say when they are all up; a start that does not
  // get there in kMpiStartS is killed and tried once more.
  // (GSYNC_MPI_START_S overrides the 30 s, for the test of this path.)
  const char* start_env = std::getenv("GSYNC_MPI_START_S");
  const int kMpiStartS = start_env && std::atoi(start_env) > 0 ? std::atoi(start_env) : 30;
  for (int attempt = 1;; attempt++) {
    Child mpi("mpirun -np " + std::to_string(ranks), argv);
    std::string e;
    NetnsFd ns;
    if (!ns.open(slots[0].netns, &e) || !mpi.start(ns.fd(), &e)) {
      r.error = "mpi: " + e;
      return r;
    }
    auto up_by = Clock::now() + std::chrono::seconds(kMpiStartS);
    while (mpi.out().find("# mpi up") == std::string::npos && !mpi.done() && Clock::now() < up_by)
      pump({&mpi}, 50);
    if (mpi.out().find("# mpi up") == std::string::npos && !mpi.done()) {
      std::string stuck = "mpi: not all ranks up after " + std::to_string(kMpiStartS) + " s";
      stop_all({&mpi});
      if (attempt < 2) {
        std::fprintf(stderr, "%s (attempt %d); starting it again\n", stuck.c_str(), attempt);
        continue;
      }
      r.error = stuck + ", twice";
      return r;
    }
    r.error = wait_all({&mpi}, Clock::now() + std::chrono::seconds(timeout_s), "mpi", timeout_s);
    if (r.error.empty()) finish(mpi.out(), min_bytes, max_bytes, &r);
    return r;
  }
}

double tcp_stream_gbps(const HostSlot& from, const HostSlot& to, double seconds,
                       std::string* error) {
  std::string scratch;
  std::string& err = error ? *error : scratch;
  err.clear();
  const std::string tool = tcp_stream_path();
  if (tool.empty()) {
    err = "tcp-stream: program not found (or set GSYNC_TCP_STREAM)";
    return -1;
  }
  if (!(seconds > 0)) {
    err = "tcp-stream: seconds must be > 0";
    return -1;
  }
  const int budget_s = static_cast<int>(std::ceil(seconds)) + 20;
  const std::string budget = std::to_string(budget_s);
  const auto deadline = Clock::now() + std::chrono::seconds(budget_s);

  NetnsFd to_ns, from_ns;
  if (!to_ns.open(to.netns, &err) || !from_ns.open(from.netns, &err)) return -1;
  Child server("tcp-stream server (" + slot_text(to) + ")",
               {tool, "server", "--bind", slot_address(to), "--port", "0", "--timeout", budget});
  if (!server.start(to_ns.fd(), &err, to.cpus)) return -1;
  // The server prints its kernel-chosen port once listening: no fixed port
  // to collide with other users of the machine.
  int port = 0;
  while (port == 0) {
    pump({&server}, 50);
    const std::string& out = server.out();
    if (auto nl = out.find('\n'); nl != std::string::npos) {
      auto j = nlohmann::json::parse(out.substr(0, nl), nullptr, false);
      if (!j.is_object() || !j.contains("port") || !j["port"].is_number_integer()) {
        err = "tcp-stream server printed " + out.substr(0, nl);
        return -1;
      }
      port = j["port"].get<int>();
    } else if (server.failed() || Clock::now() > deadline) {
      err = server.failed() ? server.report() : "tcp-stream server: no port within the deadline";
      return -1;
    }
  }
  Child client("tcp-stream client (" + slot_text(from) + " -> " + slot_text(to) + ")",
               {tool, "client", "--connect", slot_address(to), "--port", std::to_string(port),
                "--seconds", std::to_string(seconds), "--timeout", budget});
  if (!client.start(from_ns.fd(), &err, from.cpus)) return -1;
  err = wait_all({&server, &client}, deadline, "tcp-stream", budget_s);
  if (!err.empty()) return -1;
  std::istringstream in(client.out());
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object() && j.contains("gbps") && j["gbps"].is_number())
      return j["gbps"].get<double>();
  }
  err = "tcp-stream client printed no result: " + client.out();
  return -1;
}

}  // namespace gsync::peers
