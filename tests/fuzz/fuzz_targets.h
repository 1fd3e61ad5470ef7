// SPDX-License-Identifier: Apache-2.0
//
// Every fuzz target, by name: the folder names under tests/fuzz/corpus/
// and tests/fuzz/regressions/, the executables fuzz_<name> of the fuzz
// build, and what tests/fuzz/test_fuzz_replay.cc calls.
#pragma once

#include <cstddef>
#include <cstdint>

#define GSYNC_FUZZ_TARGETS(X) \
  X(admin)                    \
  X(bootstrap)                \
  X(checkpoint)               \
  X(client_hello)             \
  X(codec)                    \
  X(cluster_file)             \
  X(config)                   \
  X(control_messages)         \
  X(device_request)           \
  X(dpdk_frame)               \
  X(etcd_record)              \
  X(etcd_response)            \
  X(leases)                   \
  X(ps)                       \
  X(submission)               \
  X(tcp_frame)                \
  X(tuning)

#define GSYNC_FUZZ_DECLARE(name) int gsync_fuzz_##name(const uint8_t* data, size_t size);
GSYNC_FUZZ_TARGETS(GSYNC_FUZZ_DECLARE)
#undef GSYNC_FUZZ_DECLARE
