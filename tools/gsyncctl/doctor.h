// SPDX-License-Identifier: Apache-2.0
//
// gsyncctl doctor: pre-flight checks of a host and its cluster, one line
// each (`ok|warn|fail  <check>: <what was found>`, and for a warn or a fail
// the fix on the next line), or one JSON document with --json. The daemon
// is asked for its status (the configuration in force), its peers and a
// probe of every link (admin `probe`); the host's own checks run without
// it. docs/operations.md, "Doctor".
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tools/gsyncctl/doctor_check.h"

namespace gsync::cli {

struct DoctorOptions {
  std::string socket;      // the daemon's admin socket
  int timeout_ms = 10000;  // for each admin request (the probe's own deadline is 5 s)
  int connect_timeout_ms = 2000;  // each TCP connection to a peer
  std::string root;        // "" is /: where /proc and /sys are read (tests)
};

std::vector<Check> doctor_checks(const DoctorOptions& options);

// The text: a line per check, "fix:" lines under warns and fails, then a
// count of each level.
std::string render_doctor(const std::vector<Check>& checks);
// {"checks": [{"check", "level", "found", "fix", "data"}], "ok": N, "warn": N, "fail": N}
nlohmann::json doctor_json(const std::vector<Check>& checks);
// 0 when nothing failed (warns allowed), else 1.
int doctor_exit_status(const std::vector<Check>& checks);

// gsyncctl doctor: runs the checks, prints them (as JSON when as_json) and
// returns the exit status.
int run_doctor(const DoctorOptions& options, bool as_json);

}  // namespace gsync::cli
