// SPDX-License-Identifier: Apache-2.0
#include "daemon/collective/plan.h"

#include <algorithm>

#include <fmt/format.h>

#include "daemon/cluster/messages.h"
#include "daemon/transport/transport.h"

namespace gsync::collective {

namespace {
constexpr size_t kMaxChunks = 1 << 24;

// The root's host sends its tensor to every other host: one phase.
Schedule broadcast_schedule(int n, int self, int root, size_t nchunks) {
  Schedule s;
  s.algo = Algo::kDirect;
  s.self = self;
  Phase p;
  if (self == root) {
    for (int j = 0; j < n; j++)
      if (j != root) p.sends.push_back({j, Xfer::kCopy, 0});
  } else {
    p.recvs.push_back({root, Xfer::kCopy, 0});
  }
  s.chunks.assign(nchunks, std::vector<Phase>{p});
  return s;
}
}  // namespace

std::unique_ptr<Plan> build_plan(const PlanInputs& in) {
  auto plan = std::make_unique<Plan>();
  Plan& p = *plan;
  p.shape = in.shape;
  p.parts = in.parts;
  for (const auto& part : in.parts) p.hosts.push_back(part.host);
  p.self = in.self;
  p.root_participant = in.root_participant;
  uint64_t bytes = in.shape.bytes();
  size_t elem = std::max<size_t>(in.shape.elem(), 1);
  Algo algo = Algo::kRing;
  if (in.algorithm == "auto" || !parse_algo(in.algorithm, &algo))
    algo = choose_algo(in.parts, bytes);
  uint64_t cb = in.chunk_bytes ? in.chunk_bytes : choose_chunk_bytes(algo, in.parts.size(), bytes);
  uint64_t count = in.shape.count;
  p.chunk_elems = std::max<uint64_t>(cb / elem, 1);
  p.nchunks = count ? static_cast<size_t>((count + p.chunk_elems - 1) / p.chunk_elems) : 0;
  if (p.nchunks > kMaxChunks) {
    p.chunk_elems = (count + kMaxChunks - 1) / kMaxChunks;
    p.nchunks = static_cast<size_t>((count + p.chunk_elems - 1) / p.chunk_elems);
  }
  p.chunk_bytes = p.chunk_elems * elem;
  int n = static_cast<int>(in.parts.size());
  if (in.shape.opcode == proto::Opcode::kBroadcast) {
    p.fixed = broadcast_schedule(n, in.self, in.root_participant, p.nchunks);
  } else if (algo == Algo::kTree) {
    p.fixed.algo = Algo::kTree;
    p.by_root.resize(static_cast<size_t>(std::max(n, 1)));
  } else {
    p.fixed = build_schedule(algo, in.parts, in.self, p.nchunks);
  }
  p.algo = p.fixed.algo;
  if (algo == Algo::kTree && in.shape.opcode != proto::Opcode::kBroadcast) {
    // Every root gives the tree the same number of slots: the widest node.
    p.slots = std::min(kTreeFanout, std::max(n - 1, 0));
  } else {
    p.slots = p.fixed.slots;
  }
  // hier: a chunk's intra-rack stages run at the speed of the rack's links,
  // its inter-rack stage at the uplink's. Unchecked, the fast stages run
  // ahead over the whole tensor and take the cores from the uplink's
  // traffic at the start of every op; one chunk per phase plus one keeps
  // every stage busy (docs/algorithms.md, "Window").
  p.window = p.algo == Algo::kHier && !p.fixed.chunks.empty() ? p.fixed.chunks[0].size() + 1
                                                               : p.nchunks;
  p.eager = (p.algo == Algo::kDirect || p.algo == Algo::kTree || p.algo == Algo::kDoubling) &&
            in.shape.opcode == proto::Opcode::kAllreduce && p.nchunks == 1 &&
            bytes + sizeof(cluster::OpReady) <= transport::kMaxControl;
  return plan;
}

bool plan_fits(const Plan& plan, const PlanInputs& in) {
  if (plan.self != in.self || plan.root_participant != in.root_participant ||
      plan.parts.size() != in.parts.size() || !(plan.shape == in.shape))
    return false;
  for (size_t i = 0; i < in.parts.size(); i++)
    if (plan.parts[i].host != in.parts[i].host || plan.parts[i].rack != in.parts[i].rack)
      return false;
  return true;
}

const Schedule& Plan::schedule(uint64_t key, uint64_t step) {
  if (fixed.algo != Algo::kTree || shape.opcode == proto::Opcode::kBroadcast) return fixed;
  int n = static_cast<int>(parts.size());
  int root = tree_root(n, key, step);
  auto& s = by_root[static_cast<size_t>(root)];
  if (!s) s = std::make_unique<Schedule>(build_schedule(Algo::kTree, parts, self, nchunks, root));
  return *s;
}

uint64_t Plan::chunk_len(size_t c) const {
  uint64_t off = c * chunk_bytes, bytes = shape.bytes();
  return off >= bytes ? 0 : std::min(chunk_bytes, bytes - off);
}

std::string Plan::describe() const {
  return fmt::format("{}{}, {} chunk{} of {} bytes", algo_name(algo), eager ? " (eager)" : "",
                     nchunks, nchunks == 1 ? "" : "s", chunk_bytes);
}

}  // namespace gsync::collective
