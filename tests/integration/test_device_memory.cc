// SPDX-License-Identifier: Apache-2.0
//
// Device memory requests on a session's socket (protocol/device.h,
// docs/gpu.md) on a machine without a GPU, against a real daemon: the
// library's gsync_alloc_device says why it cannot, and what a client may
// send the daemon - a registration of memory that is no CUDA allocation
// (a memfd), one without its fd or with two, junk, an unknown kind, a
// release of what was never registered, a submission naming an allocation
// that is not there or a misaligned tensor in one - gets an error naming
// it while the session and the
// daemon go on serving. The GPU suite (tests/gpu/test_gpu_buffers.cc)
// runs the real thing where there is a GPU.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "tests/integration/client_util.h"
#include "tests/integration/daemon_serves.h"
#include "tests/util/raw_client.h"

namespace gsync::test {
namespace {

bool has_driver() {
  void* lib = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (lib != nullptr) dlclose(lib);
  return lib != nullptr;
}

TEST(DeviceMemory, WithoutADriverTheAllocationSaysWhyAndTheSessionServesOn) {
  DaemonProcess d;
  auto res = run_ranks(1, [&](int) {
    gsync_comm_t* comm;
    RANK_CHECK(connect_rank(d.socket(), "no-driver", 1, 0, &comm) == 0, "{}", gsync_last_error());
    void* dev = reinterpret_cast<void*>(1);
    const int rc = gsync_alloc_device(comm, 1 << 20, &dev);
    const std::string why = gsync_last_error();
    if (!has_driver()) {
      RANK_CHECK(rc == GSYNC_ERR_UNSUPPORTED, "rc {}: {}", rc, why);
      RANK_CHECK(why.find("gsync_alloc_device: no GPU: libcuda.so.1") == 0, "{}", why);
      RANK_CHECK(why.find("job no-driver rank 0") != std::string::npos, "{}", why);
      RANK_CHECK(dev == nullptr, "out was not cleared");
    }
    if (rc == 0) RANK_CHECK(gsync_free_device(comm, dev) == 0, "{}", gsync_last_error());
    // Not an allocation of gsync_alloc_device: named, nothing sent.
    int x = 0;
    RANK_CHECK(gsync_free_device(comm, &x) == GSYNC_ERR_INVALID, "freed a stack address");
    RANK_CHECK(std::string(gsync_last_error()).find("not an allocation of gsync_alloc_device") !=
                   std::string::npos,
               "{}", gsync_last_error());
    // The session serves on.
    float* buf;
    RANK_CHECK(gsync_alloc(comm, 4096, reinterpret_cast<void**>(&buf)) == 0, "alloc");
    for (int i = 0; i < 1024; i++) buf[i] = 2.0f;
    gsync_request_t* req;
    RANK_CHECK(gsync_allreduce(comm, 1, 0, buf, 1024, GSYNC_FLOAT32, GSYNC_SUM, 0, &req) == 0,
               "{}", gsync_last_error());
    RANK_CHECK(gsync_wait(req, 10000) == 0, "{}", gsync_request_error(req));
    RANK_CHECK(buf[1023] == 2.0f, "got {}", buf[1023]);
    gsync_request_free(req);
    gsync_close(comm);
    return 0;
  });
  EXPECT_EQ(res[0].code, 0) << res[0].output << d.log();
}

proto::DeviceRequest registration(uint64_t id) {
  proto::DeviceRequest r{};
  r.magic = proto::kDeviceMagic;
  r.kind = static_cast<uint32_t>(proto::DeviceRequestKind::kRegister);
  r.alloc_id = id;
  r.bytes = 2 << 20;
  std::strcpy(r.pci_bus_id, "0000:65:00.0");
  return r;
}

// 2 MiB of memory that is no CUDA allocation, as an fd to send.
int not_gpu_memory() {
  const int fd = memfd_create("not-gpu-memory", MFD_CLOEXEC);
  if (fd >= 0 && ftruncate(fd, 2 << 20) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

proto::DeviceRequest release_of(uint64_t id) {
  proto::DeviceRequest r{};
  r.magic = proto::kDeviceMagic;
  r.kind = static_cast<uint32_t>(proto::DeviceRequestKind::kRelease);
  r.alloc_id = id;
  r.seq = id;
  return r;
}

std::string ask(RawClient& c, const void* msg, size_t len, int fd, int want_status,
                uint64_t want_id) {
  proto::DeviceReply reply{};
  EXPECT_TRUE(c.device_request(msg, len, fd >= 0 ? std::vector<int>{fd} : std::vector<int>{},
                               &reply, 10000));
  EXPECT_EQ(reply.magic, proto::kDeviceMagic);
  EXPECT_EQ(reply.status, want_status) << reply.message;
  EXPECT_EQ(reply.alloc_id, want_id);
  EXPECT_NE(std::memchr(reply.message, '\0', sizeof reply.message), nullptr);
  return reply.message;
}

TEST(DeviceMemory, EveryBadRequestGetsAnErrorNamingItAndTheSessionServesOn) {
  DaemonProcess d;
  RawClient c;
  proto::HelloReply hello{};
  ASSERT_TRUE(c.connect(d.socket(), "requests", 1, 0, &hello));
  ASSERT_EQ(hello.status, 0) << hello.message;
  const int memfd = not_gpu_memory();
  ASSERT_GE(memfd, 0);

  // A memfd is no CUDA allocation; on this machine the daemon has no GPU
  // at all. Either way: refused, naming the allocation and the rank.
  auto r = registration(1);
  std::string why = ask(c, &r, sizeof r, memfd, has_driver() ? GSYNC_ERR_INVALID
                                                             : GSYNC_ERR_UNSUPPORTED, 1);
  EXPECT_NE(why.find("job requests rank 0"), std::string::npos) << why;
  EXPECT_NE(why.find("device allocation 1 (2097152 bytes on 0000:65:00.0)"), std::string::npos)
      << why;
  if (!has_driver()) {
    EXPECT_NE(why.find("no GPU"), std::string::npos) << why;
  }

  why = ask(c, &r, sizeof r, -1, GSYNC_ERR_PROTOCOL, 1);
  EXPECT_NE(why.find("no file descriptor"), std::string::npos) << why;

  // Two fds in one request.
  {
    proto::DeviceReply reply{};
    ASSERT_TRUE(c.device_request(&r, sizeof r, {memfd, memfd}, &reply, 10000));
    EXPECT_EQ(reply.status, GSYNC_ERR_PROTOCOL) << reply.message;
    EXPECT_NE(std::string(reply.message).find("2 fds"), std::string::npos) << reply.message;
  }

  const char junk[5] = {1, 2, 3, 4, 5};
  why = ask(c, junk, sizeof junk, -1, GSYNC_ERR_PROTOCOL, 0);
  EXPECT_NE(why.find("of 5 bytes"), std::string::npos) << why;

  auto bad_kind = registration(2);
  bad_kind.kind = 9;
  why = ask(c, &bad_kind, sizeof bad_kind, memfd, GSYNC_ERR_PROTOCOL, 2);
  EXPECT_NE(why.find("unknown kind 9"), std::string::npos) << why;

  auto huge_id = registration(proto::kMaxDeviceAllocId + 1);
  why = ask(c, &huge_id, sizeof huge_id, memfd, GSYNC_ERR_PROTOCOL, proto::kMaxDeviceAllocId + 1);
  EXPECT_NE(why.find("outside 1 .."), std::string::npos) << why;

  auto release = release_of(3);
  why = ask(c, &release, sizeof release, -1, GSYNC_ERR_INVALID, 3);
  EXPECT_NE(why.find("never registered"), std::string::npos) << why;
  close(memfd);

  // A submission naming device memory that is not registered.
  proto::SubmitEntry e{};
  e.tag = 77;
  e.key = 1;
  e.count = 256;
  e.opcode = static_cast<uint8_t>(proto::Opcode::kAllreduce);
  e.dtype = GSYNC_FLOAT32;
  e.redop = GSYNC_SUM;
  e.offset = proto::to_entry_offset({9, 0});
  c.submit(e);
  proto::CompleteEntry done{};
  ASSERT_TRUE(c.next_completion(&done, 10000));
  EXPECT_EQ(done.tag, 77u);
  EXPECT_EQ(done.status, GSYNC_ERR_INVALID) << done.message;
  EXPECT_NE(std::string(done.message).find("device allocation 9 is not registered"),
            std::string::npos)
      << done.message;

  // Not on an element boundary: refused before the allocation is looked up
  // (a misaligned access would end the daemon's context on that GPU).
  e.tag = 79;
  e.offset = proto::to_entry_offset({9, 2});
  c.submit(e);
  ASSERT_TRUE(c.next_completion(&done, 10000));
  EXPECT_EQ(done.tag, 79u);
  EXPECT_EQ(done.status, GSYNC_ERR_INVALID) << done.message;
  EXPECT_NE(std::string(done.message).find("is not aligned to its 4-byte elements"),
            std::string::npos)
      << done.message;

  // The session serves on: an allreduce in its arena.
  auto* data = reinterpret_cast<float*>(c.arena());
  for (int i = 0; i < 256; i++) data[i] = 3.0f;
  e.tag = 78;
  e.offset = 0;
  c.submit(e);
  ASSERT_TRUE(c.next_completion(&done, 10000));
  EXPECT_EQ(done.tag, 78u);
  EXPECT_EQ(done.status, 0) << done.message;
  EXPECT_EQ(data[255], 3.0f);
  EXPECT_FALSE(c.closed_by_daemon(0));
  // gsyncctl clients: nothing refused was kept.
  nlohmann::json clients = admin_json(d.admin_socket(), "clients");
  ASSERT_TRUE(clients["clients"].is_array()) << clients.dump();
  ASSERT_EQ(clients["clients"].size(), 1u) << clients.dump();
  EXPECT_EQ(clients["clients"][0]["device_allocations"], 0) << clients.dump();
  EXPECT_EQ(clients["clients"][0]["device_bytes"], 0) << clients.dump();
  expect_daemon_serves(d, "after-device-requests");
}

// A registration is imported off the event thread (the first on a GPU also
// makes the daemon's context there); requests sent behind it, without
// waiting, are answered after it, one by one, in the order sent - the
// release and the refused registration would otherwise be answered first,
// being checked on the event thread. A client that hangs up meanwhile is
// let go, and the daemon serves on.
TEST(DeviceMemory, RequestsSentTogetherAreAnsweredInTheirOrder) {
  DaemonProcess d;
  RawClient c;
  proto::HelloReply hello{};
  ASSERT_TRUE(c.connect(d.socket(), "in-order", 1, 0, &hello));
  ASSERT_EQ(hello.status, 0) << hello.message;
  const int memfd = not_gpu_memory();
  ASSERT_GE(memfd, 0);
  constexpr int kRounds = 8;
  for (int i = 0; i < kRounds; i++) {
    auto r = registration(uint64_t(3 * i + 1));
    r.seq = uint64_t(3 * i + 1);
    ASSERT_TRUE(c.send_device_request(&r, sizeof r, {memfd}));
    auto release = release_of(uint64_t(3 * i + 2));
    ASSERT_TRUE(c.send_device_request(&release, sizeof release, {}));
    auto no_fd = registration(uint64_t(3 * i + 3));
    no_fd.seq = uint64_t(3 * i + 3);
    ASSERT_TRUE(c.send_device_request(&no_fd, sizeof no_fd, {}));
  }
  close(memfd);
  for (uint64_t want = 1; want <= 3 * kRounds; want++) {
    proto::DeviceReply reply{};
    ASSERT_TRUE(c.device_reply(&reply, 10000)) << "no reply " << want << d.log();
    EXPECT_EQ(reply.seq, want) << reply.message;
    EXPECT_EQ(reply.alloc_id, want) << reply.message;
    EXPECT_NE(reply.status, 0) << reply.message;
  }
  EXPECT_FALSE(c.closed_by_daemon(0));

  // A registration, then the client is gone before its answer is read.
  {
    RawClient gone;
    ASSERT_TRUE(gone.connect(d.socket(), "gone", 1, 0, &hello));
    const int fd = not_gpu_memory();
    ASSERT_GE(fd, 0);
    auto r = registration(1);
    ASSERT_TRUE(gone.send_device_request(&r, sizeof r, {fd}));
    ASSERT_TRUE(gone.send_device_request(&r, sizeof r, {fd}));
    close(fd);
  }
  expect_daemon_serves(d, "after-requests-in-order");
}

}  // namespace
}  // namespace gsync::test
