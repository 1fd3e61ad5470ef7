// SPDX-License-Identifier: Apache-2.0
//
// The daemon's one clock: monotonic, for deadlines, ages and stage times.
#pragma once

#include <chrono>

namespace gsync {

using Clock = std::chrono::steady_clock;

}  // namespace gsync
