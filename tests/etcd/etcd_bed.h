// SPDX-License-Identifier: Apache-2.0
//
// The test bed the etcd suite runs on: loopback hosts registered in a real
// etcd (or a cluster file, to compare) with 2 s leases, and ops that time
// out after 20 s.
#pragma once

#include <gtest/gtest.h>

#include <memory>

#include "tools/testbed/testbed.h"

namespace gsync::test {

constexpr int kTtlS = 2;

inline std::unique_ptr<testbed::Testbed> make_etcd_bed(int hosts, bool etcd = true,
                                                       int etcd_members = 1) {
  testbed::Options o;
  o.hosts = hosts;
  o.racks = 1;
  o.etcd = etcd;
  o.etcd_members = etcd_members;
  o.loopback = true;  // as an etcd bed is
  o.etcd_lease_ttl_s = kTtlS;
  o.daemon_args = {"--op-timeout-ms", "20000"};
  std::unique_ptr<testbed::Testbed> bed;
  Status st = testbed::Testbed::create(o, &bed);
  EXPECT_TRUE(st) << st.message();
  return bed;
}

}  // namespace gsync::test
