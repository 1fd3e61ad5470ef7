// SPDX-License-Identifier: Apache-2.0
//
// The tuning table (daemon/tuning/tune_table.h) and a job's plan choice
// (protocol/plan_choice.h): what a file may say, what it is refused for
// (naming the entry, never quoting the text), and which entry an op of a
// given size among given hosts gets.
#include <gtest/gtest.h>

#include <string>

#include "daemon/tuning/tune_table.h"
#include "protocol/plan_choice.h"

namespace gsync::tuning {
namespace {

const char* kTable = R"({"format": 1, "entries": [
  {"hosts": ["h1", "h2"], "bytes": 4096, "algorithm": "direct", "us": 30.5},
  {"hosts": ["h1", "h2"], "bytes": 1048576, "algorithm": "doubling", "chunk_bytes": 65536},
  {"hosts": ["h1", "h2"], "bytes": 268435456, "algorithm": "ring", "chunk_bytes": 4194304},
  {"hosts": ["h1", "h2", "h3"], "bytes": 65536, "algorithm": "tree"}]})";

TEST(SizeBand, IsTheCeilingOfLog2) {
  EXPECT_EQ(size_band(0), 0);
  EXPECT_EQ(size_band(1), 0);
  EXPECT_EQ(size_band(2), 1);
  EXPECT_EQ(size_band(4096), 12);
  EXPECT_EQ(size_band(4097), 13);
  EXPECT_EQ(size_band(uint64_t{256} << 20), 28);
  EXPECT_EQ(size_band(uint64_t{1} << 62), 62);
}

TEST(TuneTable, LooksUpTheNearestBandForExactlyTheseHosts) {
  TuneTable t;
  ASSERT_TRUE(TuneTable::parse(kTable, &t));
  EXPECT_EQ(t.size(), 4u);
  const std::vector<std::string> two = {"h1", "h2"};
  auto at = [&](uint64_t bytes) { return t.lookup(two, bytes); };
  ASSERT_TRUE(at(100));
  EXPECT_EQ(at(100)->algo, 3);  // direct: below the smallest band
  EXPECT_EQ(at(8192)->algo, 3);
  EXPECT_EQ(at(1 << 20)->algo, 5);
  EXPECT_EQ(at(1 << 20)->chunk_bytes, 65536u);
  // 2^16 is 4 bands from 2^12 and from 2^20: the smaller band wins the tie.
  EXPECT_EQ(at(1 << 16)->algo, 3);
  EXPECT_EQ(at((1 << 16) + 1)->algo, 5);
  EXPECT_EQ(at(uint64_t{1} << 34)->algo, 1);  // above the largest: ring
  EXPECT_EQ(at(uint64_t{1} << 34)->chunk_bytes, 4194304u);
  // Other host sets: their own entries or none.
  EXPECT_EQ(t.lookup({"h1", "h2", "h3"}, 1 << 30)->algo, 4);
  EXPECT_FALSE(t.lookup({"h2", "h1"}, 4096));
  EXPECT_FALSE(t.lookup({"h1"}, 4096));
}

TEST(TuneTable, ItsDigestTellsTablesApartAndNoneIsZero) {
  TuneTable t, same, other, none;
  ASSERT_TRUE(TuneTable::parse(kTable, &t));
  ASSERT_TRUE(TuneTable::parse(t.to_json(), &same));
  std::string changed = kTable;
  changed.replace(changed.find("\"tree\""), 6, "\"ring\"");
  ASSERT_TRUE(TuneTable::parse(changed, &other));
  EXPECT_EQ(none.digest(), 0u);
  EXPECT_NE(t.digest(), 0u);
  EXPECT_LT(t.digest(), 1u << 24);
  EXPECT_EQ(t.digest(), same.digest());
  EXPECT_NE(t.digest(), other.digest());
}

TEST(TuneTable, WritesWhatItReads) {
  TuneTable t, again;
  ASSERT_TRUE(TuneTable::parse(kTable, &t));
  Status st = TuneTable::parse(t.to_json(), &again);
  ASSERT_TRUE(st) << st.message();
  EXPECT_EQ(again.to_json(), t.to_json());
  EXPECT_EQ(again.lookup({"h1", "h2"}, 1 << 20)->chunk_bytes, 65536u);
}

