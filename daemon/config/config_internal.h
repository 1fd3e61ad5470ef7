// SPDX-License-Identifier: Apache-2.0
//
// Internals of daemon/config shared by the loader (config.cc, the only TU that
// includes toml++), the printers and the tests. Not for the rest of the daemon.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "daemon/config/config.h"

namespace gsync {

// How a key is written in TOML and JSON.
enum class ConfigKind {
  kString,  // TOML string
  kCount,   // non-negative integer that fits uint32
  kSize,    // byte size: integer or "256K" / "1GiB" string (powers of 1024)
  kMode,    // file mode: integer, normally written in TOML octal (0o666)
  kIdList,  // array of uids or gids
  kStringList,  // array of strings
  kBool,    // TOML boolean
};

using ConfigMember = std::variant<std::string DaemonConfig::*, uint32_t DaemonConfig::*,
                                  uint64_t DaemonConfig::*, std::vector<uint32_t> DaemonConfig::*,
                                  std::vector<std::string> DaemonConfig::*, bool DaemonConfig::*>;

// One key of the file. The table in config_rules.cc is the single list of
// keys: the loader, config_to_toml and config_to_json all walk it, so the
// names cannot drift apart.
struct ConfigField {
  std::string_view section;  // "daemon", "auth", "limits"
  std::string_view key;      // "socket", ...
  ConfigKind kind;
  ConfigMember member;
};

std::span<const ConfigField> config_fields();
std::string dotted_key(const ConfigField& field);

// A broken rule. keys[0] is the key the message is about; a rule across keys
// lists every key involved so the loader can point at whichever the file set.
struct ConfigProblem {
  std::vector<std::string> keys;
  std::string message;
};

// The first rule cfg breaks, in the order of config_fields(); nullopt when valid.
std::optional<ConfigProblem> find_config_problem(const DaemonConfig& cfg);

// Exact rendering of a byte count as the loader reads it back: "1G", "256K",
// or plain digits when no suffix divides it.
std::string format_byte_size(uint64_t bytes);

// "0666": the notation chmod(1) users know.
std::string format_mode(uint32_t mode);

// Largest uid/gid accepted; (uint32_t)-1 means "no id" to the kernel (chown(2)).
constexpr uint32_t kMaxId = 0xfffffffeu;

}  // namespace gsync
