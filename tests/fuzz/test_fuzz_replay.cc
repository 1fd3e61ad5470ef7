// SPDX-License-Identifier: Apache-2.0
//
// The fuzz targets in the regular build (docs/testing.md, "The fuzzing
// lane"): every input kept under tests/fuzz/regressions/<target>/ - one
// file per bug the fuzzers found, liburing's habit - and every seed under
// tests/fuzz/corpus/<target>/ is one test, run through the target's own
// function with its properties checked (a failed FUZZ_CHECK throws here
// instead of aborting). A regression test is named after its file.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "tests/fuzz/fuzz_target.h"
#include "tests/fuzz/fuzz_targets.h"

namespace gsync::fuzz {

void check_failed(const char* what, const char* file, int line) {
  throw std::runtime_error(std::string("FUZZ_CHECK failed at ") + file + ":" +
                           std::to_string(line) + ": " + what);
}

namespace {

namespace fs = std::filesystem;
using Target = int (*)(const uint8_t*, size_t);

const std::map<std::string, Target>& targets() {
#define GSYNC_FUZZ_ENTRY_OF(name) {#name, &gsync_fuzz_##name},
  static const std::map<std::string, Target> all = {GSYNC_FUZZ_TARGETS(GSYNC_FUZZ_ENTRY_OF)};
#undef GSYNC_FUZZ_ENTRY_OF
  return all;
}

struct Case {
  std::string kind;    // "regressions" or "corpus"
  std::string target;  // "admin", ...
  fs::path file;
};

std::vector<Case> cases() {
  std::vector<Case> out;
  for (const char* kind : {"regressions", "corpus"}) {
    for (const auto& [name, fn] : targets()) {
      fs::path dir = fs::path(GSYNC_FUZZ_DIR) / kind / name;
      if (!fs::is_directory(dir)) continue;
      for (const auto& entry : fs::directory_iterator(dir))
        if (entry.is_regular_file() && entry.path().filename().string()[0] != '.')
          out.push_back({kind, name, entry.path()});
    }
  }
  std::sort(out.begin(), out.end(),
            [](const Case& a, const Case& b) { return a.file < b.file; });
  return out;
}

std::string test_name(const Case& c) {
  std::string name = c.target + "_" + c.file.filename().string();
  for (char& ch : name)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return name;
}

class Replay : public ::testing::TestWithParam<Case> {
 protected:
  static void SetUpTestSuite() { spdlog::set_level(spdlog::level::off); }
};

TEST_P(Replay, InputKeepsTheTargetsProperties) {
  const Case& c = GetParam();
  std::ifstream in(c.file, std::ios::binary);
  ASSERT_TRUE(in) << c.file;
  std::stringstream ss;
  ss << in.rdbuf();
  std::string bytes = ss.str();
  Target fn = targets().at(c.target);
  try {
    EXPECT_EQ(fn(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()), 0);
  } catch (const std::exception& e) {
    ADD_FAILURE() << c.file << ": " << e.what();
  }
}

// The seeds and kept inputs are there: a lane whose files went missing
// would replay nothing and pass.
TEST(ReplayFiles, EveryTargetHasASeedCorpus) {
  for (const auto& [name, fn] : targets()) {
    fs::path dir = fs::path(GSYNC_FUZZ_DIR) / "corpus" / name;
    ASSERT_TRUE(fs::is_directory(dir)) << dir;
    EXPECT_FALSE(fs::is_empty(dir)) << dir;
  }
}

std::vector<Case> regressions() {
  std::vector<Case> all = cases(), out;
  std::copy_if(all.begin(), all.end(), std::back_inserter(out),
               [](const Case& c) { return c.kind == "regressions"; });
  return out;
}

std::vector<Case> seeds() {
  std::vector<Case> all = cases(), out;
  std::copy_if(all.begin(), all.end(), std::back_inserter(out),
               [](const Case& c) { return c.kind == "corpus"; });
  return out;
}

INSTANTIATE_TEST_SUITE_P(Regression, Replay, ::testing::ValuesIn(regressions()),
                         [](const auto& info) { return test_name(info.param); });
INSTANTIATE_TEST_SUITE_P(Seed, Replay, ::testing::ValuesIn(seeds()),
                         [](const auto& info) { return test_name(info.param); });

}  // namespace
}  // namespace gsync::fuzz
