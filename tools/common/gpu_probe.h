// SPDX-License-Identifier: Apache-2.0
//
// How many GPUs this machine has, asked in a forked child: CUDA does not
// survive fork, so a process that forks rank processes (the GPU tests, the
// device benchmarks) must not touch it itself. The GPU tests and
// bench_device_allreduce ask here.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "daemon/gpu/device.h"

namespace gsync::tools {

// The GPUs visible (at most 100), or 0 with *why saying why not.
inline int gpus_in_child(std::string* why) {
  int fds[2];
  if (pipe(fds) != 0) {
    *why = "pipe failed";
    return 0;
  }
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    const gpu::Devices& d = gpu::devices();
    const std::string text = d.count > 0 ? "" : d.why_none;
    [[maybe_unused]] ssize_t n = write(fds[1], text.data(), text.size());
    _exit(d.count > 100 ? 100 : d.count);
  }
  close(fds[1]);
  char buf[512];
  std::string text;
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) text.append(buf, size_t(n));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  const int count = WIFEXITED(status) ? WEXITSTATUS(status) : 0;
  *why = count > 0 ? "" : (text.empty() ? "the GPU probe failed" : text);
  return count;
}

}  // namespace gsync::tools
