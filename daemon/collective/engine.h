// SPDX-License-Identifier: Apache-2.0
//
// The schedule engine: runs the cross-host part of ops over the transport.
// For each op it sends the rendezvous (OpReady: the regions peers may write
// into, and the op's shape, so hosts that disagree find out before any data
// moves), waits for every peer's, then drives the plan's per-chunk schedule:
// one-sided writes with immediates, folds of what landed, copies of final
// values, a chunk starting as soon as the local fold has finished it
// (docs/algorithms.md). Small ops go eagerly instead: every transfer is one
// control message carrying the data, no rendezvous (eager.cc); the same
// engine runs both, only how a transfer moves differs.
//
// The engine sees buffers and plans, never clients or jobs: the op pipeline
// (pipeline/cross_stage.h) begins an op with a plan it leased from the plan
// cache and hears back through callbacks. Every op is named by a token (the
// low 31 bits of the pipeline's per-op serial, pipeline/stage.h) that travels in the
// immediates and cookies of its writes, so a completion or a late write of
// one op can never land on another. Event thread only.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "daemon/cluster/control_plane.h"
#include "daemon/cluster/messages.h"
#include "daemon/cluster/services.h"
#include "daemon/collective/messages.h"
#include "daemon/collective/pack.h"
#include "daemon/collective/plan.h"
#include "daemon/collective/scratch_pool.h"
#include "daemon/core/clock.h"
#include "daemon/core/event_loop.h"
#include "daemon/core/host_arrivals.h"
#include "daemon/core/status.h"
#include "daemon/core/wire_log.h"
#include "protocol/ops.h"

namespace gsync::collective {

struct EngineCallbacks {
  // The schedule starts: every peer's rendezvous is here (at once for an
  // eager op) and the local fold has begun to come in.
  std::function<void()> running;
  // Elements [begin, end) hold their final value on this host.
  std::function<void(uint64_t begin, uint64_t end, double weight_total)> chunk_done;
  // Exactly once: the op ended here (st says how) and no peer's write for
  // it can land in its buffers any more.
  std::function<void(const Status& st, double weight_total)> done;
};

struct EngineOp {
  std::string job;
  proto::OpId id;
  uint32_t token = 0;       // never 0; unique among the ops in flight
  std::shared_ptr<Plan> plan;  // prepared; exclusively this op's until done
  uint8_t* data = nullptr;  // the host's contribution, reduced in place
  double weight_local = 0;  // this host's share of the weights
  // Where the op's transfers are recorded (null: ops are not recorded);
  // the caller's, alive until done has run.
  WireLog* wire = nullptr;
  // When this host's part and each peer's were ready, for the straggler
  // report (kept whether or not ops are recorded); the caller's, alive
  // until done has run. Null: not kept.
  HostArrivals* hosts = nullptr;
};

class Engine final : public cluster::CrossHostService {
 public:
  explicit Engine(cluster::ControlPlane& cp);
  ~Engine() override;
  // What it owns in the control plane (added from gsyncd.cc): its
  // messages, and the writes whose immediate has bit 63 clear (the
  // parameter server's have it set).
  static cluster::ServiceClaim claim();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // --- Resources of a plan (the plan cache calls these).
  // Scratch, and the regions peers write into for data at `data`.
  Status prepare(Plan& plan, uint8_t* data, std::shared_ptr<const void> data_owner);
  // Releases them; released runs once no peer can still write into them.
  void retire(Plan& plan, std::function<void()> released);

  // --- Ops (the cross stage calls these). begin() sends the rendezvous;
  // the schedule runs once the local fold has begun to come in
  // (local_ready_upto) and every peer's rendezvous is here.
  void begin(const EngineOp& op, EngineCallbacks cb);
  // [0, elems) of the local fold is in data.
  void local_ready_upto(uint32_t token, uint64_t elems);
  // The op failed here: tell the peers, end it (done runs with why).
  void abort(uint32_t token, const Status& why);
  // An op this host failed before it began it here: tell every peer, since
  // those that began it would otherwise wait out their timeout.
  void abort_unbegun(const std::string& job, const proto::OpId& id, const Status& why);
  // What the op waits for ("hosts whose ranks have not all arrived: h2").
  std::string waiting_for(uint32_t token) const;
  // Extra time past the op's deadline before this host times it out, so
  // that the host that knows who is missing speaks first.
  std::chrono::milliseconds timeout_grace(uint32_t token) const;

