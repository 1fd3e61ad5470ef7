// SPDX-License-Identifier: Apache-2.0
//
// An admin reply's fields as text, for the renderers (render.cc,
// render_jobs.cc): a field that is missing, null or of another type is
// kMissing, never an error (render.h). Not used outside them.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace gsync::cli::fields {

inline constexpr std::string_view kMissing = "-";

// obj[key], or null when obj is not an object or has no such key.
const nlohmann::json& field(const nlohmann::json& obj, std::string_view key);
// Any scalar as text: strings verbatim, numbers as JSON writes them.
std::string text(const nlohmann::json& v);
std::string key_text(const nlohmann::json& v);
// As table.h's format_bytes, format_duration and format_gbps write them.
std::string bytes(const nlohmann::json& v);
std::string seconds(const nlohmann::json& v);
std::string gbps(const nlohmann::json& v);

}  // namespace gsync::cli::fields
