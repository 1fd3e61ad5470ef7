// SPDX-License-Identifier: Apache-2.0
//
// The pinned staging of ops over device memory (daemon/pipeline/
// staging_pool.h) is made off the event thread: a kept buffer is leased at
// once, a new one is made on the worker and answered on the thread that
// runs the worker's results, and the op waits for it ("staging") without
// ending early when aborted meanwhile. No GPU needed: the allocator here is
// a fake - plain host memory in place of cudaHostAlloc's pinned memory,
// which cannot be made on a machine without a GPU - and the ops below
// never reach a stage that would touch device memory.
#include <gtest/gtest.h>

#include <poll.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>

#include "daemon/core/event_loop.h"
#include "daemon/core/worker.h"
#include "daemon/pipeline/pipeline.h"
#include "daemon/pipeline/staging_pool.h"
#include "daemon/pipeline/work_pool.h"

namespace gsync::pipeline {
namespace {

// Host memory standing in for pinned memory; counts what is alive and
// where it was made, and can hold each allocation until opened.
struct FakePinned {
  std::atomic<int> alive{0};
  std::atomic<int> made{0};
  std::thread::id made_on;
  std::mutex mu;
  std::condition_variable cv;
  bool gated = false;
  Status fail = Status::ok();
  int fail_call = -1;  // >= 0: only that call (from 0) fails, at once
  int calls = 0;       // the worker's thread only

