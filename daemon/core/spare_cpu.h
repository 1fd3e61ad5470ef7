// SPDX-License-Identifier: Apache-2.0
//
// Whether this host has a CPU to spare for the event loop's polling
// (docs/operations.md, "Polling"). A polling loop trades a core's time for
// a wakeup it saves; that is a good trade only when the core would be idle
// otherwise. When ranks compute on every CPU (a training job's backward
// pass, several test-bed hosts on one machine), each look the loop makes is
// time taken from a rank: measured on 2 CPUs, 2 hosts x 1 rank, a rank's
// submit took 5.8 ms with polling (it was descheduled for the daemon's
// looks) against 0.3 ms without.
//
// The test: the kernel's count of runnable tasks (/proc/loadavg, field 4,
// machine-wide), smoothed over recent samples, minus this thread itself,
// is below the CPUs this process may run on. Sampled at most every
// kSampleEvery, and only when the loop is about to poll, so an idle daemon
// reads nothing.
#pragma once

#include <chrono>

namespace gsync {

class SpareCpu {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr auto kSampleEvery = std::chrono::milliseconds(5);

  SpareCpu();
  ~SpareCpu();
  SpareCpu(const SpareCpu&) = delete;
  SpareCpu& operator=(const SpareCpu&) = delete;

  // Whether a CPU is spare now (samples when the last sample is old).
  // Without /proc/loadavg: always true, as if the check were not there.
  bool spare(Clock::time_point now);

  // For gsyncctl status: the smoothed count of other runnable tasks and the
  // CPUs allowed.
  double runnable() const { return runnable_; }
  bool last() const { return spare_; }  // what the last sample decided
  int cpus() const { return cpus_; }

  // The rule itself: a CPU is spare when the other runnable tasks would
  // leave one idle (at most cpus - 1 of them; smoothed, below cpus - 0.5).
  static bool spare_given(double runnable_others, int cpus) { return runnable_others < cpus - 0.5; }

 private:
  int fd_ = -1;
  int cpus_ = 1;
  double runnable_ = 0;
  bool spare_ = true;
  Clock::time_point sampled_{};
};

}  // namespace gsync
