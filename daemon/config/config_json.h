// SPDX-License-Identifier: Apache-2.0
//
// The config as JSON for the admin socket ("config" in gsyncctl status). Kept
// apart from config.h so that only the TUs that want nlohmann/json pay for it.
//
// Shape mirrors the TOML file: {"daemon": {...}, "auth": {...}, "limits": {...}}
// with the same key names. Sizes are integer bytes, socket_mode is the octal
// string "0666", id lists are arrays of integers. The source is not included:
// the status reply carries it as "config_source".
#pragma once

#include <nlohmann/json.hpp>

#include "daemon/config/config.h"

namespace gsync {

nlohmann::json config_to_json(const DaemonConfig& cfg);

}  // namespace gsync
