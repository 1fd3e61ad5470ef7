// SPDX-License-Identifier: Apache-2.0
//
// How `gsync-testbed add-host` / `remove-host` reach the `gsync-testbed up`
// that owns the bed: a FIFO in the bed's folder (<dir>/control) takes one
// request per line, "add-host RACK REPLY" or "remove-host HOST term|kill
// REPLY", and the answer, one line starting with "ok" or "error", goes to
// the FIFO REPLY the asking process made and waits on.
#pragma once

#include <string>

#include "tools/testbed/testbed.h"

namespace gsync::testbed {

// For `up`: makes <dir>/control; -1 (and why in *err) when it cannot.
int open_control(const Testbed& bed, std::string* err);
// For `up`: handles the requests waiting on fd, printing what it did.
void serve_control(Testbed& bed, int fd);
// For add-host / remove-host: sends request (without the reply path) to the
// bed in dir ("": the one bed of a live `up` under /tmp) and prints the
// answer; the exit code.
int ask_bed(const std::string& dir, const std::string& request);

}  // namespace gsync::testbed
