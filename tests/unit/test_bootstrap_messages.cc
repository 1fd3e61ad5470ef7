// SPDX-License-Identifier: Apache-2.0
//
// The peering context's and the verbs provider's messages on the
// bootstrap link (daemon/transport/peering/frame.h, verbs/frame.h): each
// decoder refuses what is short or long, and a user message in parts is
// never buffered past kMaxControl (a peer that sent parts forever used to
// grow the daemon's memory without bound).
#include <gtest/gtest.h>

#include <string>

#include "daemon/transport/peering/frame.h"
#include "daemon/transport/transport.h"
#include "daemon/transport/verbs/frame.h"

namespace gsync::transport {
namespace {

using peering::UserReassembly;
using Result = UserReassembly::Result;

TEST(UserReassembly, PartsMakeOneMessage) {
  UserReassembly r;
  std::string_view whole;
  EXPECT_EQ(r.add("abc", true, &whole), Result::kWhole);
  EXPECT_EQ(whole, "abc");
  EXPECT_EQ(r.add("ab", false, &whole), Result::kMore);
  EXPECT_EQ(r.add("cd", false, &whole), Result::kMore);
  EXPECT_EQ(r.add("e", true, &whole), Result::kWhole);
  EXPECT_EQ(whole, "abcde");
  EXPECT_EQ(r.buffered(), 0u);
}

TEST(UserReassembly, PartsBeyondTheLimitAreDroppedWholeAndBufferNothing) {
  UserReassembly r;
  std::string_view whole;
  std::string part(kMaxControl - 1, 'x');
  EXPECT_EQ(r.add(part, false, &whole), Result::kMore);
  // A thousand more parts: none of them is kept.
  for (int i = 0; i < 1000; i++) {
    EXPECT_EQ(r.add(part, false, &whole), Result::kMore);
    ASSERT_EQ(r.buffered(), 0u) << "part " << i;
  }
  EXPECT_EQ(r.add("tail", true, &whole), Result::kDropped);
  // The next message is whole again, nothing of the dropped one in it.
  EXPECT_EQ(r.add("next", true, &whole), Result::kWhole);
  EXPECT_EQ(whole, "next");
  // Exactly kMaxControl in two parts is a message.
  EXPECT_EQ(r.add(part, false, &whole), Result::kMore);
  EXPECT_EQ(r.add("y", true, &whole), Result::kWhole);
  EXPECT_EQ(whole.size(), kMaxControl);
  // A reset link forgets a message half received.
  EXPECT_EQ(r.add("half", false, &whole), Result::kMore);
  r.reset();
  EXPECT_EQ(r.add("fresh", true, &whole), Result::kWhole);
  EXPECT_EQ(whole, "fresh");
}

TEST(BootstrapDecoders, RefuseWhatIsShortOrLong) {
  peering::Caps caps;
  EXPECT_TRUE(peering::decode(peering::encode(peering::Caps{peering::LinkKind::kVerbs,
                                                                  "rxe0 port 1"}),
                                &caps));
  EXPECT_EQ(caps.detail, "rxe0 port 1");
  EXPECT_FALSE(peering::decode(std::string_view("C"), &caps));
  EXPECT_FALSE(peering::decode(std::string_view("C\x09"), &caps));  // no such link kind
  uint32_t id = 0;
  EXPECT_TRUE(peering::decode_id(peering::encode_id(peering::Ctl::kRetire, 7), &id));
  EXPECT_EQ(id, 7u);
  EXPECT_FALSE(peering::decode_id(peering::encode_id(peering::Ctl::kRetire, 7) + "x", &id));
  verbs::QpInfo qp;
  qp.qpn = 17;
  std::string wire = verbs::encode(qp);
  EXPECT_TRUE(verbs::decode(wire, &qp));
  EXPECT_FALSE(verbs::decode(std::string_view(wire).substr(0, wire.size() - 1), &qp));
  EXPECT_FALSE(verbs::decode(wire + "x", &qp));
  verbs::Ready ready;
  EXPECT_FALSE(verbs::decode(std::string_view("R\x01"), &ready));
  verbs::RegionInfo region;
  EXPECT_FALSE(verbs::decode(std::string_view("G\x01\x02"), &region));
}

}  // namespace
}  // namespace gsync::transport