  StagingPool::Allocate allocator() {
    return [this](uint64_t bytes, Buffer* out) {
      const int call = calls++;
      if (!fail && call == fail_call) return fail;
      {
        std::unique_lock lock(mu);
        cv.wait(lock, [this] { return !gated; });
        made_on = std::this_thread::get_id();
      }
      if (!fail && fail_call < 0) return fail;
      auto* mem = new uint8_t[bytes];
      alive++;
      made++;
      out->ptr = mem;
      out->bytes = bytes;
      out->owner = std::shared_ptr<const void>(mem, [this](const void* p) {
        delete[] static_cast<const uint8_t*>(p);
        alive--;
      });
      return Status::ok();
    };
  }
  void open() {
    {
      std::lock_guard lock(mu);
      gated = false;
    }
    cv.notify_all();
  }
};

// Waits (with a deadline) for the worker's next result and runs it.
void answer(Worker& w) {
  pollfd p{w.done_fd(), POLLIN, 0};
  ASSERT_EQ(poll(&p, 1, 10000), 1) << "no answer from the worker within 10 s";
  w.run_done();
}

struct Got {
  bool called = false;
  Status st;
  Buffer buf;
  std::thread::id on;
};

// A pool whose new memory the fake makes on a worker; the test thread
// runs the worker's results (answer()).
class PoolOnWorker : public ::testing::Test {
 protected:
  PoolOnWorker() {
    pool->make_with(fake.allocator());
    pool->make_on(&w);
  }
  FakePinned fake;  // outlives the worker, which may still run its calls
  Worker w{"test-worker"};
  std::unique_ptr<StagingPool> pool = std::make_unique<StagingPool>();
};

StagingPool::Leased into(Got* g) {
  return [g](const Status& st, Buffer b) {
    g->called = true;
    g->st = st;
    g->buf = std::move(b);
    g->on = std::this_thread::get_id();
  };
}

TEST_F(PoolOnWorker, ANewBufferIsMadeOnTheWorkerAndTheKeptOneLeasedAtOnce) {
  Buffer b;
  EXPECT_FALSE(pool->lease_kept("j", 1, 0, 4096, &b)) << "nothing is kept yet";

  Got first;
  pool->lease_new("j", 1, 0, 4096, 0, into(&first));
  EXPECT_FALSE(first.called) << "answered before the worker's result was run";
  EXPECT_EQ(pool->making(), 1u);
  answer(w);
  ASSERT_TRUE(first.called);
  ASSERT_TRUE(first.st) << first.st.message();
  EXPECT_EQ(first.on, std::this_thread::get_id());
  EXPECT_NE(fake.made_on, std::this_thread::get_id()) << "made on the event thread";
  EXPECT_EQ(first.buf.bytes, 4096u);
  EXPECT_EQ(first.buf.kind, MemoryKind::kHost);
  EXPECT_EQ(pool->making(), 0u);
  EXPECT_EQ(pool->pinned_bytes(), 4096u);
  EXPECT_EQ(pool->kept_bytes("j"), 4096u);
  EXPECT_EQ(pool->kept_bytes("k"), 0u);

  // Leased: a second op in flight gets one of its own, not kept.
  EXPECT_FALSE(pool->lease_kept("j", 1, 0, 4096, &b));
  Got second;
  pool->lease_new("j", 1, 0, 4096, 0, into(&second));
  answer(w);
  ASSERT_TRUE(second.st);
  EXPECT_NE(second.buf.ptr, first.buf.ptr);
  EXPECT_EQ(pool->pinned_bytes(), 8192u) << "the op's own buffer is pinned too";
  EXPECT_EQ(pool->kept_bytes("j"), 4096u) << "the op's own buffer is not kept";
  pool->release("j", 1, 0, second.buf);  // not the kept one: changes nothing
  EXPECT_FALSE(pool->lease_kept("j", 1, 0, 4096, &b));

  // Released, the kept one serves the next op at once; another size or
  // slot does not take it.
  pool->release("j", 1, 0, first.buf);
  EXPECT_FALSE(pool->lease_kept("j", 1, 0, 8192, &b));
  EXPECT_FALSE(pool->lease_kept("j", 1, 1, 4096, &b));
  ASSERT_TRUE(pool->lease_kept("j", 1, 0, 4096, &b));
  EXPECT_EQ(b.ptr, first.buf.ptr);
  EXPECT_EQ(fake.made.load(), 2);

  second = {};
  EXPECT_EQ(pool->pinned_bytes(), 4096u) << "the op's own buffer went with the op";
  b = {};
  first = {};
  pool->job_closed("j");
  EXPECT_EQ(fake.alive.load(), 0) << "the closed job's memory is still held";
  EXPECT_EQ(pool->pinned_bytes(), 0u);
  EXPECT_EQ(pool->kept_bytes("j"), 0u);
}

TEST_F(PoolOnWorker, WhatIsMadeForAJobThatClosedMeanwhileIsNotKept) {
  Got got;
  pool->lease_new("j", 1, 0, 4096, 0, into(&got));
  pool->job_closed("j");
  answer(w);
  ASSERT_TRUE(got.st);  // the op that asked still gets it
  pool->release("j", 1, 0, got.buf);
  Buffer b;
  EXPECT_FALSE(pool->lease_kept("j", 1, 0, 4096, &b)) << "kept for a job that had closed";
  got = {};
  EXPECT_EQ(fake.alive.load(), 0);
}

TEST_F(PoolOnWorker, AnAnswerAfterThePoolIsGoneIsDropped) {
  Got got;
  pool->lease_new("j", 1, 0, 4096, 0, into(&got));
  w.drain();  // made
  pool.reset();
  answer(w);
  EXPECT_FALSE(got.called) << "answered into a pool that is gone";
  EXPECT_EQ(fake.made.load(), 1);
  EXPECT_EQ(fake.alive.load(), 0) << "the dropped answer's memory was not freed";
}

// The daemon stopping: what is still queued for a pool that is gone makes
// nothing (pinned memory nobody would use).
TEST_F(PoolOnWorker, NothingIsMadeForAPoolThatIsGone) {
  std::atomic<bool> go{false};
  w.later([&go] {
    while (!go.load()) std::this_thread::yield();
  });  // holds the queue: the lease below waits behind it
  Got got;
  pool->lease_new("j", 1, 0, 4096, 0, into(&got));
  pool.reset();
  go = true;
  answer(w);
  EXPECT_FALSE(got.called);
  EXPECT_EQ(fake.made.load(), 0) << "pinned memory made for a pool that was gone";
}

// On the worker, and inline (no worker): the same error, and an answer.
TEST_F(PoolOnWorker, AnAllocatorThatThrowsIsAnErrorNotACrash) {
  pool->make_with([](uint64_t, Buffer*) -> Status { throw std::runtime_error("a driver bug"); });
  for (Worker* on : {&w, static_cast<Worker*>(nullptr)}) {
    pool->make_on(on);
    Got got;
    pool->lease_new("j", 1, 0, 4096, 0, into(&got));
    if (on != nullptr) {
      EXPECT_FALSE(got.called);
      answer(w);
    }
    ASSERT_TRUE(got.called);
    EXPECT_EQ(got.st.code(), GSYNC_ERR_INTERNAL);
    EXPECT_EQ(got.st.message(), "pinned memory: a driver bug");
  }
}

TEST_F(PoolOnWorker, AFailedAllocationIsAnsweredWithItsReason) {
  fake.fail = Status(GSYNC_ERR_NOMEM, "cudaHostAlloc: out of memory");
  Got got;
  pool->lease_new("j", 1, 0, 4096, 0, into(&got));
  answer(w);
  ASSERT_TRUE(got.called);
  EXPECT_EQ(got.st.code(), GSYNC_ERR_NOMEM);
  EXPECT_EQ(got.st.message(), "cudaHostAlloc: out of memory");
  EXPECT_EQ(got.buf.ptr, nullptr);
  Buffer b;
  EXPECT_FALSE(pool->lease_kept("j", 1, 0, 4096, &b));
}

// ------------------------------------------------------ the op that waits

// A pipeline on one host whose ops over device memory go through host
// memory (float64 has no GPU kernel): each device buffer needs a pinned
// stand-in, made by the fake on a worker whose results the loop runs.
class StagingOp : public ::testing::Test {
 protected:
  void SetUp() override {
    pipe.staging().make_with(fake.allocator());
    pipe.staging().make_on(&worker);
    loop.add(worker.done_fd(), EPOLLIN, [this](uint32_t) { worker.run_done(); });
    // A loop stops from a timer (a deferred stop would leave it asleep in
    // epoll_wait with nothing to wake it).
    loop.every(std::chrono::milliseconds(1), [this] {
      if (stop_when()) loop.stop();
    }, "test stop");
  }

