// SPDX-License-Identifier: Apache-2.0
#include "daemon/core/spare_cpu.h"

#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <cstdio>

namespace gsync {
namespace {

// Field 4 of /proc/loadavg, "R/T": R runnable tasks (this one included).
bool read_runnable(int fd, int* out) {
  char buf[128];
  ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
  if (n <= 0) return false;
  buf[n] = '\0';
  double a, b, c;
  int running = 0, total = 0;
  if (std::sscanf(buf, "%lf %lf %lf %d/%d", &a, &b, &c, &running, &total) != 5) return false;
  *out = running;
  return true;
}

}  // namespace

SpareCpu::SpareCpu() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) cpus_ = CPU_COUNT(&set);
  if (cpus_ < 1) cpus_ = 1;
  fd_ = open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
}

SpareCpu::~SpareCpu() {
  if (fd_ >= 0) close(fd_);
}

bool SpareCpu::spare(Clock::time_point now) {
  if (fd_ < 0) return true;
  if (now - sampled_ < kSampleEvery) return spare_;
  sampled_ = now;
  int running = 0;
  if (!read_runnable(fd_, &running)) return spare_;
  // The reader is running as it reads: it is not competition for itself.
  const double others = running > 0 ? running - 1 : 0;
  // Smoothed over about four samples: one sample catches a rank between
  // two kernels, or a worker that just woke.
  runnable_ = 0.75 * runnable_ + 0.25 * others;
  spare_ = spare_given(runnable_, cpus_);
  return spare_;
}

}  // namespace gsync
