// SPDX-License-Identifier: Apache-2.0
//
// config_to_toml: the config in force, written so that load_config_file reads
// it back to the same struct (tests/unit/test_config.cc checks the round trip).

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <string>

#include "daemon/config/config.h"
#include "daemon/config/config_internal.h"

namespace gsync {
namespace {

// A TOML basic string (toml.io, "String"): quote, backslash and control
// characters must be escaped; UTF-8 passes through unchanged.
std::string toml_quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\f':
        out += "\\f";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
          out += fmt::format("\\u{:04X}", static_cast<unsigned char>(c));
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

std::string render_value(const ConfigField& field, const DaemonConfig& cfg) {
  switch (field.kind) {
    case ConfigKind::kString:
      return toml_quote(cfg.*std::get<std::string DaemonConfig::*>(field.member));
    case ConfigKind::kCount:
      return fmt::format("{}", cfg.*std::get<uint32_t DaemonConfig::*>(field.member));
    case ConfigKind::kSize: {
      uint64_t bytes = cfg.*std::get<uint64_t DaemonConfig::*>(field.member);
      std::string text = format_byte_size(bytes);
      // Plain digits stay an integer; a suffixed size must be a string.
      return text.back() >= '0' && text.back() <= '9' ? text : toml_quote(text);
    }
    case ConfigKind::kMode:
      return fmt::format("0o{:o}", cfg.*std::get<uint32_t DaemonConfig::*>(field.member));
    case ConfigKind::kIdList:
      return fmt::format(
          "[{}]",
          fmt::join(cfg.*std::get<std::vector<uint32_t> DaemonConfig::*>(field.member), ", "));
    case ConfigKind::kStringList: {
      std::string items;
      for (const auto& s : cfg.*std::get<std::vector<std::string> DaemonConfig::*>(field.member))
        items += (items.empty() ? "" : ", ") + toml_quote(s);
      return "[" + items + "]";
    }
    case ConfigKind::kBool:
      return cfg.*std::get<bool DaemonConfig::*>(field.member) ? "true" : "false";
  }
  return "";
}

}  // namespace

std::string config_to_toml(const DaemonConfig& cfg) {
  // The source goes in a comment: it describes the values, it is not one.
  std::string out = fmt::format("# gsyncd configuration, loaded from {}\n", toml_quote(cfg.source));
  std::string_view section;
  for (const ConfigField& field : config_fields()) {
    if (field.section != section) {
      section = field.section;
      out += fmt::format("\n[{}]\n", section);
    }
    out += fmt::format("{} = {}\n", field.key, render_value(field, cfg));
  }
  return out;
}

}  // namespace gsync
