// SPDX-License-Identifier: Apache-2.0
//
// The C++ wrapper (<gsync/gsync.hpp>) against a real gsyncd, built twice:
// as C++17 (what PyTorch extensions and many frameworks compile with) and as
// C++20. Each rank allreduces a std::vector and an arena Buffer through the
// typed calls, broadcasts, meets a barrier, and gets a gsync::Error with the
// daemon's code and text for a bad request.
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