TEST(TuneTable, RefusesWhatIsWrongNamingTheEntryAndNotQuotingTheFile) {
  struct Case {
    const char* text;
    const char* says;
  };
  const Case cases[] = {
      {"root:x:0:0:secret", "not a JSON object"},
      {R"({"entries": []})", "\"format\": 1"},
      {R"({"format": 2, "entries": []})", "\"format\": 1"},
      {R"({"format": 1})", "no \"entries\""},
      {R"({"format": 1, "entries": [7]})", "entry 0: not an object"},
      {R"({"format": 1, "entries": [{"hosts": [], "bytes": 1, "algorithm": "ring"}]})",
       "entry 0: \"hosts\""},
      {R"({"format": 1, "entries": [{"hosts": [""], "bytes": 1, "algorithm": "ring"}]})",
       "a host id"},
      {R"({"format": 1, "entries": [{"hosts": ["a"], "bytes": 0, "algorithm": "ring"}]})",
       "\"bytes\" must be a positive integer"},
      {R"({"format": 1, "entries": [{"hosts": ["a"], "bytes": 8, "algorithm": "auto"}]})",
       "\"algorithm\" must be"},
      {R"({"format": 1, "entries": [{"hosts": ["a"], "bytes": 8, "algorithm": "best"}]})",
       "\"algorithm\" must be"},
      {R"({"format": 1, "entries": [{"hosts": ["a"], "bytes": 8, "algorithm": "ring",
          "chunk_bytes": 1000}]})",
       "not a multiple of 4096"},
      {R"({"format": 1, "entries": [{"hosts": ["a"], "bytes": 8, "algorithm": "ring",
          "us": -1}]})",
       "\"us\" must be a number >= 0"},
      {R"({"format": 1, "entries": [{"hosts": ["secret"], "bytes": 8, "algorithm": "ring"},
          {"hosts": ["secret"], "bytes": 7, "algorithm": "tree"}]})",
       "entry 1: the same hosts and size band (sizes up to 8 bytes) as entry 0"},
      {R"({"format": 1, "entries": [{"hosts": ["a"], "bytes": 9223372036854775808,
          "algorithm": "ring"}]})",
       "up to 2^62"},
  };
  for (const Case& c : cases) {
    TuneTable t;
    ASSERT_TRUE(TuneTable::parse(kTable, &t));
    Status st = TuneTable::parse(c.text, &t);
    EXPECT_FALSE(st) << c.text;
    EXPECT_NE(st.message().find(c.says), std::string::npos) << c.text << " -> " << st.message();
    EXPECT_EQ(st.message().find("secret"), std::string::npos) << st.message();
    EXPECT_EQ(t.size(), 4u) << "a refused table changed the old one";
  }
  std::string big(kMaxFileBytes + 1, ' ');
  TuneTable t;
  EXPECT_NE(TuneTable::parse(big, &t).message().find("over the"), std::string::npos);
}

TEST(PlanChoice, TravelsInOneWordAndRefusesWhatIsNotAPlan) {
  for (uint8_t a = 0; a <= proto::kAlgoMax; a++)
    for (uint64_t chunk : {uint64_t{0}, uint64_t{4096}, uint64_t{1} << 20, proto::kMaxChunkBytes}) {
      proto::PlanChoice p{a, chunk}, back;
      ASSERT_EQ(proto::from_wire_plan(proto::to_wire(p), &back), "");
      EXPECT_EQ(back, p) << proto::describe(p);
    }
  proto::PlanChoice p;
  EXPECT_NE(proto::from_wire_plan(0x10, &p), "");  // unknown bits
  EXPECT_NE(proto::from_wire_plan(6, &p), "");     // no algorithm 6
  EXPECT_NE(proto::from_wire_plan(0x0fffff00u | 1u, &p), "");  // over 1 GiB
  EXPECT_NE(proto::check_chunk_bytes(4097), "");
  EXPECT_EQ(proto::check_chunk_bytes(0), "");
  uint8_t algo = 9;
  EXPECT_TRUE(proto::algo_by_name("doubling", &algo));
  EXPECT_EQ(algo, 5);
  EXPECT_FALSE(proto::algo_by_name("Ring", &algo));
  EXPECT_EQ(proto::describe({1, 65536}), "ring, chunks of 64 KiB");
}

}  // namespace
}  // namespace gsync::tuning
