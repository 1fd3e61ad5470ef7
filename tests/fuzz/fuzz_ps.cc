// SPDX-License-Identifier: Apache-2.0
//
// What the parameter server reads from outside (docs/parameter-server.md):
// a declaration's options as a rank wrote them into shared memory, the
// sync mode a hello carries, a push's learning rate, the three messages a
// peer sends (decoded as the service decodes them), and a shard's server
// fed pushes of any clock, weight, learning rate and bytes.
//
// Input: a 64-byte declaration header, 4 bytes of sync mode, 4 of
// learning rate, a scenario (workers, dtype, shard size), then pushes (a
// worker, a clock, a weight, a learning rate, the shard's bytes) while the
// input lasts; the rest also goes to the message decoders.
//
// Properties: a header that passes gives options that pass the rules; a
// refused push changes no value and no clock; an accepted one moves that
// worker's clock on by one; only messages of their exact size decode.
#include <cstring>
#include <vector>

#include "daemon/ps/messages.h"
#include "daemon/ps/param_server.h"
#include "protocol/ps.h"
#include "tests/fuzz/fuzz_target.h"

namespace {
using namespace gsync;

void check_header(fuzz::Input& in) {
  auto h = in.take<proto::PsDeclareHeader>();
  proto::PsOptions o;
  if (proto::from_header(h, &o).empty()) FUZZ_CHECK(proto::check(o).empty());
  proto::Sync s;
  if (proto::from_wire(in.take<uint32_t>(), &s).empty())
    FUZZ_CHECK(s.staleness <= proto::kMaxStaleness &&
               (s.mode == proto::SyncMode::kSsp || s.staleness == 0));
  float lr = -1;
  if (proto::check_push_lr(in.take<uint32_t>(), &lr).empty()) FUZZ_CHECK(lr >= 0);
}

void check_server(fuzz::Input& in) {
  const int workers = 1 + in.byte() % 4;
  const proto::DType dtypes[] = {proto::DType::kF32, proto::DType::kF16, proto::DType::kBF16};
  const proto::DType dtype = dtypes[in.byte() % 3];
  const size_t n = 1 + in.byte() % 64, elem = proto::dtype_size(dtype);
  proto::PsOptions o;
  o.optimizer = static_cast<proto::Optimizer>(in.byte() % 3);
  o.momentum = (in.byte() % 2) * 0.5f;
  proto::Sync sync;
  sync.mode = static_cast<proto::SyncMode>(in.byte() % 3);
  if (sync.mode == proto::SyncMode::kSsp) sync.staleness = in.byte() % 4;
  std::vector<uint8_t> init(n * elem, 0);
  ps::ParamServer server(o, sync, dtype, ps::Shard{0, n}, workers, init.data());
  // bsp keeps a pointer to each worker's push until its clock is complete:
  // a slot per worker, as the push region has.
  std::vector<std::vector<uint8_t>> slots(size_t(workers), std::vector<uint8_t>(n * elem));
  for (int i = 0; i < 64 && in.left() > 0; i++) {
    int w = in.byte() % workers;
    uint64_t clock = in.byte() % 8;
    double weight = in.take<double>();
    float lr = in.take<float>();
    for (auto& b : slots[size_t(w)]) b = in.byte();
    std::vector<float> before = server.values();
    uint64_t next = server.next_clock(w);
    Status st = server.push(w, clock, weight, lr, slots[size_t(w)].data(), "fuzz");
    // bsp: a clock's update in two ranges, as the service applies it while
    // the pushes land (at a block's multiple, or all at once).
    if (server.gathered()) {
      uint64_t clock_before = server.bsp_clock();
      server.apply_upto(in.byte() % 2 ? 0 : n);
      server.apply_upto(n);
      FUZZ_CHECK(server.bsp_clock() == clock_before + 1 && server.applied_upto() == 0);
    }
    if (!st) {
      FUZZ_CHECK(server.next_clock(w) == next);
      FUZZ_CHECK(std::memcmp(before.data(), server.values().data(), n * sizeof(float)) == 0);
      FUZZ_CHECK(st.message().find("fuzz") == 0);
    } else {
      FUZZ_CHECK(server.next_clock(w) == next + 1 && clock == next);
    }
  }
}

void check_messages(std::string_view msg) {
  ps::PsRegions r;
  ps::PsPush p;
  ps::PsAck a;
  ps::PsCheckpoint c;
  ps::PsNorm nm;
  FUZZ_CHECK(ps::decode_exact(msg, &c) == (msg.size() == sizeof c));
  FUZZ_CHECK(ps::decode_exact(msg, &nm) == (msg.size() == sizeof nm));
  FUZZ_CHECK(ps::decode_exact(msg, &r) == (msg.size() == sizeof r));
  FUZZ_CHECK(ps::decode_exact(msg, &p) == (msg.size() == sizeof p));
  FUZZ_CHECK(ps::decode_exact(msg, &a) == (msg.size() == sizeof a));
  if (msg.size() == sizeof a)
    FUZZ_CHECK(cluster::field(a.message, sizeof a.message).size() <= sizeof a.message);
}

}  // namespace

GSYNC_FUZZ_TARGET(ps) {
  fuzz::Input in(data, size);
  check_messages(in.rest());
  check_header(in);
  check_server(in);
  return 0;
}
