// SPDX-License-Identifier: Apache-2.0
//
// Gradient compression as a rewrite of a schedule: which phases carry
// encodings, how each makes the bytes it sends, which error buffer it uses,
// and the maxima exchange int8 needs before a symmetric phase. The
// algorithms (schedule.cc) stay as they are; the rewritten phases run
// through pack.h, in the engine and in tests/unit/test_compress_schedule.cc.
// docs/compression.md, "Where the codecs apply".
//
// Which phases are packed:
//  - hier: the exchange between the racks' owners always; the phases inside
//    a rack only when hops is cross_host or all (the same here: the hops
//    inside a host are not the schedule's).
//  - every other algorithm: all phases, when hops is not cross_rack or the
//    hosts span several racks (a ring or tree across racks carries every
//    chunk over an uplink, and all hosts must end with the same bits, so a
//    final value is encoded once, by the host that computed it, and every
//    hop forwards that encoding).
//
// How a packed phase sends, per codec family:
//  - fp16, bf16, int8: every value this host computed alone is encoded
//    with error feedback when it is sent (kEncode; a partial sum's error
//    stays with the aggregating host, 1-bit Adam's second error buffer); a
//    final value received encoded is forwarded as it came (kForward).
//  - topk: this host's own data is selected once, at its first packed phase
//    (select, or kEncode when that phase only sends); from then on sums of
//    selected values are merged and sent without loss (kExact, SparCML), so
//    top-k never has to commute with summation.
// A symmetric phase (every host of it sends its value to the others and all
// fold the same contributions: direct, the hier exchange, a doubling round)
// folds every contribution's encoding, its own included, so all of them get
// the same bits. int8 adds a maxima phase before each symmetric phase: the
// hosts agree on every block's scale, then sum int8 values in int32.
//
// A value several hosts hold (a symmetric phase's sum) and that is encoded
// again (a later doubling round; the hier owners' sum handed on in their
// racks; a doubling's sum handed to the hosts beyond the power of two) must
// be encoded alike by all of them, or they and the hosts they feed end with
// different bits (Phase::shared):
//  - no error buffer enters the encoding. Each holder's own would give the
//    same bits only while all those buffers held the same values, which a
//    host that starts over breaks, and would keep each dropped value once
//    per holder. What the encoding drops is kept by one
//    holder, the lead (first in the fold of every symmetric phase so far:
//    the lowest host of a doubling group, the first rack's owner), in the
//    error buffer of its own contribution, which it sends at the next step;
//    the others drop it. So every dropped value is still kept exactly once.
//  - a final value that some holder hands on encoded is encoded, and its
//    decoding written back, by every holder, sending or not (an encode-only
//    phase at the end of the chunk for those that send nothing: a hier rack
//    of one host, the doubling hosts without a host beyond the power).
// Top-k forwards sums exactly (kExact): nothing to agree on.
#pragma once

#include <vector>

#include "daemon/collective/schedule.h"
#include "protocol/ops.h"

namespace gsync::collective {

// Whether the codec selects (top-k) rather than re-encodes (the others).
inline bool selects(proto::Codec c) { return c == proto::Codec::kTopk; }

// Rewrites every chunk's phases of s (built by build_schedule for parts)
// for the codec; a no-op for kNone. Sets s->residuals and s->copy_slot.
void compress_schedule(const std::vector<Participant>& parts, proto::Codec codec,
                       proto::Hops hops, Schedule* s);

}  // namespace gsync::collective
