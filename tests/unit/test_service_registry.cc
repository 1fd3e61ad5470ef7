// SPDX-License-Identifier: Apache-2.0
//
// The control plane's registry of cross-host services (cluster/services.h),
// in-process: a message goes to the service that claimed its type, a write
// to the one whose tag its immediate carries, and a claim that collides
// with another's (or with the control plane's own types) is refused naming
// both. The daemon's real claims (engine, parameter server, batch leases)
// fit together.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "daemon/cluster/services.h"
#include "daemon/collective/engine.h"
#include "daemon/leases/lease_service.h"
#include "daemon/ps/service.h"

namespace gsync::cluster {
namespace {

struct Recorder : CrossHostService {
  std::vector<std::string> heard;
  void on_message(int peer, std::string_view msg) override {
    heard.push_back("msg " + std::to_string(peer) + " " + std::to_string(uint8_t(msg[0])));
  }
  void on_write(int peer, uint32_t, uint64_t, uint64_t, uint64_t imm) override {
    heard.push_back("write " + std::to_string(peer) + " " + std::to_string(imm >> 63));
  }
};

ServiceRegistry with_reserved() { return ServiceRegistry({1, 2, 15}); }

TEST(ServiceRegistry, AMessageAndAWriteReachTheServiceThatClaimedThem) {
  ServiceRegistry r = with_reserved();
  Recorder engine, ps, leases;
  ASSERT_TRUE(r.add(&engine, {"engine", {3, 4, 5}, uint64_t{1} << 63, 0}));
  ASSERT_TRUE(r.add(&ps, {"ps", {6, 7}, uint64_t{1} << 63, uint64_t{1} << 63}));
  ASSERT_TRUE(r.add(&leases, {"leases", {11}, 0, 0}));
  EXPECT_EQ(r.for_message(4), &engine);
  EXPECT_EQ(r.for_message(7), &ps);
  EXPECT_EQ(r.for_message(11), &leases);
  EXPECT_EQ(r.for_message(1), nullptr);  // the control plane's own
  EXPECT_EQ(r.for_message(99), nullptr);
  EXPECT_EQ(r.for_write(uint64_t{1} << 63 | 42), &ps);
  EXPECT_EQ(r.for_write(42), &engine);
  EXPECT_EQ(r.all(), (std::vector<CrossHostService*>{&engine, &ps, &leases}));
  r.remove(&ps);
  EXPECT_EQ(r.for_message(7), nullptr);
  EXPECT_EQ(r.for_write(uint64_t{1} << 63), nullptr);
  EXPECT_EQ(r.all().size(), 2u);
}

TEST(ServiceRegistry, ACollidingClaimIsRefusedNamingBoth) {
  ServiceRegistry r = with_reserved();
  Recorder a, b;
  ASSERT_TRUE(r.add(&a, {"the engine", {3, 4}, uint64_t{1} << 63, 0}));
  Status st = r.add(&b, {"the newcomer", {5, 4}, 0, 0});
  ASSERT_FALSE(st);
  EXPECT_NE(st.message().find("the newcomer: message type 4 is the engine's"), std::string::npos)
      << st.message();
  st = r.add(&b, {"the newcomer", {2}, 0, 0});
  ASSERT_FALSE(st);
  EXPECT_NE(st.message().find("message type 2 is the control plane's own"), std::string::npos)
      << st.message();
  // A tag that an immediate could carry for both.
  st = r.add(&b, {"the newcomer", {9}, uint64_t{3} << 62, uint64_t{1} << 62});
  ASSERT_FALSE(st);
  EXPECT_NE(st.message().find("could be the engine's"), std::string::npos) << st.message();
  st = r.add(&a, {"again", {20}, 0, 0});
  ASSERT_FALSE(st);
  EXPECT_NE(st.message().find("added already"), std::string::npos) << st.message();
  st = r.add(&b, {"the newcomer", {21}, 1, 3});
  ASSERT_FALSE(st);  // a tag bit outside its mask can never match
  // Nothing of the refused claims was kept.
  EXPECT_EQ(r.for_message(5), nullptr);
  EXPECT_EQ(r.all().size(), 1u);
}

TEST(ServiceRegistry, TheDaemonsOwnClaimsFitTogether) {
  ServiceRegistry r(std::vector<uint8_t>(std::begin(kControlPlaneTypes), std::end(kControlPlaneTypes)));
  Recorder engine, ps, leases;
  Status st = r.add(&engine, collective::Engine::claim());
  ASSERT_TRUE(st) << st.message();
  st = r.add(&ps, ps::Service::claim());
  ASSERT_TRUE(st) << st.message();
  st = r.add(&leases, leases::LeaseService::claim());
  ASSERT_TRUE(st) << st.message();
  EXPECT_EQ(r.for_message(collective::kOpReady), &engine);
  EXPECT_EQ(r.for_message(ps::kPsPush), &ps);
  EXPECT_EQ(r.for_message(leases::kLeaseGrant), &leases);
  EXPECT_EQ(r.for_write(ps::kPsWriteBit | 5), &ps);
  EXPECT_EQ(r.for_write(5), &engine);
}

}  // namespace
}  // namespace gsync::cluster
