// SPDX-License-Identifier: Apache-2.0
#include "daemon/core/notify.h"

#include <systemd/sd-daemon.h>

#include <fmt/format.h>

namespace gsync {

void notify_ready(const std::string& status) {
  sd_notify(0, fmt::format("READY=1\nSTATUS={}", status).c_str());
}

void notify_status(const std::string& status) {
  sd_notify(0, fmt::format("STATUS={}", status).c_str());
}

void notify_stopping() { sd_notify(0, "STOPPING=1"); }

void notify_watchdog() { sd_notify(0, "WATCHDOG=1"); }

std::chrono::milliseconds watchdog_period() {
  uint64_t usec = 0;
  if (sd_watchdog_enabled(0, &usec) <= 0 || usec == 0) return std::chrono::milliseconds(0);
  // systemd's advice (sd_watchdog_enabled(3)): ping at half the interval.
  return std::chrono::milliseconds(std::max<uint64_t>(usec / 2000, 1));
}

}  // namespace gsync
