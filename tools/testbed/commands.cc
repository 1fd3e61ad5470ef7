// SPDX-License-Identifier: Apache-2.0
#include "tools/testbed/commands.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "tools/common/procs.h"

extern char** environ;

namespace gsync::testbed {

std::string join(const std::vector<std::string>& argv) {
  std::string s;
  for (const auto& a : argv) {
    if (!s.empty()) s += ' ';
    s += a;
  }
  return s;
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("killed by ") + strsignal(WTERMSIG(status));
  return "stopped";
}

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\r')) s.pop_back();
  return s;
}

// posix_spawn rather than fork: the caller may have threads (gtest, perf),
// and the child must start with a clean signal mask because the CLI blocks
// SIGINT/SIGTERM to sigwait() on them.
CommandResult run_command(const std::vector<std::string>& argv) {
  CommandResult res;
  int out_pipe[2], err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0) {
    res.spawn_error = std::string("pipe: ") + strerror(errno);
    return res;
  }
  if (pipe2(err_pipe, O_CLOEXEC) != 0) {
    res.spawn_error = std::string("pipe: ") + strerror(errno);
    close(out_pipe[0]);
    close(out_pipe[1]);
    return res;
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, out_pipe[1], 1);
  posix_spawn_file_actions_adddup2(&fa, err_pipe[1], 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, dfl;
  sigemptyset(&none);
  sigemptyset(&dfl);
  sigaddset(&dfl, SIGINT);
  sigaddset(&dfl, SIGTERM);
  sigaddset(&dfl, SIGPIPE);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &dfl);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  std::vector<char*> cargv;
  for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  pid_t pid = -1;
  int rc = posix_spawnp(&pid, cargv[0], &fa, &attr, cargv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  close(out_pipe[1]);
  close(err_pipe[1]);
  if (rc != 0) {
    res.spawn_error = strerror(rc);
    close(out_pipe[0]);
    close(err_pipe[0]);
    return res;
  }
  // Both at once: a command that fills one pipe while we wait on the other
  // would never finish.
  std::vector<std::string> outputs = tools::read_all_of({out_pipe[0], err_pipe[0]});
  close(out_pipe[0]);
  close(err_pipe[0]);
  res.out = std::move(outputs[0]);
  res.err = std::move(outputs[1]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  res.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
  return res;
}

Status must_run(const std::vector<std::string>& argv) {
  CommandResult r = run_command(argv);
  if (!r.spawn_error.empty())
    return {GSYNC_ERR_INTERNAL, join(argv) + " could not be started: " + r.spawn_error};
  if (r.exit_code != 0) {
    std::string why = trim(r.err);
    if (why.empty()) why = trim(r.out);
    if (why.empty()) why = "(no output)";
    return {GSYNC_ERR_INTERNAL,
            join(argv) + " failed (exit " + std::to_string(r.exit_code) + "): " + why};
  }
  return Status::ok();
}

}  // namespace gsync::testbed
