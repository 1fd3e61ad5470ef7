// SPDX-License-Identifier: Apache-2.0
//
// The stateless checks of what a client sends (daemon/shm/client_checks.h):
// its hello's identity and every field of a submission entry. The
// integration tests send the same through real sockets and rings
// (tests/integration/test_failures.cc); these pin the edges.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "daemon/core/text.h"
#include "daemon/shm/client_checks.h"
#include "daemon/shm/handshake.h"
#include "protocol/device.h"

namespace gsync {
namespace {

JoinRequest join(std::string job, int world, int rank, int local_size, int local_rank) {
  JoinRequest r;
  r.job_id = std::move(job);
  r.world_size = world;
  r.rank = rank;
  r.local_size = local_size;
  r.local_rank = local_rank;
  return r;
}

TEST(CheckJoin, JobIdsAndShapes) {
  EXPECT_TRUE(check_join_request(join("train-1", 2, 1, 2, 1), false));
  EXPECT_FALSE(check_join_request(join("", 1, 0, 1, 0), false));
  Status bad = check_join_request(join("a\nb\xff", 1, 0, 1, 0), false);
  EXPECT_EQ(bad.code(), GSYNC_ERR_INVALID);
  // The client's bytes come back escaped: one printable line.
  EXPECT_NE(bad.message().find("'a\\nb\\xff'"), std::string::npos) << bad.message();
  EXPECT_FALSE(check_join_request(join("j", 2, 2, 2, 0), false));
  EXPECT_FALSE(check_join_request(join("j", 2, 0, 3, 0), false));
  EXPECT_EQ(check_join_request(join("j", 4, 0, 2, 0), false).code(), GSYNC_ERR_REFUSED);
  EXPECT_TRUE(check_join_request(join("j", 4, 0, 2, 0), true));
}

TEST(ParseHello, RefusesWhatIsNotAHello) {
  proto::HelloRequest h{};
  h.magic = proto::kHelloMagic;
  h.version = proto::kVersion;
  std::memcpy(h.job_id, "j", 2);
  proto::HelloRequest out{};
  EXPECT_TRUE(parse_hello(&h, sizeof h, &out));
  EXPECT_FALSE(parse_hello(&h, 7, &out));
  EXPECT_FALSE(parse_hello(&h, sizeof h - 1, &out));
  std::memset(h.job_id, 'x', sizeof h.job_id);
  EXPECT_NE(parse_hello(&h, sizeof h, &out).message().find("NUL-terminated"), std::string::npos);
  h.version = 77;
  EXPECT_EQ(parse_hello(&h, sizeof h, &out).code(), GSYNC_ERR_VERSION);
}

TEST(Refusal, MessageIsPrintableAndFitsTheField) {
  proto::HelloReply r = refusal(Status(GSYNC_ERR_INVALID, std::string(1000, '\xff')));
  std::string msg(r.message, strnlen(r.message, sizeof r.message));
  EXPECT_LT(msg.size(), sizeof r.message);
  EXPECT_TRUE(valid_utf8(msg));
  EXPECT_EQ(msg.substr(0, 8), "\\xff\\xff");
}

proto::SubmitEntry entry() {
  proto::SubmitEntry e{};
  e.tag = 1;
  e.opcode = proto::wire(proto::Opcode::kAllreduce);
  e.dtype = proto::wire(proto::DType::kF32);
  e.redop = proto::wire(proto::RedOp::kSum);
  e.count = 16;
  return e;
}

TEST(CheckSubmission, EveryFieldAndTheArenaBounds) {
  proto::OpShape shape;
  uint64_t bytes = 0;
  auto check = [&](const proto::SubmitEntry& e) {
    return check_submission(e, 2, 4096, "job j rank 0", &shape, &bytes);
  };
  ASSERT_TRUE(check(entry()));
  EXPECT_EQ(bytes, 64u);
  auto e = entry();
  e.offset = 4096 - 63;  // one byte past the arena's end
  EXPECT_NE(check(e).message().find("ends past the 4096-byte arena"), std::string::npos);
  e.offset = ~0ull >> 1;  // offset + bytes wraps around
  EXPECT_FALSE(check(e));
  // Bit 63: device memory (protocol/device.h), checked against its
  // allocation by the jobs layer, which has the session's table.
  e.offset = proto::to_entry_offset({5, 4096});
  ASSERT_TRUE(check(e));
  EXPECT_EQ(bytes, 64u);
  e.offset = proto::to_entry_offset({5, 4098});  // not on a 4-byte element
  EXPECT_NE(check(e).message().find("offset 4098 of device allocation 5 is not aligned to its "
                                    "4-byte elements"),
            std::string::npos)
      << check(e).message();
  e.offset = proto::to_entry_offset({5, 4096});
  e.opcode = static_cast<uint8_t>(proto::Opcode::kPush);
  e.redop = 0;
  e.weight = 1;
  EXPECT_EQ(check(e).code(), GSYNC_ERR_UNSUPPORTED);
  EXPECT_NE(check(e).message().find("the parameter server takes host buffers"), std::string::npos)
      << check(e).message();
  e = entry();
  e.count = ~0ull / 4 + 1;  // count * 4 wraps around
  EXPECT_NE(check(e).message().find("absurd"), std::string::npos);
  e = entry();
  e.redop = proto::wire(proto::RedOp::kWeightedAvg);
  e.weight = -NAN;
  EXPECT_EQ(check(e).code(), GSYNC_ERR_INVALID);
  e = entry();
  e.opcode = proto::wire(proto::Opcode::kBroadcast);
  e.root = 2;
  EXPECT_NE(check(e).message().find("root 2 is not a rank of a 2-rank job"), std::string::npos);
  e = entry();
  e.opcode = proto::wire(proto::Opcode::kBarrier);
  EXPECT_NE(check(e).message().find("count must be 0"), std::string::npos);
  e.count = 0;
  e.offset = ~0ull;  // a barrier's offset is not looked at
  EXPECT_TRUE(check(e));
}

}  // namespace
}  // namespace gsync
