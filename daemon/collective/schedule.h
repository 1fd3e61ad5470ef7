// SPDX-License-Identifier: Apache-2.0
//
// Cross-host allreduce algorithms as per-chunk schedules. The tensor is cut
// into chunks; for every chunk this host runs a short list of phases, each a
// set of writes to peers and of writes it expects from peers. A phase ends
// when its writes are sent and its expected writes have landed; then the
// contributions that arrived for reduction are folded, in a fixed order, into
// this host's copy of the chunk, and the next phase starts. Different chunks
// run independently, so chunk c can be in the allgather while chunk c+1 is
// still in the reduce-scatter: that is the pipeline. docs/algorithms.md gives
// the steps and bytes on the wire of each algorithm.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gsync::collective {

enum class Algo : uint8_t { kRing = 1, kHier = 2, kDirect = 3, kTree = 4, kDoubling = 5 };
const char* algo_name(Algo a);
bool parse_algo(const std::string& name, Algo* out);  // "ring" "hier" "direct" "tree" "doubling"
// A byte off the wire (OpReady::algo); false when it names no algorithm.
bool algo_from_wire(uint8_t v, Algo* out);

// kReduce lands in one of the receiver's scratch slots and is folded there;
// kCopy lands in the receiver's data (a final value), or, compressed, in its
// copy slot to be decoded there; kMaxima carries a chunk's per-block maxima
// before an int8 exchange (compress_schedule.h).
enum class Xfer : uint8_t { kReduce = 0, kCopy = 1, kMaxima = 2 };

// What a transfer carries, in words, for errors that name it.
inline const char* xfer_name(Xfer k) {
  switch (k) {
    case Xfer::kReduce: return "partial sum";
    case Xfer::kCopy: return "final sum";
    case Xfer::kMaxima: return "block maxima";
  }
  return "unknown transfer";
}

struct Transfer {
  int peer;  // participant index
  Xfer kind;
  uint8_t slot;  // the receiver's scratch slot (kReduce)
};

// How a compressed phase makes the bytes it sends (compress_schedule.h).
enum class SendMode : uint8_t {
  kRaw = 0,      // the data as it is: not compressed
  kEncode = 1,   // a lossy encoding of data + residual, with error feedback
  kForward = 2,  // the encoded final value this host received, as it came
  kExact = 3,    // top-k: the merged sparse sum, without loss (SparCML)
  kMaxima = 4,   // the per-block maxima of data + residual (int8's shared scale)
};

struct Phase {
  std::vector<Transfer> sends;
  std::vector<Transfer> recvs;
  // When recvs include kReduce: the fold order, as participant indices; this
  // host's own data stands at its own index, the others come from the slot
  // their transfer named. The same order on every host that computes the same
  // sum, so all of them get the same bits.
  std::vector<int> fold;
  // When this phase waits, on a clock shared by all hosts of the op: every
  // host it receives from waited only in earlier steps before sending (a
  // doubling: one step per round; a tree: up by height, then down by
  // depth). A host waiting in step s times out s grace periods late, so
  // the one that waits for a missing host directly speaks first.
  int step = 0;

  // Compression (compress_schedule.h); all false/-1 on a plain schedule.
  bool packed = false;  // this phase's sends and receives carry encodings
  SendMode send = SendMode::kRaw;
  int8_t residual = -1;     // kEncode, kMaxima and select: the error buffer (-1: none)
  bool write_back = false;  // kEncode: data takes the decoded encoding
  bool symmetric = false;   // every host of the phase folds the same encodings
  bool select = false;      // top-k: select this host's data before the fold
  bool shared_scale = false;  // int8: encode on the maxima the phase before agreed
  // kEncode of a value other hosts hold too (a symmetric phase's sum): every
  // holder encodes it alike, its error buffer `residual` zero before and
  // after; on one holder (the lead) what the encoding dropped goes to error
  // buffer `feedback`, which that host's own contribution is encoded with
  // at the next step. -1 on the other holders: they drop it.
  bool shared = false;
  int8_t feedback = -1;
};

struct Participant {
  int host;          // cluster index
  std::string rack;  // hosts of one rack are contiguous in hierarchical plans
};

struct Schedule {
  Algo algo = Algo::kRing;
  int self = -1;  // participant index of this host
  int slots = 0;  // scratch slots, each as large as the tensor
  std::vector<std::vector<Phase>> chunks;  // phases per chunk
  // Compression (compress_schedule.h): error buffers per chunk, and whether
  // compressed final values land in a copy slot (scratch slot `slots`).
  int residuals = 0;
  bool copy_slot = false;
};

// The tree of kTree: participants renumbered from the root (v = (p - root)
// mod n) form a heap with up to kTreeFanout children per node, so up to
// kTreeFanout + 1 hosts it is a star around the root.
constexpr int kTreeFanout = 8;
struct TreeLinks {
  int parent = -1;            // participant index; -1 at the root
  std::vector<int> children;  // participant indices, in fold order
  int ordinal = -1;           // this node's place among its parent's children
};
TreeLinks tree_links(int n, int root, int self);
// The root of an op's tree: rotated by op so no one daemon does every fold.
int tree_root(int n, uint64_t key, uint64_t step);

// Builds this host's schedule. participants are in cluster order; root
// matters only to kTree.
Schedule build_schedule(Algo algo, const std::vector<Participant>& participants, int self,
                        size_t chunks, int root = 0);

// The algorithm auto picks: for small tensors direct up to 3 hosts and tree
// from 4 (fewer messages: 2(n-1) instead of n(n-1)); hier across several
// racks, ring otherwise.
Algo choose_algo(const std::vector<Participant>& participants, uint64_t bytes);
// Chunk size in bytes for a tensor (a multiple of 4 KiB, or the whole).
uint64_t choose_chunk_bytes(Algo algo, size_t hosts, uint64_t bytes);

}  // namespace gsync::collective
