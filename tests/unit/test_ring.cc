// SPDX-License-Identifier: Apache-2.0
//
// The daemon side of the shared-memory session: sealing, bounds checks,
// and what happens when the client corrupts ring indices.
#include <fcntl.h>
#include <sys/mman.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <memory>

#include "daemon/shm/session.h"

namespace gsync {
namespace {

std::unique_ptr<Session> make(uint32_t entries = 16, uint64_t arena = 1 << 20) {
  std::unique_ptr<Session> s;
  Status st = Session::create(1, entries, arena, &s);
  EXPECT_TRUE(st) << st.message();
  return s;
}

proto::ShmHeader* header_of(Session& s, void** base) {
  // Map the memfd as a client would, to write into the rings from outside.
  *base = mmap(nullptr, s.shm_bytes(), PROT_READ | PROT_WRITE, MAP_SHARED, s.memfd(), 0);
  return static_cast<proto::ShmHeader*>(*base);
}

TEST(Session, MemfdIsSealedAgainstResizing) {
  auto s = make();
  int seals = fcntl(s->memfd(), F_GET_SEALS);
  EXPECT_TRUE(seals & F_SEAL_SHRINK);
  EXPECT_TRUE(seals & F_SEAL_GROW);
  EXPECT_TRUE(seals & F_SEAL_SEAL);
  EXPECT_NE(ftruncate(s->memfd(), 4096), 0) << "a client could shrink it and SIGBUS the daemon";
}

TEST(Session, HeaderDescribesTheLayout) {
  auto s = make(64, 3 << 20);
  void* base;
  auto* h = header_of(*s, &base);
  EXPECT_EQ(h->magic, proto::kShmMagic);
  EXPECT_EQ(h->version, proto::kVersion);
  EXPECT_EQ(h->sq_entries, 64u);
  EXPECT_EQ(h->arena_offset % proto::kArenaAlign, 0u);
  EXPECT_GE(h->arena_bytes, 3u << 20);
  EXPECT_EQ(h->arena_offset + h->arena_bytes, s->shm_bytes());
  munmap(base, s->shm_bytes());
}

TEST(Session, ArenaRangeRejectsEverythingOutside) {
  auto s = make(16, 1 << 20);
  void* p;
  uint64_t a = s->arena_bytes();
  EXPECT_TRUE(s->arena_range(0, a, &p));
  EXPECT_TRUE(s->arena_range(a, 0, &p));
  EXPECT_FALSE(s->arena_range(a, 1, &p));
  EXPECT_FALSE(s->arena_range(a + 1, 0, &p));
  EXPECT_FALSE(s->arena_range(8, ~0ull - 4, &p)) << "offset + bytes must not wrap";
  EXPECT_FALSE(s->arena_range(~0ull, 2, &p));
}

TEST(Session, PopsInOrderAndSeesCorruptTail) {
  auto s = make(16);
  void* base;
  auto* h = header_of(*s, &base);
  auto* ring = reinterpret_cast<proto::SubmitEntry*>(static_cast<uint8_t*>(base) + h->sq_offset);
  for (uint64_t i = 0; i < 40; i++) {  // wraps the 16-entry ring
    ring[i & 15] = proto::SubmitEntry{};
    ring[i & 15].tag = i;
    h->sq_tail.store(static_cast<uint32_t>(i + 1));
    proto::SubmitEntry e;
    Status err;
    ASSERT_TRUE(s->pop(&e, &err));
    EXPECT_EQ(e.tag, i);
    EXPECT_FALSE(s->pop(&e, &err));
    EXPECT_TRUE(err);
  }
  h->sq_tail.store(h->sq_tail.load() + 17);  // more than the ring holds
  proto::SubmitEntry e;
  Status err;
  EXPECT_FALSE(s->pop(&e, &err));
  EXPECT_EQ(err.code(), GSYNC_ERR_PROTOCOL);
  EXPECT_NE(err.message().find("corrupt"), std::string::npos);
  munmap(base, s->shm_bytes());
}

TEST(Session, CompletionRingFullOrCorruptHeadIsAProtocolError) {
  auto s = make(16);
  void* base;
  auto* h = header_of(*s, &base);
  for (int i = 0; i < 16; i++) EXPECT_TRUE(s->complete(static_cast<uint64_t>(i), 0, ""));
  Status st = s->complete(99, 0, "");
  EXPECT_EQ(st.code(), GSYNC_ERR_PROTOCOL);
  h->cq_head.store(16);  // the client consumed everything
  EXPECT_TRUE(s->complete(17, -6, std::string(1000, 'x'))) << "long text is truncated, not overflowed";
  auto* cq = reinterpret_cast<proto::CompleteEntry*>(static_cast<uint8_t*>(base) + h->cq_offset);
  EXPECT_EQ(cq[0].tag, 17u);
  EXPECT_EQ(cq[0].message[proto::kMessageMax - 1], '\0');
  h->cq_head.store(1000);  // head ahead of tail: corrupt
  EXPECT_FALSE(s->complete(18, 0, ""));
  munmap(base, s->shm_bytes());
}

}  // namespace
}  // namespace gsync
