// SPDX-License-Identifier: Apache-2.0
#include "daemon/collective/compress_schedule.h"

#include <algorithm>
#include <map>
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
// same slots, the maxima instead of the data. It takes the step of the
// phase it precedes: it waits on the same hosts, who waited on nobody else
// before sending their maxima.
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

// Whether some host hands on, encoded, a final value that several hosts
// computed in a symmetric phase: a hier rack owner to its rack (when the
// rack's hops are packed), a doubling host to the host beyond the power of
// two. Then every holder of that value must encode it (and take the
// decoding) the same way, senders or not, or they end with different bits.
// Top-k forwards sums exactly (kExact): nothing to agree on.
bool shared_final_reencoded(Algo algo, const std::vector<Participant>& parts, proto::Codec codec,
                            proto::Hops hops, bool whole_packed) {
  if (selects(codec)) return false;
  size_t n = parts.size();
  if (algo == Algo::kDoubling) return whole_packed && (n & (n - 1)) != 0;
  if (algo != Algo::kHier || hops == proto::Hops::kCrossRack) return false;
  std::map<std::string, int> racks;
  for (const auto& p : parts) racks[p.rack]++;
  if (racks.size() < 2) return false;
  return std::any_of(racks.begin(), racks.end(), [](const auto& r) { return r.second > 1; });
}

// One chunk's rewrite, phase by phase.
struct ChunkState {
  bool selected = false;    // top-k: this host's data was selected
  bool holds_copy = false;  // the copy slot holds an encoded final value
  bool shared = false;      // data is a symmetric phase's sum: its peers hold it too
  bool lead = true;         // first in the fold of every symmetric phase so far
  bool reencoded = false;   // this host encoded the shared final value
  int residuals = 0;        // error buffers used
  int own = -1;             // the first, of this host's own contribution
  int scratch = -1;         // the one of shared encodes (zero between uses)
};

struct ChunkRewrite {
  proto::Codec codec;
  bool hier, whole_packed, final_reencoded;
  proto::Hops hops;
  const std::vector<Participant>* parts;
  int self;

  int8_t own_buffer(ChunkState* st) const {
    int e = st->residuals++;
    if (st->own < 0) st->own = e;
    return static_cast<int8_t>(e);
  }

  // The hosts that hold a shared value encode it alike (no error buffer
  // enters it); what it drops goes to one of them, the lead: the host first
  // in the fold of every symmetric phase so far (the lowest host of a
  // doubling group, the first rack's owner in hier). Its error buffer
  // `own` carries it into its contribution of the next step.
  void encode_shared(Phase* ph, ChunkState* st) const {
    if (st->scratch < 0) st->scratch = st->residuals++;
    ph->residual = static_cast<int8_t>(st->scratch);
    ph->shared = true;
    ph->feedback = static_cast<int8_t>(st->lead ? st->own : -1);
  }

  void assign_send(Phase* ph, ChunkState* st) const {
    bool copy = has(ph->sends, Xfer::kCopy);
    if (copy && st->holds_copy) {
      ph->send = SendMode::kForward;
      return;
    }
    if (selects(codec) && st->selected) {
      ph->send = SendMode::kExact;
      return;
    }
    // The sender of a final value takes the decoding of what it sent: its
    // receivers' bits.
    ph->send = SendMode::kEncode;
    ph->write_back = copy;
    if (st->shared) {
      encode_shared(ph, st);
      st->reencoded |= copy;
    } else {
      ph->residual = own_buffer(st);
    }
    st->selected = selects(codec);
  }

  void rewrite(Phase ph, ChunkState* st, std::vector<Phase>* out) const {
    bool packed = hier ? crosses_rack(ph, *parts, self) || hops != proto::Hops::kCrossRack
                       : whole_packed;
    bool folds = has(ph.recvs, Xfer::kReduce), lands = has(ph.recvs, Xfer::kCopy);
    bool sym = symmetric(ph, self);
    if (packed) {
      ph.packed = true;
      ph.symmetric = sym;
      if (folds && !sym && selects(codec) && !st->selected) {
        ph.select = true;
        ph.residual = own_buffer(st);
        st->selected = true;
      }
      if (!ph.sends.empty()) assign_send(&ph, st);
      if (sym && codec == proto::Codec::kInt8) {
        out->push_back(maxima_phase(ph));
        ph.shared_scale = true;
      }
    }
    if (folds) {
      st->shared = sym;
      if (sym) st->lead &= ph.fold.front() == self;
    }
    if (lands) {
      st->shared = false;
      st->holds_copy = packed;
    }
    out->push_back(std::move(ph));
  }

  // Rewrites one chunk's phases; returns how many error buffers they use.
  int run(std::vector<Phase>* phases, bool* copy_slot) const {
    std::vector<Phase> out;
    ChunkState st;
    for (Phase& ph : *phases) rewrite(std::move(ph), &st, &out);
    if (final_reencoded && st.shared && !st.reencoded) {
      // A holder that hands the shared final value to nobody still takes
      // the decoding its peers hand on: a phase that only encodes.
      Phase f;
      f.step = out.empty() ? 0 : out.back().step;
      f.packed = true;
      f.send = SendMode::kEncode;
      f.write_back = true;
      encode_shared(&f, &st);
      out.push_back(std::move(f));
    }
    for (const auto& ph : out) *copy_slot |= ph.packed && has(ph.recvs, Xfer::kCopy);
    *phases = std::move(out);
    return st.residuals;
  }
};

}  // namespace

void compress_schedule(const std::vector<Participant>& parts, proto::Codec codec,
                       proto::Hops hops, Schedule* s) {
  if (codec == proto::Codec::kNone || parts.size() < 2 || s->self < 0) return;
  bool whole_packed = hops != proto::Hops::kCrossRack || spans_racks(parts);
  bool reencoded = shared_final_reencoded(s->algo, parts, codec, hops, whole_packed);
  ChunkRewrite rw{codec, s->algo == Algo::kHier, whole_packed, reencoded, hops, &parts, s->self};
  for (auto& phases : s->chunks)
    s->residuals = std::max(s->residuals, rw.run(&phases, &s->copy_slot));
}

}  // namespace gsync::collective
