// SPDX-License-Identifier: Apache-2.0
//
// gsync-perf's --compress (docs/compression.md, "Measured"): each size is
// run once per codec in the same run, one row each; a compressed row is
// checked by its error against the exact sum and by every rank ending with
// the same bits, and carries the bytes its op put on the compressed hop,
// read from the daemons' own counters (gsyncctl peers).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "gsync/gsync.h"

namespace gsync::perf {

struct CodecRun {
  std::string text;  // as given: "none", "int8", "topk:0.01@cross_host"
  gsync_compression_t c{};
  bool none = true;
  // The relative L2 error of one op's result against the exact sum that a
  // correct codec stays under (docs/compression.md, "Measured"); top-k has
  // no such bound on dense data (it drops 99% of a step): infinite.
  double bound = 0;
};

// The --compress values, in order; none given: one uncompressed run. "" or
// what is wrong.
std::string parse_codecs(const std::vector<std::string>& texts, std::vector<CodecRun>* out);

// Whether op and dtype allow a codec ("" or why not).
std::string codecs_allowed(const std::vector<CodecRun>& runs, int dtype, int op);

// Tensor payload this host's daemon has written so far to the peers across
// the compressed hop (other racks for cross_rack, every peer otherwise): on
// the wire, and the fp32 bytes it stands for.
struct Payload {
  uint64_t wire = 0, logical = 0;
};
Payload hop_payload(const std::string& admin_socket, const gsync_compression_t& c);

// The relative L2 error of got against want, and a hash of got's bits.
double relative_error(const std::vector<double>& got, const std::vector<double>& want);
uint64_t bits_hash(const void* data, size_t bytes);

}  // namespace gsync::perf
