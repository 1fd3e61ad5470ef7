// SPDX-License-Identifier: Apache-2.0
//
// The JSON documents the admin socket serves (status, jobs, clients);
// docs/operations.md shows them, gsyncctl renders them as tables.
#pragma once

#include <string>

namespace gsync {

class Daemon;

// Reply for one admin command; unknown commands get {"error": "..."}.
std::string admin_reply(Daemon& d, const std::string& command);

}  // namespace gsync
