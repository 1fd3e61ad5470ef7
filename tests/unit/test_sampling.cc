// SPDX-License-Identifier: Apache-2.0
//
// The sampling schedule gsync-perf and the peer drivers share
// (tools/peers/sampling.h): how many back-to-back ops one sample holds, and
// how many samples a size gets.
#include <gtest/gtest.h>

#include <cstddef>

#include "tools/peers/sampling.h"

namespace {

TEST(Sampling, OpsPerSampleShrinkWithTheTensorBetweenOneAndThirtyTwo) {
  EXPECT_EQ(gsync_ops_per_sample(0), 32);  // an empty tensor: as many as allowed
  EXPECT_EQ(gsync_ops_per_sample(4), 32);
  EXPECT_EQ(gsync_ops_per_sample(4096), 32);
  EXPECT_EQ(gsync_ops_per_sample(32 << 10), 32);
  EXPECT_EQ(gsync_ops_per_sample(64 << 10), 16);
  EXPECT_EQ(gsync_ops_per_sample(256 << 10), 4);
  EXPECT_EQ(gsync_ops_per_sample(1 << 20), 1);
  EXPECT_EQ(gsync_ops_per_sample(size_t{256} << 20), 1);
  EXPECT_EQ(gsync_ops_per_sample((1 << 20) - 4), 1);  // rounds down, never 0
}

TEST(Sampling, SamplesCoverTheAskedOpsAndAtLeastFive) {
  // 3000 ops of 4 KiB: 94 samples of 32 (3008 ops).
  EXPECT_EQ(gsync_samples_for(3000, 4096), 94);
  EXPECT_GE(gsync_samples_for(3000, 4096) * gsync_ops_per_sample(4096), 3000);
  // 20 ops of 4 KiB would be one sample: five, so the median chooses.
  EXPECT_EQ(gsync_samples_for(20, 4096), 5);
  // Large tensors: one op per sample, as many samples as ops.
  EXPECT_EQ(gsync_samples_for(8, size_t{64} << 20), 8);
  // Fewer than five ops asked: that many samples, never more ops than the
  // drivers have room for (mpi_allreduce.c sizes its arrays by iters).
  EXPECT_EQ(gsync_samples_for(1, size_t{256} << 20), 1);
  EXPECT_EQ(gsync_samples_for(3, 4096), 3);
  for (int iters = 1; iters <= 200; iters++)
    for (size_t bytes : {size_t{4}, size_t{4096}, size_t{100000}, size_t{1} << 20})
      EXPECT_LE(gsync_samples_for(iters, bytes), iters) << iters << " ops of " << bytes;
}

}  // namespace