  // --- cluster::CrossHostService
  void on_message(int peer, std::string_view msg) override;
  void on_write(int peer, uint32_t region, uint64_t offset, uint64_t len, uint64_t imm) override;
  void on_write_done(int peer, uint64_t cookie, const Status& st) override;
  void on_peer_lost(int peer, const Status& why) override;
  void on_peer_left_job(std::string_view job, int peer, const std::vector<proto::OpId>& open,
                        const Status& why) override;
  std::vector<proto::OpId> open_ops(std::string_view job) const override;
  Payload payload_sent(int peer) const override;

  size_t ops_in_flight() const { return by_token_.size(); }

 private:
  struct XOp;
  struct Chunk;
  struct Arrived;

  Status prepare_packed(Plan& plan);

  // Rendezvous (engine.cc).
  // A message that came at `at` (a rendezvous kept from before the op
  // began here keeps when it came).
  void on_message(int peer, std::string_view msg, Clock::time_point at);
  void on_ready(int peer, const OpReady& m, std::string_view msg, Clock::time_point at);
  void on_abort(int peer, const OpAbort& m, std::string_view msg, Clock::time_point at);
  OpReady op_message(const XOp& x, uint8_t type, double weight) const;
  void send_ready(XOp& x);
  bool joined(const XOp& x, int peer, const std::vector<proto::OpId>& open) const;
  // Messages for an op not begun here yet are held by the control plane
  // (cluster/early_messages.h) under this key, and replayed when it begins.
  cluster::EarlyMessages::Key early_key(std::string_view job, const proto::OpId& id) const;
  void replay_early(XOp& x);
  void complete(XOp& x, const Status& st);
  void fail(XOp& x, const Status& st, bool tell_peers);
  void send_abort(const std::string& job, const proto::OpId& id, const Status& st, int host);
  XOp* find(std::string_view job, const proto::OpId& id) const;
  XOp* find(uint32_t token) const;

  // The schedule (chunks.cc).
  void maybe_run(XOp& x);
  void start_local_chunks(XOp& x, size_t from);
  bool chunk_local_ready(const XOp& x, size_t c) const;
  size_t window_end(const XOp& x) const;
  void progress(XOp& x, size_t c);
  bool phase_done(XOp& x, size_t c);
  bool start_phase(XOp& x, size_t c, const Phase& ph);
  void issue_sends(XOp& x, size_t c, const Phase& ph, const uint8_t* src, uint64_t len);
  void fold(XOp& x, size_t c, const Phase& p);
  void chunk_finished(XOp& x, size_t c);

  // Compressed plans (packed.cc).
  PackView pack_view(XOp& x, size_t c);
  bool end_packed(XOp& x, size_t c, const Phase& ph, const std::vector<Arrived>& in);
  void count_sent(int host, uint64_t wire, uint64_t logical);

  // Eager ops (eager.cc).
  void send_eager(XOp& x, const Phase& p);
  void on_eager_data(XOp& x, int peer, const OpReady& m, std::string_view data,
                     Clock::time_point at);
  bool eager_waits_on(const XOp& x, int participant) const;
  std::string eager_waiting_for(const XOp& x) const;
  std::chrono::milliseconds eager_timeout_grace(const XOp& x) const;

  const std::string& host_id(int host) const { return cp_.host_id(host); }

  cluster::ControlPlane& cp_;
  transport::Context& net_;
  ScratchPool scratch_;

  // Ops by (job, id), found by a string_view of the job (no copy of the
  // name per message), and by token.
  using OpKey = std::pair<std::string, proto::OpId>;
  using OpKeyView = std::pair<std::string_view, proto::OpId>;
  struct OpKeyLess {
    using is_transparent = void;
    template <typename A, typename B>
    bool operator()(const A& a, const B& b) const {
      int c = std::string_view(a.first).compare(std::string_view(b.first));
      return c != 0 ? c < 0 : a.second < b.second;
    }
  };
  std::map<OpKey, std::shared_ptr<XOp>, OpKeyLess> ops_;
  std::unordered_map<uint32_t, XOp*> by_token_;
  std::vector<Payload> sent_;  // by cluster index
};

}  // namespace gsync::collective
