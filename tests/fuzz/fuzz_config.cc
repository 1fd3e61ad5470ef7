// SPDX-License-Identifier: Apache-2.0
//
// The config loader (daemon/config/) on any text, as gsyncd --config reads
// a file. Properties: a text that loads gives a config that validates, is
// printed (config_to_toml) as a text that loads back to the same config,
// and shows as JSON without a throw; a text that does not load leaves the
// config as it was and says why.
#include <nlohmann/json.hpp>

#include "daemon/config/config.h"
#include "daemon/config/config_json.h"
#include "daemon/core/json_text.h"
#include "tests/fuzz/fuzz_target.h"

GSYNC_FUZZ_TARGET(config) {
  using namespace gsync;
  std::string_view text = fuzz::text_of(data, size);
  DaemonConfig cfg;
  const std::string before = config_to_toml(cfg);
  Status st = load_config_text(text, "fuzz.toml", &cfg);
  if (!st) {
    FUZZ_CHECK(!st.message().empty());
    FUZZ_CHECK(config_to_toml(cfg) == before);
    return 0;
  }
  FUZZ_CHECK(validate_config(cfg));
  FUZZ_CHECK(cfg.source == "fuzz.toml");
  std::string printed = config_to_toml(cfg);
  DaemonConfig back;
  Status again = load_config_text(printed, "fuzz.toml", &back);
  FUZZ_CHECK(again);
  FUZZ_CHECK(config_to_toml(back) == printed);
  FUZZ_CHECK(!nlohmann::json::parse(json_text(config_to_json(cfg)), nullptr, false).is_discarded());
  return 0;
}
