// SPDX-License-Identifier: Apache-2.0
#include "libclient/cpu_share.h"

#include <sched.h>

namespace gsync::client {

bool shares_one_cpu_with(pid_t daemon) {
  if (daemon <= 0) return false;
  cpu_set_t mine, theirs;
  if (sched_getaffinity(0, sizeof mine, &mine) != 0) return false;
  if (sched_getaffinity(daemon, sizeof theirs, &theirs) != 0) return false;
  return CPU_COUNT(&mine) == 1 && CPU_EQUAL(&mine, &theirs);
}

}  // namespace gsync::client