  // A test that stops early leaves nothing gated: the worker's thread,
  // joined when it goes, would wait on the gate for ever.
  ~StagingOp() override { fake.open(); }

  // An allreduce over two ranks' device buffers. Their addresses are
  // never read: the ops here end before any stage that would.
  OpRequest request() {
    OpRequest r;
    r.job = "j";
    r.id = {3, 7};
    r.shape.dtype = proto::DType::kF64;
    r.shape.count = 1024;
    for (int rank = 0; rank < 2; rank++) {
      Contribution c;
      c.rank = rank;
      c.buf.kind = MemoryKind::kDevice;
      c.buf.device = 0;
      c.buf.device_access = 1;
      c.buf.ptr = reinterpret_cast<uint8_t*>(uintptr_t{0x10000} * (rank + 1));
      c.buf.bytes = r.shape.bytes();
      c.buf.arena = 40 + rank;
      r.locals.push_back(std::move(c));
    }
    return r;
  }

  uint64_t start() {
    return pipe.start(request(), [this](uint64_t, const Status& st, const OpTimes&) {
      done = st;
    });
  }

  // Runs the loop until pred holds (or 10 s went by); whether it does.
  bool run_until(std::function<bool()> pred) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    stop_when = [pred, deadline] { return pred() || std::chrono::steady_clock::now() > deadline; };
    loop.run();
    return pred();
  }
  bool run_until_done() {
    return run_until([this] { return done.has_value(); });
  }

  // A turn of the loop: whatever was deferred (an ended op's report) runs.
  void one_turn() {
    stop_when = [] { return true; };
    loop.run();
  }

