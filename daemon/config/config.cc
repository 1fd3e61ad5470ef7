// SPDX-License-Identifier: Apache-2.0
//
// load_config_file: the TOML file over the defaults. This is the only TU that
// includes toml++ (it is slow to compile); the key list and the rules live in
// config_rules.cc.
//
// Every error names the file, the line and the dotted key, because the person
// reading it is an operator with an editor open on that file. Unknown keys are
// errors: a typo such as "ring_entrys" must not silently leave the default.

#include "daemon/config/config.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <toml++/toml.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>

#include "daemon/config/config_internal.h"

namespace gsync {
namespace {

// A config file is a few hundred bytes; this only stops "--config /dev/zero".
constexpr size_t kMaxConfigFileBytes = 1 << 20;
// Suggest a known key when an unknown one is this close (edits).
constexpr size_t kMaxSuggestDistance = 2;

std::string_view type_name(toml::node_type type) {
  switch (type) {
    case toml::node_type::string:
      return "string";
    case toml::node_type::integer:
      return "integer";
    case toml::node_type::floating_point:
      return "float";
    case toml::node_type::boolean:
      return "boolean";
    case toml::node_type::date:
      return "date";
    case toml::node_type::time:
      return "time";
    case toml::node_type::date_time:
      return "date-time";
    case toml::node_type::array:
      return "array";
    case toml::node_type::table:
      return "table";
    case toml::node_type::none:
      break;
  }
  return "nothing";
}

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

struct Entry {
  const toml::key* key;
  const toml::node* node;
  uint32_t line;
};

// toml::table is ordered by name; errors are reported in file order so that
// the first one the operator sees is the first one in the file.
std::vector<Entry> entries_in_file_order(const toml::table& table) {
  std::vector<Entry> entries;
  for (auto&& [key, node] : table) {
    // Keys of tables made implicitly (the "a" of [a.b]) may carry no source.
    uint32_t line = key.source().begin.line ? key.source().begin.line : node.source().begin.line;
    entries.push_back({&key, &node, line});
  }
  std::stable_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    const auto& sa = a.key->source().begin;
    const auto& sb = b.key->source().begin;
    return std::pair(a.line, sa.column) < std::pair(b.line, sb.column);
  });
  return entries;
}

class Loader {
 public:
  explicit Loader(const std::string& path) : path_(path) {}

  Status load(const toml::table& root, DaemonConfig* cfg);

 private:
  Status error(uint32_t line, std::string_view key, std::string_view message) const {
    if (line == 0) return Status(GSYNC_ERR_INVALID, fmt::format("{}: {}: {}", path_, key, message));
    return Status(GSYNC_ERR_INVALID, fmt::format("{}:{}: {}: {}", path_, line, key, message));
  }
  Status error(const toml::node& node, std::string_view key, std::string_view message) const {
    return error(node.source().begin.line, key, message);
  }
  Status wrong_type(const toml::node& node, std::string_view key, std::string_view expected) const {
    return error(node, key, fmt::format("expected {}, got {}", expected, type_name(node.type())));
  }

  Status load_section(const Entry& section, DaemonConfig* cfg);
  Status unknown_top_level(const Entry& entry) const;
  Status read_field(const ConfigField& field, const std::string& key, const toml::node& node,
                    DaemonConfig* cfg) const;
  Status read_unsigned(const toml::node& node, std::string_view key, uint64_t max,
                       uint64_t* out) const;
  Status read_size(const toml::node& node, std::string_view key, uint64_t* out) const;
  Status read_mode(const toml::node& node, std::string_view key, uint32_t* out) const;
  Status read_ids(const toml::node& node, std::string_view key, std::vector<uint32_t>* out) const;
  Status read_strings(const toml::node& node, std::string_view key,
                      std::vector<std::string>* out) const;

  const std::string& path_;
  std::map<std::string, uint32_t, std::less<>> line_of_;  // dotted key -> line, for rule errors
};

Status Loader::load(const toml::table& root, DaemonConfig* cfg) {
  for (const Entry& entry : entries_in_file_order(root)) {
    bool known = std::any_of(config_fields().begin(), config_fields().end(),
                             [&](const ConfigField& f) { return f.section == entry.key->str(); });
    if (!known) return unknown_top_level(entry);
    if (Status s = load_section(entry, cfg); !s) return s;
  }
  // Rules that hold across keys, or on values a key-by-key read cannot judge.
  // Point at a line of this file when the file set one of the keys involved.
  if (auto problem = find_config_problem(*cfg)) {
    for (const std::string& key : problem->keys) {
      if (auto it = line_of_.find(key); it != line_of_.end()) {
        return error(it->second, key, problem->message);
      }
    }
    return error(0, problem->keys.front(), problem->message);
  }
  return Status::ok();
}

