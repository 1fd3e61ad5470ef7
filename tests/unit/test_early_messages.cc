// SPDX-License-Identifier: Apache-2.0
//
// The one buffer of messages that came before their op began
// (daemon/cluster/early_messages.h), in process: taken in arrival order
// and only by the service and key that held them; a peer's later message
// of a type replaces its earlier one; a job's and a service's go with
// them; what nobody takes expires; and the buffer's bounds hold against a
// peer that floods it.
#include <gtest/gtest.h>

#include <string>

#include "daemon/cluster/early_messages.h"

namespace gsync::cluster {
namespace {

// Stand-ins for two services: only their addresses are used, as owners.
const auto* kEngine = reinterpret_cast<const CrossHostService*>(0x1000);
const auto* kPs = reinterpret_cast<const CrossHostService*>(0x2000);

const auto kNever = Clock::time_point::max();

std::string msg(char type, const std::string& body) { return std::string(1, type) + body; }

TEST(EarlyMessages, TakenInArrivalOrderByTheirOwnerAndKeyOnly) {
  EarlyMessages early;
  const auto t0 = Clock::now();
  ASSERT_TRUE(early.hold({kEngine, "j", 3, 7}, 2, msg('\x06', "ready from 2"), t0, kNever));
  ASSERT_TRUE(early.hold({kEngine, "j", 3, 7}, 1, msg('\x06', "ready from 1"), t0, kNever));
  ASSERT_TRUE(early.hold({kPs, "j", 3, 7}, 1, msg('\x0a', "regions"), t0, kNever));
  ASSERT_TRUE(early.hold({kEngine, "j", 3, 8}, 1, msg('\x06', "next step"), t0, kNever));
  EXPECT_EQ(early.messages(), 4u);

  auto held = early.take({kEngine, "j", 3, 7});
  ASSERT_EQ(held.size(), 2u);
  EXPECT_EQ(held[0].peer, 2);
  EXPECT_EQ(held[0].bytes, msg('\x06', "ready from 2"));
  EXPECT_EQ(held[1].peer, 1);
  EXPECT_EQ(held[0].at, t0);
  EXPECT_TRUE(early.take({kEngine, "j", 3, 7}).empty());  // taken once
  EXPECT_EQ(early.messages(), 2u);
  EXPECT_EQ(early.take({kPs, "j", 3, 7}).size(), 1u);
}

TEST(EarlyMessages, APeersLaterMessageOfATypeReplacesItsEarlierOne) {
  EarlyMessages early;
  const auto t0 = Clock::now();
  early.hold({kEngine, "j", 1, 1}, 4, msg('\x06', "first"), t0, kNever);
  early.hold({kEngine, "j", 1, 1}, 4, msg('\x07', "abort"), t0, kNever);
  early.hold({kEngine, "j", 1, 1}, 4, msg('\x06', "second, longer"), t0, kNever);
  EXPECT_EQ(early.messages(), 2u);
  EXPECT_EQ(early.bytes(), msg('\x07', "abort").size() + msg('\x06', "second, longer").size());
  auto held = early.take({kEngine, "j", 1, 1});
  ASSERT_EQ(held.size(), 2u);
  EXPECT_EQ(held[0].bytes, msg('\x07', "abort"));
  EXPECT_EQ(held[1].bytes, msg('\x06', "second, longer"));
  EXPECT_EQ(early.bytes(), 0u);
}

TEST(EarlyMessages, AJobsAndAServicesMessagesGoWithThem) {
  EarlyMessages early;
  const auto t0 = Clock::now();
  early.hold({kEngine, "a", 1, 1}, 1, msg('\x06', "x"), t0, kNever);
  early.hold({kEngine, "a", 2, 1}, 1, msg('\x06', "x"), t0, kNever);
  // A job whose name starts alike.
  early.hold({kEngine, "ab", 1, 1}, 1, msg('\x06', "x"), t0, kNever);
  early.hold({kPs, "a", 1, 0}, 1, msg('\x0a', "x"), t0, kNever);
  early.drop_job(kEngine, "a");
  EXPECT_EQ(early.messages(), 2u);
  EXPECT_EQ(early.take({kEngine, "ab", 1, 1}).size(), 1u);
  early.drop_owner(kPs);
  EXPECT_EQ(early.messages(), 0u);
  EXPECT_EQ(early.bytes(), 0u);
}

TEST(EarlyMessages, WhatNobodyTakesExpiresWhenTheLatestOfItsHoldersSaid) {
  EarlyMessages early;
  const auto t0 = Clock::now();
  const auto life = std::chrono::seconds(120);
  early.hold({kEngine, "j", 1, 1}, 1, msg('\x06', "old"), t0, t0 + life);
  early.hold({kEngine, "j", 2, 1}, 1, msg('\x06', "old"), t0, t0 + life);
  early.hold({kEngine, "j", 2, 1}, 2, msg('\x06', "newer"), t0, t0 + 2 * life);
  early.hold({kPs, "j", 2, 0}, 1, msg('\x0a', "regions"), t0, kNever);
  EXPECT_EQ(early.expire(t0 + life), 0u);
  EXPECT_EQ(early.expire(t0 + life + std::chrono::seconds(1)), 1u);
  EXPECT_EQ(early.take({kEngine, "j", 2, 1}).size(), 2u);  // kept: a later message said longer
  EXPECT_EQ(early.expire(t0 + 1000 * life), 0u);
  EXPECT_EQ(early.take({kPs, "j", 2, 0}).size(), 1u);  // never expires
}

TEST(EarlyMessages, AFullBufferDropsAndSaysSo) {
  EarlyMessages early(/*max_messages=*/3, /*max_bytes=*/64);
  const auto t0 = Clock::now();
  for (uint64_t step = 0; step < 3; step++)
    EXPECT_TRUE(early.hold({kEngine, "j", 1, step}, 1, msg('\x06', "x"), t0, kNever));
  EXPECT_FALSE(early.hold({kEngine, "j", 1, 9}, 1, msg('\x06', "x"), t0, kNever));
  EXPECT_EQ(early.messages(), 3u);
  early.take({kEngine, "j", 1, 0});
  EXPECT_FALSE(early.hold({kEngine, "j", 1, 9}, 1, msg('\x06', std::string(64, 'y')), t0, kNever));
  EXPECT_TRUE(early.hold({kEngine, "j", 1, 9}, 1, msg('\x06', "fits"), t0, kNever));
  EXPECT_EQ(early.messages(), 3u);
}

}  // namespace
}  // namespace gsync::cluster
