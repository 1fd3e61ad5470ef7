// SPDX-License-Identifier: Apache-2.0

#include "daemon/config/config_json.h"

#include <string>

#include "daemon/config/config_internal.h"

namespace gsync {

nlohmann::json config_to_json(const DaemonConfig& cfg) {
  nlohmann::json out = nlohmann::json::object();
  for (const ConfigField& field : config_fields()) {
    nlohmann::json& slot = out[std::string(field.section)][std::string(field.key)];
    switch (field.kind) {
      case ConfigKind::kString:
        slot = cfg.*std::get<std::string DaemonConfig::*>(field.member);
        break;
      case ConfigKind::kCount:
        slot = cfg.*std::get<uint32_t DaemonConfig::*>(field.member);
        break;
      case ConfigKind::kSize:
        slot = cfg.*std::get<uint64_t DaemonConfig::*>(field.member);
        break;
      case ConfigKind::kMode:
        slot = format_mode(cfg.*std::get<uint32_t DaemonConfig::*>(field.member));
        break;
      case ConfigKind::kIdList:
        slot = cfg.*std::get<std::vector<uint32_t> DaemonConfig::*>(field.member);
        break;
      case ConfigKind::kStringList:
        slot = cfg.*std::get<std::vector<std::string> DaemonConfig::*>(field.member);
        break;
      case ConfigKind::kBool:
        slot = cfg.*std::get<bool DaemonConfig::*>(field.member);
        break;
    }
  }
  return out;
}

}  // namespace gsync
