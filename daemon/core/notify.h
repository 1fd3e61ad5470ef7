// SPDX-License-Identifier: Apache-2.0
//
// systemd readiness and watchdog (sd_notify). Harmless without systemd:
// with no NOTIFY_SOCKET every call is a no-op.
#pragma once

#include <chrono>
#include <string>

namespace gsync {

void notify_ready(const std::string& status);
void notify_status(const std::string& status);
void notify_stopping();
void notify_watchdog();
// Half the watchdog interval systemd asked for, or zero when none.
std::chrono::milliseconds watchdog_period();

}  // namespace gsync
