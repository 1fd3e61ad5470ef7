// SPDX-License-Identifier: Apache-2.0
//
// Running the system commands a test bed is built with (ip, tc), their
// output and stderr kept for the error message.
#pragma once

#include <string>
#include <vector>

#include "daemon/core/status.h"

namespace gsync::testbed {

struct CommandResult {
  int exit_code = -1;  // -signal when killed
  std::string out, err;
  std::string spawn_error;  // non-empty when it could not be started at all
};

// Runs argv (PATH searched) with stdin from /dev/null and both outputs
// captured; waits for it.
CommandResult run_command(const std::vector<std::string>& argv);

// One command that must succeed: the error is "<command line> failed: <its
// stderr>", e.g. "ip link add ... failed: RTNETLINK answers: File exists".
Status must_run(const std::vector<std::string>& argv);

std::string join(const std::vector<std::string>& argv);
// How a child ended, from its waitpid() status: "exited with status 1",
// "killed by Killed".
std::string describe_status(int status);
// Without trailing newlines and blanks: a command's output as a message.
std::string trim(std::string s);

}  // namespace gsync::testbed
