// SPDX-License-Identifier: Apache-2.0
//
// The [cluster] keys of membership on etcd (docs/membership.md): an array of
// endpoints (or one string), and the rules that make a config with etcd one
// that can start.
#include <gtest/gtest.h>

#include "daemon/config/config.h"

namespace gsync {
namespace {

DaemonConfig etcd_config() {
  DaemonConfig c;
  c.etcd_endpoints = {"http://127.0.0.1:2379"};
  c.cluster_name = "prod-a";
  c.address = "10.0.0.1";
  return c;
}

std::string problem(const DaemonConfig& c) {
  Status st = validate_config(c);
  return st ? "" : st.message();
}

TEST(ConfigEtcd, AGoodOneIsValid) { EXPECT_EQ(problem(etcd_config()), ""); }

TEST(ConfigEtcd, EachRuleNamesItsKey) {
  auto with = [](auto edit) {
    DaemonConfig c = etcd_config();
    edit(c);
    return problem(c);
  };
  EXPECT_NE(with([](DaemonConfig& c) { c.cluster_file = "/etc/gsync/cluster.toml"; })
                .find("not both"),
            std::string::npos);
  EXPECT_NE(with([](DaemonConfig& c) { c.etcd_endpoints = {"127.0.0.1:2379"}; })
                .find("cluster.etcd"),
            std::string::npos);
  EXPECT_NE(with([](DaemonConfig& c) { c.cluster_name.clear(); }).find("cluster.name"),
            std::string::npos);
  EXPECT_NE(with([](DaemonConfig& c) { c.cluster_name = "a/b"; }).find("cluster.name"),
            std::string::npos);
  EXPECT_NE(with([](DaemonConfig& c) { c.etcd_prefix = "/gsync"; }).find("etcd_prefix"),
            std::string::npos);
  EXPECT_NE(with([](DaemonConfig& c) { c.etcd_lease_ttl_s = 0; }).find("etcd_lease_ttl_s"),
            std::string::npos);
  EXPECT_NE(with([](DaemonConfig& c) { c.address.clear(); }).find("cluster.address"),
            std::string::npos);
  EXPECT_NE(with([](DaemonConfig& c) { c.port = 70000; }).find("cluster.port"),
            std::string::npos);
  // Any transport goes with etcd: verbs and DPDK links too (docs/membership.md).
  EXPECT_EQ(with([](DaemonConfig& c) { c.transport = "verbs"; }), "");
  EXPECT_EQ(with([](DaemonConfig& c) {
              c.transport = "dpdk";
              c.dpdk_eal_args = "--no-huge --no-pci --vdev=net_memif0";
            }),
            "");
  // Without etcd none of this is asked for.
  DaemonConfig plain;
  plain.port = 0;
  EXPECT_EQ(problem(plain), "");
}

TEST(ConfigEtcd, EndpointsAreAnArrayOrOneString) {
  DaemonConfig c;
  Status st = load_config_text(R"([cluster]
etcd = ["http://10.0.0.1:2379", "http://10.0.0.2:2379"]
name = "prod-a"
address = "10.0.0.9"
port = 7701
rack = "r2"
)",
                               "test.toml", &c);
  ASSERT_TRUE(st) << st.message();
  EXPECT_EQ(c.etcd_endpoints,
            (std::vector<std::string>{"http://10.0.0.1:2379", "http://10.0.0.2:2379"}));
  EXPECT_EQ(c.port, 7701u);
  EXPECT_EQ(c.rack, "r2");
  // The printed config reads back the same.
  DaemonConfig again;
  ASSERT_TRUE(load_config_text(config_to_toml(c), "printed.toml", &again));
  EXPECT_EQ(again.etcd_endpoints, c.etcd_endpoints);

  DaemonConfig one;
  ASSERT_TRUE(load_config_text("[cluster]\netcd = \"http://h:2379\"\nname = \"x\"\naddress = "
                               "\"10.0.0.1\"\n",
                               "one.toml", &one));
  EXPECT_EQ(one.etcd_endpoints, std::vector<std::string>{"http://h:2379"});

  DaemonConfig bad;
  st = load_config_text("[cluster]\netcd = [1, 2]\n", "bad.toml", &bad);
  EXPECT_FALSE(st);
  EXPECT_NE(st.message().find("etcd[0]"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace gsync
