// SPDX-License-Identifier: Apache-2.0
//
// The check the failure tests end with: after whatever a test threw at the
// daemon, a small allreduce on a fresh job still completes, right.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "tests/integration/client_util.h"

namespace gsync::test {

inline void expect_daemon_serves(const DaemonProcess& d, const std::string& job) {
  ASSERT_TRUE(d.alive()) << d.log();
  auto res = run_ranks(2, [&](int r) {
    gsync_comm_t* comm;
    RANK_CHECK(connect_rank(d.socket(), job, 2, r, &comm) == 0, "{}", gsync_last_error());
    float* buf;
    RANK_CHECK(gsync_alloc(comm, 4096, reinterpret_cast<void**>(&buf)) == 0, "alloc");
    for (int i = 0; i < 1024; i++) buf[i] = float(r + 1);
    gsync_request_t* req;
    RANK_CHECK(gsync_allreduce(comm, 1, 0, buf, 1024, GSYNC_FLOAT32, GSYNC_SUM, 0, &req) == 0,
               "submit");
    RANK_CHECK(gsync_wait(req, 10000) == 0, "{}", gsync_request_error(req));
    RANK_CHECK(buf[1023] == 3.0f, "got {}", buf[1023]);
    gsync_request_free(req);
    gsync_close(comm);
    return 0;
  });
  for (auto& r : res) EXPECT_EQ(r.code, 0) << r.output;
}

}  // namespace gsync::test
