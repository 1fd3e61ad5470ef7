// SPDX-License-Identifier: Apache-2.0
//
// A host's record as another daemon (or anyone with write access to etcd)
// left it (daemon/cluster/etcd/record.h). Properties: a record that decodes
// has a printable id without '/', a printable address and rack, a port of
// 1..65535 and a slot inside the table, and encodes to a record that decodes
// to the same fields; one that does not says why.
#include "daemon/cluster/etcd/record.h"
#include "daemon/core/text.h"
#include "tests/fuzz/fuzz_target.h"

GSYNC_FUZZ_TARGET(etcd_record) {
  using namespace gsync;
  using namespace gsync::cluster::etcd;
  HostRecord r;
  Status st = decode_record(fuzz::text_of(data, size), &r);
  if (!st) {
    FUZZ_CHECK(!st.message().empty());
    return 0;
  }
  FUZZ_CHECK(!r.id.empty() && is_printable(r.id) && r.id.find('/') == std::string::npos);
  FUZZ_CHECK(!r.address.empty() && is_printable(r.address));
  FUZZ_CHECK(!r.rack.empty() && is_printable(r.rack));
  FUZZ_CHECK(r.port >= 1);
  FUZZ_CHECK(r.slot >= 0 && r.slot < kMaxSlots);
  HostRecord again;
  FUZZ_CHECK(decode_record(encode_record(r), &again));
  FUZZ_CHECK(again.id == r.id && again.address == r.address && again.rack == r.rack &&
             again.port == r.port && again.slot == r.slot && again.pid == r.pid &&
             again.version == r.version && again.build_id == r.build_id);
  return 0;
}
