// SPDX-License-Identifier: Apache-2.0
#include "daemon/collective/schedule.h"

#include <algorithm>
#include <map>

namespace gsync::collective {

const char* algo_name(Algo a) {
  switch (a) {
    case Algo::kRing: return "ring";
    case Algo::kHier: return "hier";
    case Algo::kDirect: return "direct";
    case Algo::kTree: return "tree";
    case Algo::kDoubling: return "doubling";
  }
  return "unknown";
}

bool parse_algo(const std::string& name, Algo* out) {
  if (name == "ring") *out = Algo::kRing;
  else if (name == "hier") *out = Algo::kHier;
  else if (name == "direct") *out = Algo::kDirect;
  else if (name == "tree") *out = Algo::kTree;
  else if (name == "doubling") *out = Algo::kDoubling;
  else return false;
  return true;
}

bool algo_from_wire(uint8_t v, Algo* out) {
  if (v < static_cast<uint8_t>(Algo::kRing) || v > static_cast<uint8_t>(Algo::kDoubling))
    return false;
  *out = static_cast<Algo>(v);
  return true;
}

namespace {

// Chunk c belongs to segment floor(c * n / chunks): n contiguous segments
// whose sizes differ by at most one chunk (some are empty when chunks < n).
int segment_of(size_t c, int n, size_t chunks) {
  return static_cast<int>(c * static_cast<size_t>(n) / chunks);
}

// Ring reduce-scatter then allgather of one chunk among members (participant
// indices, in ring order), seen from member q. Reductions use scratch slot
// `slot`. Returns true when q owns the fully reduced chunk after the
// reduce-scatter (the phases before the allgather are appended to rs, the
// allgather ones to ag).
bool ring_phases(const std::vector<int>& members, int q, int segment, uint8_t slot,
                 std::vector<Phase>* rs, std::vector<Phase>* ag) {
  int m = static_cast<int>(members.size());
  if (m == 1) return true;
  int d = ((q - segment) % m + m) % m;  // how far down the chain from the segment's start
  int left = members[static_cast<size_t>((q - 1 + m) % m)];
  int right = members[static_cast<size_t>((q + 1) % m)];
  int self = members[static_cast<size_t>(q)];
  if (d >= 1) rs->push_back(Phase{{}, {{left, Xfer::kReduce, slot}}, {left, self}});
  if (d <= m - 2) rs->push_back(Phase{{{right, Xfer::kReduce, slot}}, {}, {}});
  bool owner = d == m - 1;
  if (owner) {
    ag->push_back(Phase{{{right, Xfer::kCopy, 0}}, {}, {}});
  } else {
    ag->push_back(Phase{{}, {{left, Xfer::kCopy, 0}}, {}});
    if (d <= m - 3) ag->push_back(Phase{{{right, Xfer::kCopy, 0}}, {}, {}});
  }
  return owner;
}

}  // namespace

TreeLinks tree_links(int n, int root, int self) {
  TreeLinks t;
  int v = ((self - root) % n + n) % n;
  auto participant = [&](int u) { return (u + root) % n; };
  if (v > 0) {
    t.parent = participant((v - 1) / kTreeFanout);
    t.ordinal = (v - 1) % kTreeFanout;
  }
  for (int k = 1; k <= kTreeFanout; k++) {
    int u = v * kTreeFanout + k;
    if (u < n) t.children.push_back(participant(u));
  }
  return t;
}

namespace {
// Height of node v (root-relative) in the kTree heap of n nodes: 0 at a
// leaf. The heap fills level by level from the left, so a node's first
// child always leads down its longest path.
int heap_height(int v, int n) {
  int h = 0;
  for (int64_t u = int64_t{v} * kTreeFanout + 1; u < n; u = u * kTreeFanout + 1) h++;
  return h;
}
}  // namespace

int tree_root(int n, uint64_t key, uint64_t step) {
  return n <= 0 ? 0 : static_cast<int>((key * 0x9e3779b97f4a7c15ull + step) % uint64_t(n));
}

namespace {

void direct_schedule(int n, int self, Schedule* out) {
  Schedule& s = *out;
  // One phase: everyone sends its chunk to everyone, and folds all n in
  // participant order. One hop of latency; (n-1) x S on the wire each way.
  s.slots = n;
  Phase p;
  for (int j = 0; j < n; j++) {
    p.fold.push_back(j);
    if (j == self) continue;
    p.sends.push_back({j, Xfer::kReduce, static_cast<uint8_t>(self)});
    p.recvs.push_back({j, Xfer::kReduce, static_cast<uint8_t>(j)});
  }
  for (auto& c : s.chunks) c = {p};
}

void tree_schedule(int n, int self, int root, Schedule* out) {
  Schedule& s = *out;
  // Up the tree: gather the children's partial sums into scratch slots
  // (slot = the child's ordinal), fold [self, children...], send the
  // result to the parent; down the tree: the parent's final sum lands in
  // the data and is passed on to the children. Only the root computes the
  // final sum, so every host ends with its bits. 2(n-1) transfers of S,
  // 2 x depth steps.
  TreeLinks t = tree_links(n, root, self);
  s.slots = static_cast<int>(t.children.size());
  // Steps: a node waits for its children at height - 1, then (after the
  // deepest up-sweep, at tree height H) for its parent's sum at H + depth.
  int v = ((self - root) % n + n) % n;
  int height = heap_height(v, n), top = heap_height(0, n), depth = 0;
  for (int u = v; u > 0; u = (u - 1) / kTreeFanout) depth++;
  std::vector<Phase> phases;
  if (!t.children.empty()) {
    Phase up;
    up.step = height - 1;
    up.fold.push_back(self);
    for (size_t i = 0; i < t.children.size(); i++) {
      up.recvs.push_back({t.children[i], Xfer::kReduce, static_cast<uint8_t>(i)});
      up.fold.push_back(t.children[i]);
    }
    phases.push_back(std::move(up));
  }
  if (t.parent >= 0)
    phases.push_back(Phase{{{t.parent, Xfer::kReduce, static_cast<uint8_t>(t.ordinal)}},
                           {{t.parent, Xfer::kCopy, 0}},
                           {},
                           top + depth});
  if (!t.children.empty()) {
    Phase down;
    down.step = top + depth + 1;
    for (int c : t.children) down.sends.push_back({c, Xfer::kCopy, 0});
    phases.push_back(std::move(down));
  }
  for (auto& c : s.chunks) c = phases;
}

void doubling_schedule(int n, int self, Schedule* out) {
  Schedule& s = *out;
  // Recursive doubling among the first p = 2^k hosts: in round r each
  // exchanges its partial sum with host self ^ 2^r (scratch slot 1 + r)
  // and both fold [lower, higher], so the pair holds the same bits. The
  // n - p hosts beyond p first hand their part to host self - p (slot 0)
  // and get the final sum back from it. k rounds (+2 beyond a power of
  // two); every host sends k x S, no host does more than its share.
  int p = 1, k = 0;
  while (p * 2 <= n) p *= 2, k++;
  s.slots = 1 + k;
  int first_round = n > p ? 1 : 0;  // step 0 is the hand-in when there are extra hosts
  std::vector<Phase> phases;
  if (self >= p) {
    phases.push_back(Phase{{{self - p, Xfer::kReduce, 0}}, {}, {}, 0});
    phases.push_back(Phase{{}, {{self - p, Xfer::kCopy, 0}}, {}, first_round + k});
  } else {
    if (self + p < n)
      phases.push_back(Phase{{}, {{self + p, Xfer::kReduce, 0}}, {self, self + p}, 0});
    for (int r = 0; r < k; r++) {
      int partner = self ^ (1 << r);
      auto slot = static_cast<uint8_t>(1 + r);
      phases.push_back(Phase{{{partner, Xfer::kReduce, slot}},
                             {{partner, Xfer::kReduce, slot}},
                             {std::min(self, partner), std::max(self, partner)},
                             first_round + r});
    }
    if (self + p < n) phases.push_back(Phase{{{self + p, Xfer::kCopy, 0}}, {}, {}, first_round + k});
  }
  for (auto& c : s.chunks) c = phases;
}

void ring_schedule(int n, int self, size_t chunks, Schedule* out) {
  Schedule& s = *out;
  std::vector<int> all(static_cast<size_t>(n));
  for (int i = 0; i < n; i++) all[static_cast<size_t>(i)] = i;
  s.slots = 1;
  for (size_t c = 0; c < chunks; c++) {
    std::vector<Phase> rs, ag;
    ring_phases(all, self, segment_of(c, n, chunks), 0, &rs, &ag);
    rs.insert(rs.end(), ag.begin(), ag.end());
    s.chunks[c] = std::move(rs);
  }
}

void hier_schedule(const std::vector<Participant>& parts, int self, size_t chunks, Schedule* out) {
  Schedule& s = *out;
  int n = static_cast<int>(parts.size());
  // Hierarchical: racks in order of first appearance.
  std::vector<std::string> rack_names;
  std::map<std::string, std::vector<int>> racks;
  for (int i = 0; i < n; i++) {
    const auto& r = parts[static_cast<size_t>(i)].rack;
    if (!racks.count(r)) rack_names.push_back(r);
    racks[r].push_back(i);
  }
  int nr = static_cast<int>(rack_names.size());
  int my_rack = static_cast<int>(std::find(rack_names.begin(), rack_names.end(),
                                           parts[static_cast<size_t>(self)].rack) -
                                 rack_names.begin());
  const auto& mine = racks[rack_names[static_cast<size_t>(my_rack)]];
  int q = static_cast<int>(std::find(mine.begin(), mine.end(), self) - mine.begin());
  s.slots = 1 + nr;
  for (size_t c = 0; c < chunks; c++) {
    std::vector<Phase> rs, ag;
    int seg = segment_of(c, static_cast<int>(mine.size()), chunks);
    bool owner = ring_phases(mine, q, seg, 0, &rs, &ag);
    if (owner && nr > 1) {
      // The owners of this chunk in every rack exchange their rack sums and
      // fold them in rack order: S each way over each rack's uplink.
      Phase x;
      for (int r = 0; r < nr; r++) {
        const auto& members = racks[rack_names[static_cast<size_t>(r)]];
        int m = static_cast<int>(members.size());
        int their_seg = segment_of(c, m, chunks);
        int their_owner = members[static_cast<size_t>((their_seg + m - 1) % m)];
        x.fold.push_back(their_owner);
        if (r == my_rack) continue;
        x.sends.push_back({their_owner, Xfer::kReduce, static_cast<uint8_t>(1 + my_rack)});
        x.recvs.push_back({their_owner, Xfer::kReduce, static_cast<uint8_t>(1 + r)});
      }
      rs.push_back(std::move(x));
    }
    rs.insert(rs.end(), ag.begin(), ag.end());
    s.chunks[c] = std::move(rs);
  }
}

}  // namespace

Schedule build_schedule(Algo algo, const std::vector<Participant>& parts, int self,
                        size_t chunks, int root) {
  Schedule s;
  s.algo = algo;
  s.self = self;
  s.chunks.resize(chunks);
  int n = static_cast<int>(parts.size());
  if (n <= 1 || chunks == 0) return s;
  switch (algo) {
    case Algo::kDirect: direct_schedule(n, self, &s); break;
    case Algo::kTree: tree_schedule(n, self, root, &s); break;
    case Algo::kDoubling: doubling_schedule(n, self, &s); break;
    case Algo::kRing: ring_schedule(n, self, chunks, &s); break;
    case Algo::kHier: hier_schedule(parts, self, chunks, &s); break;
  }
  return s;
}

Algo choose_algo(const std::vector<Participant>& parts, uint64_t bytes) {
  // Below this a tensor is latency-bound: one exchange step beats the 2(n-1)
  // steps of a ring (measured: docs/algorithms.md).
  constexpr uint64_t kDirectBytes = 64 << 10;
  // From 4 hosts the tree's 2(n-1) messages cost less than direct's n(n-1)
  // (each a syscall and a wakeup at both ends), though it takes two steps.
  constexpr size_t kTreeHosts = 4;
  if (bytes <= kDirectBytes) return parts.size() >= kTreeHosts ? Algo::kTree : Algo::kDirect;
  std::vector<std::string> racks;
  for (const auto& p : parts)
    if (std::find(racks.begin(), racks.end(), p.rack) == racks.end()) racks.push_back(p.rack);
  return racks.size() > 1 ? Algo::kHier : Algo::kRing;
}

uint64_t choose_chunk_bytes(Algo algo, size_t hosts, uint64_t bytes) {
  if ((algo == Algo::kDirect || algo == Algo::kTree) && bytes <= (1u << 20))
    return std::max<uint64_t>(bytes, 4096);
  // Enough chunks per segment to keep the pipeline full (8), none smaller
  // than 256 KiB (per-write overhead) or larger than 4 MiB (pipeline fill).
  uint64_t per = bytes / (hosts * 8);
  per = std::clamp<uint64_t>(per, 256 << 10, 4 << 20);
  return (per + 4095) / 4096 * 4096;
}

}  // namespace gsync::collective
