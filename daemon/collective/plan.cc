// SPDX-License-Identifier: Apache-2.0
#include "daemon/collective/plan.h"

#include <algorithm>

#include <fmt/format.h>

#include "daemon/collective/compress_schedule.h"
#include "daemon/collective/messages.h"
#include "daemon/transport/transport.h"
#include "protocol/compression.h"

namespace gsync::collective {

namespace {
// The chunk's bits in a write's immediate (engine_op.h, imm_of).
constexpr size_t kMaxChunks = 1 << 22;

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

reduce::CodecParams codec_params(const proto::Compression& c) {
  reduce::CodecParams k;
  k.codec = c.codec;
  if (c.codec == proto::Codec::kInt8) k.block = c.block;
  if (c.codec == proto::Codec::kTopk) k.topk_fraction = c.topk_fraction;
  return k;
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
  // Compression rewrites the schedule (compress_schedule.h) of ops that
  // move by rendezvous; small ops that go eagerly cost one message either
  // way and go as they are (docs/compression.md, "The engine").
  bool fits_eager = (algo == Algo::kDirect || algo == Algo::kTree || algo == Algo::kDoubling) &&
                    in.shape.opcode == proto::Opcode::kAllreduce && p.nchunks == 1 &&
                    bytes + sizeof(OpReady) <= transport::kMaxControl;
  if (in.shape.compress.on() && !fits_eager && in.shape.opcode == proto::Opcode::kAllreduce &&
      p.nchunks > 0) {
    // Every host of the op lays its scratch out alike, whether or not its
    // own schedule packs a phase (a hier host that never crosses the
    // racks sends raw to peers that do): peers compute where to write
    // from the layout, not from what this host does with it.
    p.codec = codec_params(in.shape.compress);
    p.packed = true;
    if (algo != Algo::kTree)
      compress_schedule(in.parts, p.codec.codec, in.shape.compress.hops, &p.fixed);
  }
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
  p.eager = fits_eager;
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
  if (!s) {
    s = std::make_unique<Schedule>(build_schedule(Algo::kTree, parts, self, nchunks, root));
    if (shape.compress.on() && !eager) compress_schedule(parts, shape.compress.codec,
                                                         shape.compress.hops, s.get());
  }
  return *s;
}

uint64_t Plan::chunk_count(size_t c) const {
  uint64_t first = c * chunk_elems;
  return first >= shape.count ? 0 : std::min(chunk_elems, shape.count - first);
}

uint64_t Plan::land_offset(Xfer kind, uint8_t slot, size_t c, uint64_t slot_bytes) const {
  if (!packed) return kind == Xfer::kCopy ? c * chunk_bytes : slot * slot_bytes + c * chunk_bytes;
  uint64_t at = c * chunk_stride();
  switch (kind) {
    case Xfer::kCopy: return at;
    case Xfer::kReduce: return (uint64_t{slot} + 1) * slot_bytes + at;
    case Xfer::kMaxima: return (uint64_t{slot} + 1) * slot_bytes + at + land_stride;
  }
  return 0;
}

void Plan::ensure_residuals(int n) {
  if (n <= residual_buffers) return;
  residuals.resize(static_cast<size_t>(n) * shape.count, 0.0f);
  residual_buffers = n;
}

uint64_t Plan::chunk_len(size_t c) const {
  uint64_t off = c * chunk_bytes, bytes = shape.bytes();
  return off >= bytes ? 0 : std::min(chunk_bytes, bytes - off);
}

// What was done, not what was configured: a tensor smaller than the chunk
// size goes as one chunk of its own size, and an op without data (a
// barrier) moves none.
std::string Plan::describe() const {
  const std::string algo_text = fmt::format("{}{}", algo_name(algo), eager ? " (eager)" : "");
  if (nchunks == 0 || shape.bytes() == 0) return algo_text + ", no data";
  const uint64_t first = chunk_len(0), last = chunk_len(nchunks - 1);
  return fmt::format("{}, {} chunk{} of {} bytes{}{}", algo_text, nchunks, nchunks == 1 ? "" : "s",
                     first, last != first ? fmt::format(" (the last {})", last) : "",
                     packed ? ", " + proto::describe(shape.compress) : "");
}

}  // namespace gsync::collective
