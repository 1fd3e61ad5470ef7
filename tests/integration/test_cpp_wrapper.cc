// SPDX-License-Identifier: Apache-2.0
//
// The C++ wrapper (<gsync/gsync.hpp>) against a real gsyncd, built twice:
// as C++17 (what PyTorch extensions and many frameworks compile with) and as
// C++20. Each rank allreduces a std::vector and an arena Buffer through the
// typed calls, broadcasts, meets a barrier, declares a parameter, push_pulls
// and pulls it, and gets a gsync::Error with the code and text for a bad
// request.
#include <gtest/gtest.h>

#include <gsync/gsync.hpp>

#include <array>
#include <string>
#include <vector>

#include "tests/integration/client_util.h"

namespace gsync::test {
namespace {

static_assert(kIsTensorRange<std::vector<float>&>);
static_assert(kIsTensorRange<std::array<double, 4>&>);
static_assert(kIsTensorRange<Span<int32_t>>);
static_assert(!kIsTensorRange<const std::vector<float>&>, "read-only data cannot be reduced");
static_assert(!kIsTensorRange<std::vector<char>&>, "char is no gsync dtype");
static_assert(!kIsTensorRange<int>, "not a container");

int wrapper_rank(const std::string& socket, int world, int rank) {
  Config cfg;
  cfg.socket_path = socket;
  cfg.job_id = "cpp-wrapper";
  cfg.world_size = world;
  cfg.rank = cfg.local_rank = rank;
  cfg.local_size = world;
  cfg.sync_mode = GSYNC_SYNC_BSP;
  try {
    Comm comm(cfg);
    std::vector<float> v(1000);
    for (size_t i = 0; i < v.size(); i++) v[i] = static_cast<float>(rank + i);
    RANK_CHECK(comm.allreduce(1, 0, v).wait(20000), "vector allreduce did not finish");
    for (size_t i = 0; i < v.size(); i++) {
      float want = 0;
      for (int r = 0; r < world; r++) want += static_cast<float>(r + i);
      RANK_CHECK(v[i] == want, "element {}: {} != {}", i, v[i], want);
    }
    {
      Buffer b = comm.alloc(256 * sizeof(double));  // freed before close()
      Span<double> d = b.as<double>();
      RANK_CHECK(d.size() == 256, "as<double>() has {} elements", d.size());
      for (double& x : d) x = rank == 1 ? 7.5 : -1;
      RANK_CHECK(comm.broadcast(2, 0, d, 1).wait(20000), "broadcast did not finish");
      for (double x : d) RANK_CHECK(x == 7.5, "broadcast gave {}", x);
    }
    comm.barrier(0, 20000);
    {
      // The parameter server: rank 0's values are everyone's; SGD at lr 0.5
      // on the mean of the gradients 1 and 2 takes 1 to 0.25.
      std::vector<float> p(1000, rank == 0 ? 1.0f : -7.0f);
      PsOptions o;
      o.lr = 0.5f;
      RANK_CHECK(comm.ps_declare(10, p, o).wait(20000), "ps_declare did not finish");
      for (float x : p) RANK_CHECK(x == 1.0f, "declared value {}", x);
      std::vector<float> g(1000, static_cast<float>(rank + 1));
      RANK_CHECK(comm.ps_push_pull(10, 0, g).wait(20000), "ps_push_pull did not finish");
      for (float x : g) RANK_CHECK(x == 0.25f, "push_pull gave {}", x);
      std::vector<float> q(1000);
      RANK_CHECK(comm.ps_pull(10, 1, q).wait(20000), "ps_pull did not finish");
      for (float x : q) RANK_CHECK(x == 0.25f, "pull gave {}", x);
      try {
        comm.ps_push(10, 1, g, -1.0);
        RANK_CHECK(false, "a negative weight was accepted");
      } catch (const Error& e) {
        RANK_CHECK(e.code() == GSYNC_ERR_INVALID, "code {} ({})", e.code(), e.what());
        RANK_CHECK(std::string(e.what()).find("weight") != std::string::npos, "text: {}",
                   e.what());
      }
    }
    try {
      comm.allreduce_raw(3, 0, v.data(), v.size(), GSYNC_FLOAT32, 99);
      RANK_CHECK(false, "an unknown reduce op was accepted");
    } catch (const Error& e) {
      RANK_CHECK(e.code() == GSYNC_ERR_INVALID, "code {} ({})", e.code(), e.what());
      RANK_CHECK(std::string(e.what()).find("99") != std::string::npos, "text: {}", e.what());
    }
    comm.close();
  } catch (const Error& e) {
    RANK_CHECK(false, "gsync::Error {}: {}", e.code(), e.what());
  }
  return 0;
}

TEST(CppWrapper, TypedCallsBuffersBarrierAndErrors) {
  DaemonProcess d;
  auto res = run_ranks(2, [&](int r) { return wrapper_rank(d.socket(), 2, r); });
  for (size_t r = 0; r < res.size(); r++)
    EXPECT_EQ(res[r].code, 0) << "rank " << r << " (C++" << __cplusplus / 100 % 100 << "): "
                              << res[r].output;
  EXPECT_TRUE(d.alive());
}

}  // namespace
}  // namespace gsync::test
