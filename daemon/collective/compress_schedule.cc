// SPDX-License-Identifier: Apache-2.0
#include "daemon/collective/compress_schedule.h"

#include <algorithm>
#include <string>

namespace gsync::collective {
namespace {

bool spans_racks(const std::vector<Participant>& parts) {
  for (const auto& p : parts)
    if (p.rack != parts.front().rack) return true;
  return false;
}

bool crosses_rack(const Phase& ph, const std::vector<Participant>& parts, int self) {
  const std::string& mine = parts[size_t(self)].rack;
  auto other = [&](const Transfer& t) { return parts[size_t(t.peer)].rack != mine; };
  return std::any_of(ph.sends.begin(), ph.sends.end(), other) ||
         std::any_of(ph.recvs.begin(), ph.recvs.end(), other);
}

std::vector<int> peers_of(const std::vector<Transfer>& ts, Xfer kind) {
  std::vector<int> out;
  for (const auto& t : ts)
    if (t.kind == kind) out.push_back(t.peer);
  std::sort(out.begin(), out.end());
  return out;
}

bool has(const std::vector<Transfer>& ts, Xfer kind) {
  return std::any_of(ts.begin(), ts.end(), [&](const Transfer& t) { return t.kind == kind; });
}

// Every host of the phase sends its value to the others and folds theirs:
// all of them compute the same sum from the same contributions.
bool symmetric(const Phase& ph, int self) {
  std::vector<int> out = peers_of(ph.sends, Xfer::kReduce), in = peers_of(ph.recvs, Xfer::kReduce);
  return !out.empty() && out == in &&
         std::find(ph.fold.begin(), ph.fold.end(), self) != ph.fold.end();
}

// int8's agreement on scales before a symmetric phase: the same peers, the
// same slots, the maxima instead of the data.
Phase maxima_phase(const Phase& ph) {
  Phase m;
  for (const auto& t : ph.sends) m.sends.push_back({t.peer, Xfer::kMaxima, t.slot});
  for (const auto& t : ph.recvs) m.recvs.push_back({t.peer, Xfer::kMaxima, t.slot});
  m.fold = ph.fold;
  m.step = ph.step;
  m.packed = true;
  m.send = SendMode::kMaxima;
  m.residual = ph.residual;
  return m;
}

struct ChunkRewrite {
  proto::Codec codec;
  bool hier = false, whole_packed = false;
  proto::Hops hops;
  const std::vector<Participant>* parts;
  int self;

  // Rewrites one chunk's phases; returns how many error buffers they use.
  int run(std::vector<Phase>* phases, bool* copy_slot) const {
    std::vector<Phase> out;
    bool selected = false, holds_copy = false;
    int e = 0;
    for (Phase ph : *phases) {
      bool packed = hier ? crosses_rack(ph, *parts, self) || hops != proto::Hops::kCrossRack
                         : whole_packed;
      if (!packed) {
        if (has(ph.recvs, Xfer::kCopy)) holds_copy = false;
        out.push_back(std::move(ph));
        continue;
      }
      ph.packed = true;
      ph.symmetric = symmetric(ph, self);
      if (has(ph.recvs, Xfer::kReduce) && !ph.symmetric && selects(codec) && !selected) {
        ph.select = true;
        ph.residual = static_cast<int8_t>(e++);
        selected = true;
      }
      if (!ph.sends.empty()) {
        bool sends_copy = has(ph.sends, Xfer::kCopy);
        if (sends_copy && holds_copy) {
          ph.send = SendMode::kForward;
        } else if (selects(codec) && selected) {
          ph.send = SendMode::kExact;
        } else {
          ph.send = SendMode::kEncode;
          ph.residual = static_cast<int8_t>(e++);
          ph.write_back = ph.symmetric || sends_copy;
          selected = selects(codec);
        }
      }
      if (ph.symmetric && codec == proto::Codec::kInt8) {
        out.push_back(maxima_phase(ph));
        ph.shared_scale = true;
      }
      if (has(ph.recvs, Xfer::kCopy)) {
        holds_copy = true;
        *copy_slot = true;
      }
      out.push_back(std::move(ph));
    }
    *phases = std::move(out);
    return e;
  }
};

}  // namespace

void compress_schedule(const std::vector<Participant>& parts, proto::Codec codec,
                       proto::Hops hops, Schedule* s) {
  if (codec == proto::Codec::kNone || parts.size() < 2 || s->self < 0) return;
  ChunkRewrite rw{codec, s->algo == Algo::kHier,
                  hops != proto::Hops::kCrossRack || spans_racks(parts), hops, &parts, s->self};
  for (auto& phases : s->chunks) s->residuals = std::max(s->residuals, rw.run(&phases, &s->copy_slot));
}

}  // namespace gsync::collective
