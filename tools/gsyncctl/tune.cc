// SPDX-License-Identifier: Apache-2.0
#include "tools/gsyncctl/tune.h"

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <chrono>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "tools/gsyncctl/admin_client.h"
#include "tools/gsyncctl/table.h"

namespace gsync::cli {

namespace {
using nlohmann::json;
constexpr int kExitDaemonError = 1, kExitUnreachable = 2, kExitUsage = 64;

int ask(const std::string& socket, const std::string& command, int timeout_ms, json* out) {
  std::string reply, error;
  if (!admin_query(socket, command, std::chrono::milliseconds(timeout_ms), &reply, &error)) {
    std::fprintf(stderr, "gsyncctl: %s\n", error.c_str());
    return kExitUnreachable;
  }
  *out = json::parse(reply, nullptr, /*allow_exceptions=*/false);
  if (out->is_discarded() || !out->is_object()) {
    std::fprintf(stderr, "gsyncctl: the reply from %s to \"%s\" is not a JSON object\n",
                 socket.c_str(), command.c_str());
    return kExitUnreachable;
  }
  if (auto it = out->find("error"); it != out->end()) {
    std::fprintf(stderr, "gsyncctl: gsyncd (%s): %s\n", socket.c_str(),
                 it->is_string() ? it->get<std::string>().c_str() : "error");
    return kExitDaemonError;
  }
  return 0;
}

std::string str(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string("-");
}
uint64_t num(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_number_unsigned() ? it->get<uint64_t>() : 0;
}
}  // namespace

void add_tune_command(CLI::App& app, TuneCommand* t) {
  t->cmd = app.add_subcommand("tune", "the daemons' tuning tables (gsync-perf --tune writes one)");
  t->cmd->require_subcommand(1);
  t->load = t->cmd->add_subcommand("load", "give each daemon this table; new jobs plan with it");
  t->load->add_option("file", t->file, "the table (JSON, as gsync-perf --tune wrote it)")
      ->required();
  t->clear = t->cmd->add_subcommand("clear", "drop each daemon's table (the built-in rule again)");
  t->show = t->cmd->add_subcommand("show", "print each daemon's table");
  for (CLI::App* sub : {t->load, t->clear, t->show})
    sub->add_option("sockets", t->sockets, "admin sockets of the daemons (default: --socket)");
}

int run_tune(const TuneCommand& t, const std::string& default_socket, int timeout_ms) {
  std::vector<std::string> sockets = t.sockets;
  if (sockets.empty()) sockets.push_back(default_socket);
  std::string command = t.clear->parsed() ? "tune-clear" : "status";
  if (t.load->parsed()) {
    char abs[PATH_MAX];
    if (realpath(t.file.c_str(), abs) == nullptr) {
      std::fprintf(stderr, "gsyncctl tune load: %s: no such file\n", t.file.c_str());
      return kExitUsage;
    }
    command = std::string("tune-load ") + abs;
  }
  for (const std::string& s : sockets) {
    json reply;
    if (int rc = ask(s, command, timeout_ms, &reply); rc != 0) return rc;
    if (t.load->parsed())
      std::printf("%s: loaded %llu entries; jobs created from now on plan with them\n", s.c_str(),
                  static_cast<unsigned long long>(num(reply, "entries")));
    else if (t.clear->parsed())
      std::printf("%s: cleared\n", s.c_str());
    else
      std::printf("%s:\n%s", s.c_str(), render_tuning(reply.value("tuning", json::object())).c_str());
  }
  return 0;
}

std::string render_tuning(const json& tuning) {
  const json entries = tuning.is_object() ? tuning.value("entries", json::array()) : json::array();
  std::string file = tuning.is_object() ? str(tuning, "file") : "-";
  if (!entries.is_array() || entries.empty())
    return fmt::format("  no tuning table (kept in {}): plans by the built-in rule\n", file);
  std::vector<Row> rows;
  for (const json& e : entries) {
    if (!e.is_object()) continue;
    std::string hosts;
    const json list = e.value("hosts", json::array());
    for (const json& h : list.is_array() ? list : json::array())
      hosts += (hosts.empty() ? "" : ",") + (h.is_string() ? h.get<std::string>() : "?");
    uint64_t chunk = num(e, "chunk_bytes");
    rows.push_back({hosts, format_bytes(num(e, "bytes")), str(e, "algorithm"),
                    chunk ? format_bytes(chunk) : "rule",
                    e.contains("us") && e["us"].is_number()
                        ? fmt::format("{:.1f}", e["us"].get<double>())
                        : std::string("-")});
  }
  std::string text = format_table({{"hosts"}, {"sizes up to", Align::kRight}, {"algorithm"},
                                   {"chunks", Align::kRight}, {"measured us", Align::kRight}},
                                  rows);
  std::string out = fmt::format("  tuning table (kept in {}):\n", file);
  for (size_t at = 0; at < text.size();) {
    size_t nl = text.find('\n', at);
    if (nl == std::string::npos) nl = text.size();
    out += "  " + text.substr(at, nl - at) + "\n";
    at = nl + 1;
  }
  return out;
}

}  // namespace gsync::cli
