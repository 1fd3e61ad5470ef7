// SPDX-License-Identifier: Apache-2.0
//
// One result of gsyncctl doctor (docs/operations.md, "Doctor"): a level,
// the check's name ("memlock", "reach h2"), what was found and, for a warn
// or a fail, the fix: the exact command or config line. `data` holds the
// figures behind the text for --json (null when there are none).
#pragma once

#include <string>
#include <utility>

#include <nlohmann/json.hpp>

namespace gsync::cli {

enum class Level { kOk, kWarn, kFail };

inline const char* level_name(Level l) {
  return l == Level::kOk ? "ok" : l == Level::kWarn ? "warn" : "fail";
}

struct Check {
  Level level = Level::kOk;
  std::string name;
  std::string found;
  std::string fix;  // "" for ok
  nlohmann::json data = nullptr;
};

inline Check ok(std::string name, std::string found, nlohmann::json data = nullptr) {
  return {Level::kOk, std::move(name), std::move(found), "", std::move(data)};
}
inline Check warn(std::string name, std::string found, std::string fix,
                  nlohmann::json data = nullptr) {
  return {Level::kWarn, std::move(name), std::move(found), std::move(fix), std::move(data)};
}
inline Check fail(std::string name, std::string found, std::string fix,
                  nlohmann::json data = nullptr) {
  return {Level::kFail, std::move(name), std::move(found), std::move(fix), std::move(data)};
}

}  // namespace gsync::cli
