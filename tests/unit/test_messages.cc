// SPDX-License-Identifier: Apache-2.0
//
// The daemon-to-daemon control messages with a variable tail (JobAnnounce,
// JobLeave): what is encoded decodes to the same thing, and every length or
// count that does not add up is refused (a peer's bytes are never trusted).
#include <gtest/gtest.h>

#include "daemon/cluster/messages.h"

namespace gsync::cluster {
namespace {

TEST(Messages, LeaveCarriesTheOpenOps) {
  JobLeave head;
  head.rank = 3;
  head.pid = 4242;
  set_field(head.job, sizeof head.job, "job-x");
  set_field(head.reason, sizeof head.reason, "exited");
  std::vector<proto::OpId> open = {{1, 7}, {2, 0}, {1, 8}};
  std::string msg = encode_leave(head, open);
  JobLeave got;
  std::vector<proto::OpId> back;
  ASSERT_TRUE(decode_leave(msg, &got, &back));
  EXPECT_EQ(got.rank, 3);
  EXPECT_EQ(got.pid, 4242);
  EXPECT_EQ(field(got.job, sizeof got.job), "job-x");
  EXPECT_EQ(back, open);
}

TEST(Messages, LeaveWithNothingOpenIsTheBareHeader) {
  JobLeave head;
  std::string msg = encode_leave(head, {});
  EXPECT_EQ(msg.size(), sizeof(JobLeave));
  JobLeave got;
  std::vector<proto::OpId> back = {{9, 9}};
  ASSERT_TRUE(decode_leave(msg, &got, &back));
  EXPECT_TRUE(back.empty());
}

TEST(Messages, LeaveListsAtMostTheCap) {
  std::vector<proto::OpId> open(kMaxLeaveOps + 5);
  for (size_t i = 0; i < open.size(); i++) open[i] = {0, i};
  std::string msg = encode_leave(JobLeave{}, open);
  JobLeave got;
  std::vector<proto::OpId> back;
  ASSERT_TRUE(decode_leave(msg, &got, &back));
  EXPECT_EQ(back.size(), kMaxLeaveOps);
  EXPECT_EQ(back.back().step, kMaxLeaveOps - 1);
}

TEST(Messages, LeaveWhoseCountDisagreesWithItsLengthIsRefused) {
  std::string msg = encode_leave(JobLeave{}, {{1, 1}, {1, 2}});
  JobLeave got;
  std::vector<proto::OpId> back;
  EXPECT_FALSE(decode_leave(msg.substr(0, msg.size() - 1), &got, &back));  // cut short
  EXPECT_FALSE(decode_leave(msg + "x", &got, &back));                     // trailing bytes
  EXPECT_FALSE(decode_leave(msg.substr(0, sizeof(JobLeave) - 1), &got, &back));
  JobLeave huge;
  huge.nopen = static_cast<uint32_t>(kMaxLeaveOps + 1);
  std::string lying(as_bytes(huge));
  lying.append((kMaxLeaveOps + 1) * sizeof(proto::OpId), '\0');
  EXPECT_FALSE(decode_leave(lying, &got, &back));
}

TEST(Messages, AnnounceRoundTripsAndRefusesBadCounts) {
  std::string msg = encode_announce("job-y", 8, {4, 5, 6});
  JobAnnounce a;
  std::vector<int> ranks;
  ASSERT_TRUE(decode_announce(msg, &a, &ranks));
  EXPECT_EQ(a.world_size, 8);
  EXPECT_EQ(ranks, (std::vector<int>{4, 5, 6}));
  EXPECT_FALSE(decode_announce(msg.substr(0, msg.size() - 4), &a, &ranks));
  JobAnnounce neg;
  neg.nranks = -1;
  EXPECT_FALSE(decode_announce(as_bytes(neg), &a, &ranks));
}

}  // namespace
}  // namespace gsync::cluster