Status Loader::load_section(const Entry& section, DaemonConfig* cfg) {
  std::string_view name = section.key->str();
  const toml::table* table = section.node->as_table();
  if (table == nullptr)
    return wrong_type(*section.node, name, "a table ([" + std::string(name) + "])");
  for (const Entry& entry : entries_in_file_order(*table)) {
    std::string key = fmt::format("{}.{}", name, entry.key->str());
    const ConfigField* field = nullptr;
    std::string_view closest;
    size_t closest_distance = SIZE_MAX;
    for (const ConfigField& f : config_fields()) {
      if (f.section != name) continue;
      if (f.key == entry.key->str()) field = &f;
      size_t d = edit_distance(f.key, entry.key->str());
      if (d < closest_distance) closest_distance = d, closest = f.key;
    }
    if (field == nullptr) {
      std::string hint = closest_distance <= kMaxSuggestDistance
                             ? fmt::format(" (did you mean {}.{}?)", name, closest)
                             : "";
      return error(entry.line, key, "unknown key" + hint);
    }
    line_of_[key] = entry.line;
    if (Status s = read_field(*field, key, *entry.node, cfg); !s) return s;
  }
  return Status::ok();
}

Status Loader::unknown_top_level(const Entry& entry) const {
  std::string_view name = entry.key->str();
  if (entry.node->is_table()) {
    std::string_view closest;
    size_t closest_distance = SIZE_MAX;
    for (const ConfigField& f : config_fields()) {
      size_t d = edit_distance(f.section, name);
      if (d < closest_distance) closest_distance = d, closest = f.section;
    }
    std::string hint = closest_distance <= kMaxSuggestDistance
                           ? fmt::format(" (did you mean [{}]?)", closest)
                           : " (known: [daemon], [auth], [limits], [cluster])";
    return error(entry.line, name, fmt::format("unknown table{}", hint));
  }
  // A known key above every [section] header: the header was forgotten.
  for (const ConfigField& f : config_fields()) {
    if (f.key == name) {
      return error(entry.line, name,
                   fmt::format("unknown key (did you mean {}? it belongs under [{}])",
                               dotted_key(f), f.section));
    }
  }
  return error(entry.line, name, "unknown key");
}

Status Loader::read_field(const ConfigField& field, const std::string& key, const toml::node& node,
                          DaemonConfig* cfg) const {
  switch (field.kind) {
    case ConfigKind::kString: {
      const auto* value = node.as_string();
      if (value == nullptr) return wrong_type(node, key, "a string");
      cfg->*std::get<std::string DaemonConfig::*>(field.member) = value->get();
      return Status::ok();
    }
    case ConfigKind::kCount: {
      uint64_t value = 0;
      if (Status s = read_unsigned(node, key, UINT32_MAX, &value); !s) return s;
      cfg->*std::get<uint32_t DaemonConfig::*>(field.member) = static_cast<uint32_t>(value);
      return Status::ok();
    }
    case ConfigKind::kSize:
      return read_size(node, key, &(cfg->*std::get<uint64_t DaemonConfig::*>(field.member)));
    case ConfigKind::kMode:
      return read_mode(node, key, &(cfg->*std::get<uint32_t DaemonConfig::*>(field.member)));
    case ConfigKind::kIdList:
      return read_ids(node, key,
                      &(cfg->*std::get<std::vector<uint32_t> DaemonConfig::*>(field.member)));
    case ConfigKind::kStringList:
      return read_strings(
          node, key, &(cfg->*std::get<std::vector<std::string> DaemonConfig::*>(field.member)));
    case ConfigKind::kBool: {
      const auto* value = node.as_boolean();
      if (value == nullptr) return wrong_type(node, key, "a boolean (true or false)");
      cfg->*std::get<bool DaemonConfig::*>(field.member) = value->get();
      return Status::ok();
    }
  }
  return error(node, key, "internal error: unhandled key kind");
}

Status Loader::read_unsigned(const toml::node& node, std::string_view key, uint64_t max,
                             uint64_t* out) const {
  const auto* value = node.as_integer();
  if (value == nullptr) return wrong_type(node, key, "an integer");
  int64_t v = value->get();
  if (v < 0) return error(node, key, fmt::format("must not be negative, got {}", v));
  if (static_cast<uint64_t>(v) > max) {
    return error(node, key, fmt::format("{} is out of range (at most {})", v, max));
  }
  *out = static_cast<uint64_t>(v);
  return Status::ok();
}

