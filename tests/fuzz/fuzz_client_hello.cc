// SPDX-License-Identifier: Apache-2.0
//
// A client's hello (daemon/shm/handshake.h) and the checks of who it says
// it is (daemon/shm/client_checks.h), as the client listener runs them on the
// one message a client sends after connect. Input: one byte of flags (bit
// 0: this daemon has a cluster), then the message. Properties: a hello that
// passes has a NUL-terminated job id of printable ASCII and a consistent
// shape (a fixed job's, or an elastic job's); the refusal sent back for one
// that does not is a NUL-terminated printable message of the failing code.
#include <cstring>

#include "daemon/core/text.h"
#include "daemon/shm/client_checks.h"
#include "daemon/shm/handshake.h"
#include "tests/fuzz/fuzz_target.h"

GSYNC_FUZZ_TARGET(client_hello) {
  using namespace gsync;
  fuzz::Input in(data, size);
  bool cluster = in.byte() & 1;
  std::string_view msg = in.rest();
  proto::HelloRequest hello{};
  Status st = parse_hello(msg.data(), msg.size(), &hello);
  if (st) {
    JoinRequest join = join_request(hello);
    FUZZ_CHECK(join.job_id.size() < proto::kJobIdMax);
    st = check_join_request(join, cluster);
    if (st) {
      for (char c : join.job_id) FUZZ_CHECK(c > 0x20 && c < 0x7f);
      FUZZ_CHECK(join.local_rank >= 0 && join.local_rank < join.local_size);
      if (join.min_hosts > 0) {
        // An elastic job: the daemons number its ranks; its bounds agree
        // and its id leaves room for "#epoch" (found by the fuzzer: the
        // fixed job's checks do not hold for it).
        FUZZ_CHECK(join.world_size == 0 && join.rank == 0);
        FUZZ_CHECK(join.max_hosts == 0 || join.max_hosts >= join.min_hosts);
        FUZZ_CHECK(join.job_id.size() + 18 <= proto::kJobIdMax);
        return 0;
      }
      FUZZ_CHECK(join.max_hosts == 0);
      FUZZ_CHECK(join.rank >= 0 && join.rank < join.world_size);
      FUZZ_CHECK(join.local_size <= join.world_size);
      FUZZ_CHECK(cluster || join.local_size == join.world_size);
      return 0;
    }
  }
  FUZZ_CHECK(st.code() < 0);
  proto::HelloReply reply = refusal(st);
  FUZZ_CHECK(reply.status == st.code());
  size_t len = strnlen(reply.message, sizeof reply.message);
  FUZZ_CHECK(len > 0 && len < sizeof reply.message);
  std::string_view message(reply.message, len);
  FUZZ_CHECK(valid_utf8(message));
  for (unsigned char c : message) FUZZ_CHECK(c >= 0x20 && c != 0x7f);
  return 0;
}
