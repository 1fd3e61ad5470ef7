// SPDX-License-Identifier: Apache-2.0
//
// Batch leases' messages as a keeper reads them from its peers
// (daemon/leases/messages.h), and its ledger (lease_book.h) driven by them:
// asks of any epoch, size, rank and clock, settlements and drops in any
// order. Input: messages while it lasts, each a length byte then that many
// bytes.
//
// Properties: only a message of its type's exact size decodes; an ask's
// answer is a batch of the epoch, WAIT, END or held, never another id; in
// every epoch settled + outstanding + free == batches and the end is told
// only once every batch is settled; a batch is never handed out while it is
// out, and what the ledger counts as out is what a model of the same asks,
// settlements and drops has out.
#include <map>
#include <utility>

#include <spdlog/spdlog.h>

#include "daemon/leases/lease_book.h"
#include "daemon/leases/messages.h"
#include "protocol/lease.h"
#include "tests/fuzz/fuzz_target.h"

namespace {
using namespace gsync;

void check_books(const leases::LeaseBook& book) {
  for (const auto& e : book.report()) {
    FUZZ_CHECK(e.settled + e.outstanding + e.free == e.batches);
    FUZZ_CHECK(e.settled <= e.batches && e.batches <= proto::kMaxLeaseBatches);
  }
}

}  // namespace

GSYNC_FUZZ_TARGET(leases) {
  spdlog::set_level(spdlog::level::off);
  fuzz::Input in(data, size);
  leases::LeaseBook book;
  // The model: epoch -> id -> (rank, clock) of the batches out.
  std::map<uint64_t, std::map<uint32_t, std::pair<int, uint64_t>>> out;
  auto take_back = [&](int rank, auto&& which) {
    for (auto& [epoch, ids] : out)
      std::erase_if(
          ids, [&](const auto& kv) { return kv.second.first == rank && which(kv.second.second); });
  };
  for (int i = 0; i < 256 && in.left() > 0; i++) {
    const size_t len = in.byte();
    std::string_view all = in.rest();
    std::string_view msg = all.substr(0, std::min(len, all.size()));
    for (size_t k = 0; k < msg.size(); k++) in.byte();
    leases::LeaseMessage m;
    const bool ok = leases::decode(msg, &m);
    if (!ok) continue;
    switch (m.type) {
      case leases::kLeaseAsk: {
        FUZZ_CHECK(msg.size() == sizeof m.ask);
        // Small sizes, so that epochs end within an input.
        const uint64_t batches = m.ask.batches % 1024 == 0 ? m.ask.batches : m.ask.batches % 16;
        const uint64_t clock = m.ask.clock % 8;
        uint32_t v = 0;
        const int rank = m.ask.rank % 4;
        Status st = book.lease(rank, m.ask.epoch % 4, batches, clock, &v);
        if (!st) break;
        if (v == proto::kLeaseEnd) {
          for (const auto& e : book.report())
            if (e.epoch == m.ask.epoch % 4)
              FUZZ_CHECK(e.settled == e.batches && e.outstanding == 0);
        } else if (v != proto::kLeaseWait && v != leases::kLeaseHold) {
          FUZZ_CHECK(v < batches);
          FUZZ_CHECK(out[m.ask.epoch % 4].emplace(v, std::make_pair(rank, clock)).second);
        }
        break;
      }
      case leases::kLeaseSettle:
        FUZZ_CHECK(msg.size() == sizeof m.settle);
        book.settle(m.settle.rank % 4, m.settle.clock % 8);
        take_back(m.settle.rank % 4, [&](uint64_t c) { return c == m.settle.clock % 8; });
        break;
      case leases::kLeaseDrop:
        FUZZ_CHECK(msg.size() == sizeof m.drop);
        book.drop(m.drop.rank % 4, m.drop.from_clock % 8);
        take_back(m.drop.rank % 4, [&](uint64_t c) { return c >= m.drop.from_clock % 8; });
        break;
      case leases::kLeaseGrant:
        FUZZ_CHECK(msg.size() == sizeof m.grant);
        FUZZ_CHECK(cluster::field(m.grant.message, sizeof m.grant.message).size() <
                   sizeof m.grant.message + 1);
        break;
      default:
        FUZZ_CHECK(false);
    }
    check_books(book);
    for (const auto& e : book.report()) FUZZ_CHECK(e.outstanding == out[e.epoch].size());
  }
  return 0;
}
