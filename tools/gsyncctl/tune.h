// SPDX-License-Identifier: Apache-2.0
//
// gsyncctl tune: the daemons' tuning tables (docs/algorithms.md, "Tuning").
// `tune load FILE` gives each daemon the table `gsync-perf --tune` wrote,
// `tune clear` drops it, `tune show` prints it. Each daemon reads FILE
// itself (the admin protocol carries one short line), so FILE must be
// readable by the daemon's user; gsyncctl passes its absolute path.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace CLI {
class App;
}

namespace gsync::cli {

struct TuneCommand {
  CLI::App* cmd = nullptr;
  CLI::App *load = nullptr, *clear = nullptr, *show = nullptr;
  std::string file;
  std::vector<std::string> sockets;
};

void add_tune_command(CLI::App& app, TuneCommand* t);
// Runs the subcommand given against t->sockets (or default_socket): 0, or
// gsyncctl's exit status for the first daemon that failed.
int run_tune(const TuneCommand& t, const std::string& default_socket, int timeout_ms);

// The tuning table of a status reply as text: one line per host set and
// size band.
std::string render_tuning(const nlohmann::json& tuning);

}  // namespace gsync::cli