Status Loader::read_size(const toml::node& node, std::string_view key, uint64_t* out) const {
  if (node.is_integer()) return read_unsigned(node, key, INT64_MAX, out);
  const auto* text = node.as_string();
  if (text == nullptr) return wrong_type(node, key, "an integer or a size string such as \"1G\"");
  if (!parse_byte_size(text->get(), out)) {
    return error(node, key,
                 fmt::format("\"{}\" is not a byte size; write 4096, \"256K\", \"64M\", \"1G\" or "
                             "\"1GiB\" (K/M/G/T are powers of 1024; \"GB\" is refused as "
                             "ambiguous)",
                             text->get()));
  }
  return Status::ok();
}

Status Loader::read_mode(const toml::node& node, std::string_view key, uint32_t* out) const {
  const auto* value = node.as_integer();
  if (value == nullptr) return wrong_type(node, key, "an octal integer such as 0o666");
  // "socket_mode = 666" is decimal 666 = 0o1232 in TOML: a silent wrong mode.
  // Only 0 reads the same in every base.
  if (value->get() != 0 &&
      (value->flags() & toml::value_flags::format_as_octal) != toml::value_flags::format_as_octal) {
    return error(node, key,
                 fmt::format("write the mode in TOML octal, e.g. 0o{0} (plain {0} is decimal)",
                             value->get()));
  }
  uint64_t mode = 0;
  if (Status s = read_unsigned(node, key, UINT32_MAX, &mode); !s) return s;
  *out = static_cast<uint32_t>(mode);
  return Status::ok();
}

Status Loader::read_ids(const toml::node& node, std::string_view key,
                        std::vector<uint32_t>* out) const {
  const auto* array = node.as_array();
  if (array == nullptr) return wrong_type(node, key, "an array of integers");
  std::vector<uint32_t> ids;
  for (size_t i = 0; i < array->size(); ++i) {
    uint64_t id = 0;
    std::string element = fmt::format("{}[{}]", key, i);
    if (Status s = read_unsigned((*array)[i], element, kMaxId, &id); !s) return s;
    ids.push_back(static_cast<uint32_t>(id));
  }
  *out = std::move(ids);
  return Status::ok();
}

// An array of strings, or one string for a list of one.
Status Loader::read_strings(const toml::node& node, std::string_view key,
                            std::vector<std::string>* out) const {
  if (const auto* one = node.as_string()) {
    *out = {one->get()};
    return Status::ok();
  }
  const auto* array = node.as_array();
  if (array == nullptr) return wrong_type(node, key, "an array of strings");
  std::vector<std::string> items;
  for (size_t i = 0; i < array->size(); ++i) {
    const auto* s = (*array)[i].as_string();
    if (s == nullptr) return wrong_type((*array)[i], fmt::format("{}[{}]", key, i), "a string");
    items.push_back(s->get());
  }
  *out = std::move(items);
  return Status::ok();
}

// Reads the whole file; ENOENT is reported through *missing so the caller can
// decide whether a missing file is fine.
Status read_file(const std::string& path, std::string* text, bool* missing) {
  *missing = false;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    *missing = err == ENOENT;
    return Status(GSYNC_ERR_INVALID,
                  fmt::format("{}: cannot open config file: {}", path, std::strerror(err)));
  }
  text->clear();
  char buf[8192];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      return Status(GSYNC_ERR_INVALID,
                    fmt::format("{}: cannot read config file: {}", path, std::strerror(err)));
    }
    if (n == 0) break;
    text->append(buf, static_cast<size_t>(n));
    if (text->size() > kMaxConfigFileBytes) {
      ::close(fd);
      return Status(GSYNC_ERR_INVALID, fmt::format("{}: config file is larger than {} bytes", path,
                                                   kMaxConfigFileBytes));
    }
  }
  ::close(fd);
  return Status::ok();
}

}  // namespace

Status load_config_file(const std::string& path, bool required, DaemonConfig* cfg) {
  std::string text;
  bool missing = false;
  if (Status s = read_file(path, &text, &missing); !s) {
    if (missing && !required) return Status::ok();
    return s;
  }
  return load_config_text(text, path, cfg);
}

Status load_config_text(std::string_view text, const std::string& name, DaemonConfig* cfg) {
  if (text.size() > kMaxConfigFileBytes)
    return Status(GSYNC_ERR_INVALID, fmt::format("{}: config file is larger than {} bytes", name,
                                                 kMaxConfigFileBytes));
  toml::table root;
  try {
    root = toml::parse(text, std::string_view(name));
  } catch (const toml::parse_error& e) {
    const toml::source_position& at = e.source().begin;
    return Status(GSYNC_ERR_INVALID,
                  fmt::format("{}:{}:{}: {}", name, at.line, at.column, e.description()));
  }
  // Work on a copy so that a bad file leaves *cfg as it was.
  DaemonConfig loaded = *cfg;
  if (Status s = Loader(name).load(root, &loaded); !s) return s;
  loaded.source = name;
  *cfg = std::move(loaded);
  return Status::ok();
}

}  // namespace gsync
