// SPDX-License-Identifier: Apache-2.0
//
// The check is cuda_abi.cu's static_asserts, at build time; this says it
// ran, and against which cuda.h.
#include <gtest/gtest.h>

#include <cstdio>

int gsync_cuda_abi_version();

TEST(CudaAbi, TheClientsDriverTypesWereCheckedAgainstCudaH) {
  const int v = gsync_cuda_abi_version();
  EXPECT_GE(v, 10020) << "cuda.h older than the VMM API";
  std::printf("libclient/cuda_driver.h matches cuda.h of CUDA %d.%d\n", v / 1000, v % 1000 / 10);
}