  FakePinned fake;
  Worker worker{"test-worker"};
  EventLoop loop;
  WorkPool pool{1};
  Pipeline pipe{loop, pool, PipelineOptions{}, nullptr, nullptr};
  std::optional<Status> done;
  std::function<bool()> stop_when = [] { return true; };
};

TEST_F(StagingOp, AnOpWaitsForItsStagingAndAnAbortEndsItAtOnce) {
  fake.gated = true;
  const uint64_t serial = start();
  OpView v = pipe.view(serial);
  EXPECT_EQ(v.stage, "staging");
  EXPECT_EQ(v.waiting_for, "pinned host memory");
  EXPECT_EQ(pipe.waiting_for(serial), "pinned host memory");
  EXPECT_FALSE(pipe.waits_on_peers(serial));
  EXPECT_TRUE(pipe.waits_for_staging(serial));
  EXPECT_EQ(pipe.staging().making(), 2u);
  one_turn();
  EXPECT_FALSE(done.has_value()) << "reported while its pinned memory was still being made";

  // A timeout (the GPU thread held up): the op ends now, not when its
  // memory comes.
  pipe.abort(serial, Status(GSYNC_ERR_TIMEOUT, "test abort"));
  EXPECT_FALSE(pipe.waits_for_staging(serial));
  ASSERT_TRUE(run_until_done()) << "an op aborted while it waited was not reported";
  EXPECT_EQ(done->code(), GSYNC_ERR_TIMEOUT);
  EXPECT_EQ(done->message(), "test abort");
  EXPECT_EQ(pipe.in_flight(), 0u);
  EXPECT_EQ(pipe.staging().making(), 2u);

  // Its memory, made after it ended, is kept for the tensor's next step:
  // not left leased (every later step would make its own).
  fake.open();
  EXPECT_TRUE(run_until([this] { return pipe.staging().making() == 0; }));
  EXPECT_EQ(fake.alive.load(), 2);
  EXPECT_EQ(pipe.pinned_bytes(), 16384u);
  EXPECT_EQ(pipe.pinned_bytes("j"), 16384u);
  Buffer b;
  EXPECT_TRUE(pipe.staging().lease_kept("j", 3, 0, 8192, &b));
  EXPECT_TRUE(pipe.staging().lease_kept("j", 3, 1, 8192, &b));
}

// The op ends (aborted) and its memory is answered before the op is
// reaped: the memory goes with the op, back to the pool.
TEST_F(StagingOp, MemoryThatComesBetweenTheEndAndTheReportGoesBackToThePool) {
  fake.gated = true;
  const uint64_t serial = start();
  pipe.abort(serial, Status(GSYNC_ERR_TIMEOUT, "test abort"));
  fake.open();
  worker.drain();
  worker.run_done();  // both answers, before the loop reports the op
  EXPECT_EQ(pipe.staging().making(), 0u);
  EXPECT_FALSE(done.has_value());
  ASSERT_TRUE(run_until_done());
  EXPECT_EQ(done->code(), GSYNC_ERR_TIMEOUT);
  EXPECT_EQ(pipe.in_flight(), 0u);
  Buffer b;
  EXPECT_TRUE(pipe.staging().lease_kept("j", 3, 0, 8192, &b)) << "left leased";
  EXPECT_TRUE(pipe.staging().lease_kept("j", 3, 1, 8192, &b)) << "left leased";
}

// One rank's memory cannot be made while the other's is held up: the op
// fails at once, naming why, without waiting for the other.
TEST_F(StagingOp, OneFailedBufferEndsTheOpWithoutWaitingForTheOther) {
  fake.fail = Status(GSYNC_ERR_NOMEM, "cudaHostAlloc: out of memory");
  fake.fail_call = 0;
  fake.gated = true;
  const uint64_t serial = start();
  ASSERT_TRUE(run_until_done()) << "waited for the other rank's memory";
  EXPECT_EQ(done->code(), GSYNC_ERR_NOMEM);
  EXPECT_FALSE(pipe.waits_for_staging(serial));
  EXPECT_EQ(pipe.staging().making(), 1u);
  fake.open();
  EXPECT_TRUE(run_until([this] { return pipe.staging().making() == 0; }));
  Buffer b;
  EXPECT_TRUE(pipe.staging().lease_kept("j", 3, 1, 8192, &b));
}

TEST_F(StagingOp, StagingThatCannotBeMadeFailsTheOpNamingIt) {
  fake.fail = Status(GSYNC_ERR_NOMEM, "cudaHostAlloc: out of memory (8192 bytes of pinned memory)");
  start();
  ASSERT_TRUE(run_until_done()) << "not reported within 10 s";
  EXPECT_EQ(done->code(), GSYNC_ERR_NOMEM);
  EXPECT_EQ(done->message(),
            "job j allreduce key 3 step 7: cudaHostAlloc: out of memory (8192 bytes of pinned "
            "memory)");
  EXPECT_EQ(pipe.in_flight(), 0u);
}

}  // namespace
}  // namespace gsync::pipeline
