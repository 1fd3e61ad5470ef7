// SPDX-License-Identifier: Apache-2.0
//
// The rank runner every multi-process test and gsync-perf use
// (tools/common/procs.h): what ranks report reaches the parent whole, however
// long, and however the ranks wait on each other.
#include <gtest/gtest.h>
#include <unistd.h>

#include <string>

#include "tools/common/procs.h"

namespace gsync::tools {
namespace {

// Rank 0 waits for rank 1, which first reports more than a pipe holds (a
// sweep of 9,000 timings is about 72 KiB). A parent that read rank 0's pipe
// to its end before rank 1's never let rank 1 finish writing: both hung
// until the watchdog killed them.
TEST(RunRanks, LongReportWhileAnotherRankWaitsForIt) {
  int sync[2];
  ASSERT_EQ(pipe(sync), 0);
  const std::string big(256 << 10, 'x');
  auto res = run_ranks(
      2,
      [&](int rank) {
        if (rank == 1) {
          report(big);
          char one = 1;
          return write(sync[1], &one, 1) == 1 ? 0 : 3;
        }
        close(sync[1]);
        char got = 0;
        if (read(sync[0], &got, 1) != 1) return 4;  // rank 1 died first
        report("rank 0 done\n");
        return 0;
      },
      20);
  close(sync[0]);
  close(sync[1]);
  ASSERT_EQ(res.size(), 2u);
  EXPECT_EQ(res[0].code, 0) << "rank 0 was killed: the parent did not drain rank 1's report";
  EXPECT_EQ(res[0].output, "rank 0 done\n");
  EXPECT_EQ(res[1].code, 0);
  EXPECT_EQ(res[1].output.size(), big.size());
}

}  // namespace
}  // namespace gsync::tools
