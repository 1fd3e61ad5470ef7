// SPDX-License-Identifier: Apache-2.0
//
// The tuning table's file (daemon/tuning/tune_table.h), as `gsyncctl tune
// load` and the daemon's start hand it over: any bytes. Input: the file's
// text.
//
// Properties: a refused text leaves the table it was parsed into as it
// was; a table that parses writes a text that parses to the same table
// (same text again); every lookup answers an algorithm the table holds
// (never auto) and a chunk size that is whole 4 KiB pages.
#include <string>

#include "daemon/tuning/tune_table.h"
#include "tests/fuzz/fuzz_target.h"

GSYNC_FUZZ_TARGET(tuning) {
  using gsync::tuning::TuneTable;
  const std::string_view text = gsync::fuzz::text_of(data, size);
  TuneTable before;
  FUZZ_CHECK(TuneTable::parse(R"({"format": 1, "entries": [{"hosts": ["a"], "bytes": 8,
                                  "algorithm": "tree"}]})",
                              &before));
  TuneTable t = before;
  if (!TuneTable::parse(text, &t)) {
    FUZZ_CHECK(t.to_json() == before.to_json());
    return 0;
  }
  const std::string once = t.to_json();
  TuneTable again;
  FUZZ_CHECK(TuneTable::parse(once, &again));
  FUZZ_CHECK(again.to_json() == once);
  for (const auto& hosts : {std::vector<std::string>{"a"}, std::vector<std::string>{"h1", "h2"}})
    for (uint64_t bytes : {uint64_t{0}, uint64_t{4096}, uint64_t{1} << 40}) {
      auto p = t.lookup(hosts, bytes);
      if (!p) continue;
      FUZZ_CHECK(p->algo >= 1 && p->algo <= gsync::proto::kAlgoMax);
      FUZZ_CHECK(p->chunk_bytes % gsync::proto::kChunkUnit == 0);
    }
  return 0;
}
