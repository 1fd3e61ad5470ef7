// SPDX-License-Identifier: Apache-2.0
//
// Whether a rank waiting for a completion should spin. Spinning wins a
// wakeup when the daemon runs on another core, and loses everything when the
// rank and its daemon may only run on the same one core: the spinning rank
// then holds the very core the daemon needs to post the completion (yielding
// only shortens the loss). A container given one CPU, or hosts pinned to CPU
// shares (gsync-perf --pin), are such cases.
#pragma once

#include <sys/types.h>

namespace gsync::client {

// True when the calling thread and process `daemon` are both confined to
// the same single CPU. False when either may run elsewhere, or when the
// daemon's CPUs cannot be read (another PID namespace, pid 0).
bool shares_one_cpu_with(pid_t daemon);

}  // namespace gsync::client
