// SPDX-License-Identifier: Apache-2.0
//
// Allreduce cases run by every rank of a job on a test bed, every element of
// every result checked: the multi-host tests over TCP and the DPDK tests
// (tests/dpdk/) share them.
#pragma once

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "gsync/gsync.h"
#include "tests/integration/bed_util.h"
#include "tests/integration/client_util.h"
#include "tools/testbed/testbed.h"

namespace gsync::test {

inline bool close_enough(double got, double want, int op) {
  if (op != GSYNC_WEIGHTED_AVG) return got == want || (std::isnan(got) && std::isnan(want));
  return std::abs(got - want) <= 2e-2 * std::max(1.0, std::abs(want));
}

// Each rank: for every (dtype, op, count) in the list, allreduce and check.
struct OpCase {
  int dtype, op;
  size_t count;
};

inline int run_cases(const testbed::Testbed& bed, const std::string& job,
                     const std::vector<Place>& p,
                     int rank, const std::vector<OpCase>& cases) {
  gsync_comm_t* comm;
  size_t most = 0;
  for (const auto& c : cases) most = std::max(most, c.count * elem_size(c.dtype));
  RANK_CHECK(connect_place(bed, job, p, rank, &comm, most + (8 << 20)) == 0, "{}", gsync_last_error());
  void* buf;
  RANK_CHECK(gsync_alloc(comm, std::max<size_t>(most, 64), &buf) == 0, "alloc {}", gsync_last_error());
  int world = static_cast<int>(p.size());
  uint64_t step = 0;
  for (const auto& c : cases) {
    for (size_t i = 0; i < c.count; i++) store(buf, c.dtype, i, test_value(rank, i));
    gsync_request_t* req;
    RANK_CHECK(gsync_allreduce(comm, 7, step++, buf, c.count, c.dtype, c.op, rank + 1.0, &req) == 0,
               "{}", gsync_last_error());
    int rc = gsync_wait(req, 60000);
    RANK_CHECK(rc == 0, "dtype {} op {} count {}: {} {}", c.dtype, c.op, c.count, rc,
               gsync_request_error(req));
    gsync_request_free(req);
    for (size_t i = 0; i < c.count; i++) {
      double want = expected(c.dtype, c.op, world, i), got = load(buf, c.dtype, i);
      RANK_CHECK(close_enough(got, want, c.op), "dtype {} op {} count {} element {}: got {} want {}",
                 c.dtype, c.op, c.count, i, got, want);
    }
  }
  RANK_CHECK(gsync_barrier(comm, 1, 30000) == 0, "barrier: {}", gsync_last_error());
  gsync_close(comm);
  return 0;
}

inline std::vector<OpCase> every_dtype_and_op(size_t count) {
  std::vector<OpCase> v;
  for (int dtype : {GSYNC_FLOAT32, GSYNC_FLOAT16, GSYNC_BFLOAT16, GSYNC_FLOAT64, GSYNC_INT32,
                    GSYNC_UINT8})
    for (int op : {GSYNC_SUM, GSYNC_AVG, GSYNC_WEIGHTED_AVG, GSYNC_MIN, GSYNC_MAX})
      if (gsync::tools::defined_op(dtype, op)) v.push_back({dtype, op, count});
  return v;
}

inline void run_job(const testbed::Testbed& bed, const std::string& job, const std::vector<int>& per_host,
             const std::vector<OpCase>& cases) {
  auto p = places(per_host);
  auto res = run_ranks(static_cast<int>(p.size()),
                       [&](int r) { return run_cases(bed, job, p, r, cases); }, 600);
  for (size_t r = 0; r < res.size(); r++) EXPECT_EQ(res[r].code, 0) << "rank " << r << ": " << res[r].output;
}

}  // namespace gsync::test
