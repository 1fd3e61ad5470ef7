// SPDX-License-Identifier: Apache-2.0
//
// What a daemon writes about itself in etcd (daemon/cluster/etcd/record.h):
// the record round-trips, and one that another writer got wrong is refused
// naming the field; the key layout.
#include <gtest/gtest.h>

#include "daemon/cluster/etcd/record.h"

namespace gsync::cluster::etcd {
namespace {

HostRecord sample() {
  HostRecord r;
  r.id = "h11";
  r.address = "10.0.1.11";
  r.port = 7700;
  r.rack = "r1";
  r.slot = 3;
  r.version = "0.9.0";
  r.build_id = "abc123";
  r.pid = 4242;
  return r;
}

TEST(EtcdRecord, RoundTrips) {
  HostRecord back;
  ASSERT_TRUE(decode_record(encode_record(sample()), &back));
  EXPECT_EQ(back.id, "h11");
  EXPECT_EQ(back.address, "10.0.1.11");
  EXPECT_EQ(back.port, 7700);
  EXPECT_EQ(back.rack, "r1");
  EXPECT_EQ(back.slot, 3);
  EXPECT_EQ(back.version, "0.9.0");
  EXPECT_EQ(back.build_id, "abc123");
  EXPECT_EQ(back.pid, 4242u);
}

TEST(EtcdRecord, BadRecordsNameTheField) {
  struct Case {
    const char* json;
    const char* names;
  } cases[] = {
      {"not json", "JSON"},
      {"[1,2]", "JSON object"},
      {R"({"address":"a","port":1,"rack":"r","slot":0,"version":"","build_id":"","pid":1})", "'id'"},
      {R"({"id":"","address":"a","port":1,"rack":"r","slot":0,"version":"","build_id":"","pid":1})",
       "'id'"},
      {R"({"id":"a/b","address":"a","port":1,"rack":"r","slot":0,"version":"","build_id":"","pid":1})",
       "'/'"},
      {R"({"id":"h","address":"a","port":0,"rack":"r","slot":0,"version":"","build_id":"","pid":1})",
       "'port'"},
      {R"({"id":"h","address":"a","port":"1","rack":"r","slot":0,"version":"","build_id":"","pid":1})",
       "'port'"},
      {R"({"id":"h","address":"a","port":1,"rack":"r","slot":4096,"version":"","build_id":"","pid":1})",
       "'slot'"},
      {R"({"id":"h","address":"a","port":1,"rack":"r","slot":-1,"version":"","build_id":"","pid":1})",
       "'slot'"},
      {R"({"id":"h\u0001","address":"a","port":1,"rack":"r","slot":0,"version":"","build_id":"","pid":1})",
       "'id'"},
      {R"({"id":"h","address":"a","port":1,"rack":"r","slot":0,"version":"","build_id":"","pid":-5})",
       "'pid'"},
  };
  for (const auto& c : cases) {
    HostRecord r;
    Status st = decode_record(c.json, &r);
    EXPECT_FALSE(st) << c.json;
    EXPECT_NE(st.message().find(c.names), std::string::npos) << c.json << ": " << st.message();
  }
}

TEST(EtcdRecord, Keys) {
  std::string p = cluster_prefix("/gsync/", "prod-a");
  EXPECT_EQ(p, "/gsync/prod-a/");
  EXPECT_EQ(host_key(p, "h1"), "/gsync/prod-a/hosts/h1");
  EXPECT_EQ(hosts_prefix(p), "/gsync/prod-a/hosts/");
  EXPECT_EQ(slot_by_id_key(p, "h1"), "/gsync/prod-a/slots/id/h1");
  EXPECT_EQ(slot_by_number_key(p, 7), "/gsync/prod-a/slots/n/7");
  EXPECT_EQ(id_of_host_key(p, "/gsync/prod-a/hosts/h1"), "h1");
  EXPECT_EQ(id_of_host_key(p, "/gsync/prod-a/hosts/"), "");
  EXPECT_EQ(id_of_host_key(p, "/gsync/prod-b/hosts/h1"), "");
}

}  // namespace
}  // namespace gsync::cluster::etcd
