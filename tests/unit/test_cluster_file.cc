// SPDX-License-Identifier: Apache-2.0
//
// The cluster file's parser (daemon/cluster/cluster_file.h) on texts, as
// the fuzz target tests/fuzz/fuzz_cluster_file.cc drives it: every error
// names the file and line and what is wrong, in printable text.
#include <gtest/gtest.h>

#include "daemon/cluster/cluster_file.h"
#include "daemon/core/text.h"

namespace gsync {
namespace {

// One line an operator can read: valid UTF-8, no control character.
bool one_printable_line(const std::string& s) {
  if (!valid_utf8(s)) return false;
  for (unsigned char c : s)
    if (c < 0x20 || c == 0x7f) return false;
  return true;
}

constexpr const char* kGood = R"(name = "prod-a"
[[hosts]]
id = "h1"
address = "10.0.0.1"
port = 7700
rack = "r1"
[[hosts]]
id = "h2"
address = "10.0.0.2"
port = 7700
)";

TEST(ClusterFile, ParsesAndFindsSelfById) {
  ClusterFile cf;
  Status st = parse_cluster_text(kGood, "c.toml", &cf);
  ASSERT_TRUE(st) << st.message();
  EXPECT_EQ(cf.name, "prod-a");
  ASSERT_EQ(cf.hosts.size(), 2u);
  EXPECT_EQ(cf.hosts[1].rack, "default");
  EXPECT_EQ(cf.self, -1);
  ASSERT_TRUE(find_self("h2", &cf));
  EXPECT_EQ(cf.self, 1);
  Status missing = find_self("h9", &cf);
  EXPECT_NE(missing.message().find("'h9' is not in the file"), std::string::npos)
      << missing.message();
}

TEST(ClusterFile, ErrorsNameTheLineAndAreAlwaysPrintable) {
  struct Case {
    std::string text, says;
  } cases[] = {
      {"name = \"x\"\n[[hosts]]\nid = \"h1\"\naddress = \"a\"\nport = 70000\n", "c.toml:5: hosts.port"},
      {"name = \"x\"\n[[hosts]]\nid = \"h\\u0000\"\naddress = \"a\"\nport = 1\n",
       "c.toml:3: hosts.id: \"h\\x00\" must be printable"},
      {"name = \"\"\n", "c.toml:1: name: \"\" must be printable text of 1 to 255 bytes"},
      {"name = \"x\"\n[[hosts]]\nid = \"h1\"\naddress = \"a\"\nport = 1\n"
       "[[hosts]]\nid = \"h1\"\naddress = \"b\"\nport = 1\n",
       "c.toml:6: host id 'h1' appears twice"},
      {"name = \"x\"\n\"k\\u001b[2J\" = 1\n", "unknown key"},
      {"name = \"x\"\n", "the cluster has no [[hosts]]"},
      {"name = [[[\n", "c.toml:1:"},
  };
  for (const auto& c : cases) {
    ClusterFile cf;
    Status st = parse_cluster_text(c.text, "c.toml", &cf);
    EXPECT_FALSE(st) << c.text;
    EXPECT_NE(st.message().find(c.says), std::string::npos) << st.message();
    EXPECT_TRUE(one_printable_line(st.message())) << st.message();
  }
}

TEST(ClusterFile, TooManyHostsStopsAtTheLimit) {
  std::string text = "name = \"big\"\n";
  for (size_t i = 0; i <= kMaxClusterHosts; i++)
    text += "[[hosts]]\nid = \"h" + std::to_string(i) + "\"\naddress = \"a\"\nport = " +
            std::to_string(1 + i) + "\n";
  ClusterFile cf;
  Status st = parse_cluster_text(text, "c.toml", &cf);
  EXPECT_NE(st.message().find("more than 1024 hosts"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace gsync
