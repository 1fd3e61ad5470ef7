// SPDX-License-Identifier: Apache-2.0
//
// The cross-host step of a job that spans hosts. It keeps the cluster's
// view of each job (which host has which ranks, from the daemons'
// announcements), runs the per-op rendezvous (each host tells the others
// where they may write), drives the chunk schedules of daemon/collective/
// schedule.h over the transport, and reports lost peers. Runs on the event
// thread: transport handlers are called from its poll(), which the event
// loop calls when the transport's fd is readable.
//
// The op's data is the host's contribution: the local fold of all local
// ranks, written into local rank 0's arena tensor. The cross-host step
// reduces it in place with every other host's; the store into the other
// local ranks follows (job_manager.cc).
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "daemon/cluster/cluster_file.h"
#include "daemon/cluster/membership.h"
#include "daemon/cluster/messages.h"
#include "daemon/collective/schedule.h"
#include "daemon/config/config.h"
#include "daemon/core/event_loop.h"
#include "daemon/core/meter.h"
#include "daemon/jobs/job.h"
#include "daemon/transport/transport.h"

namespace gsync {

class CrossHost {
 public:
  // weight_sum: the sum of every rank's weight on every host (weighted avg).
  using Done = std::function<void(const Status&, double weight_sum)>;
  // A chunk of a pipelined op holds its final value: elements [begin, end).
  using ChunkDone = std::function<void(uint64_t begin, uint64_t end, double weight_sum)>;

  CrossHost(const DaemonConfig& cfg, ClusterFile cluster, EventLoop& loop);
  ~CrossHost();
  Status start();

  const ClusterFile& cluster() const { return cluster_; }
  const std::string& self_id() const { return cluster_.hosts[size_t(cluster_.self)].id; }
  uint64_t epoch() const { return epoch_; }
  std::string transport_summary() const { return net_ ? net_->summary() : "tcp"; }

  // --- Jobs: the cluster-wide rank map.
  // All local slots of the job are connected: tell every peer.
  void local_job_complete(const Job& job);
  // A local rank left (died or closed): tell every peer.
  void local_rank_left(const Job& job, int rank, pid_t pid, const std::string& reason);
  // True when every rank of the world is accounted for by some host.
  bool job_ready(const Job& job) const;
  // For timeout messages: which ranks no host has announced.
  std::string job_missing(const Job& job) const;
  // Called when a job becomes ready (start its queued ops) and when a remote
  // rank of a job left or its host was lost (fail its pending ops).
  std::function<void(const std::string& job)> on_job_ready;
  std::function<void(const std::string& job, const Status& why)> on_job_broken;

  // --- Ops. begin() right after all local ranks arrived (data not folded
  // yet); local_ready() once the fold is in op.arrivals[0].data; done runs
  // exactly once unless abort() came first.
  void begin(const Job& job, Op& op, double weight_sum, Done done);
  // For an op with pipeline_elems(): called as each chunk ends, before done.
  void on_chunk_done(const std::string& job, const OpId& id, ChunkDone f);
  void local_ready(const std::string& job, const OpId& id);
  // Large ops: the fold is pipelined with this step. pipeline_elems() is the
  // chunk length to report by (0: report nothing, wait for local_ready);
  // local_ready_upto() says [0, elems) of the fold is in, and the chunks
  // inside it start.
  size_t pipeline_elems(const std::string& job, const OpId& id) const;
  void local_ready_upto(const std::string& job, const OpId& id, uint64_t elems);
  // The op failed here (timeout): tell the peers and end it; done runs with
  // why once no peer write can still land in the op's buffer.
  void abort(const std::string& job, const OpId& id, const Status& why);
  // An op this host failed before its cross-host step (a remote rank had
  // left): only told to the peers, since those that began it would
  // otherwise wait out their timeout for this host's part.
  void abort_unbegun(const std::string& job, const OpId& id, const Status& why);
  // What the op waits for ("hosts not ready: h21, h22").
  std::string waiting_for(const std::string& job, const OpId& id) const;
  // Extra time past the op's deadline before this host times the op out
  // (so that the host that knows who is missing speaks first).
  std::chrono::milliseconds timeout_grace(const std::string& job, const OpId& id) const;
  // The algorithm an op ran with (for logs and gsync-perf).
  std::string last_algo() const { return last_algo_; }

  // gsyncctl peers.
  std::string peers_json() const;

 private:
  struct PeerReady {
    bool seen = false;
    cluster::OpReady msg;
  };
  struct Chunk {
    size_t phase = 0;
    bool sent = false, done = false;
    int pending_sends = 0;
    std::vector<uint16_t> arrived;  // (peer << 8 | kind << 7 | slot) of writes that landed
  };
  struct XOp;
  struct Scratch {
    uint8_t* base = nullptr;
    uint64_t bytes = 0;
  };

  // Chunks below this may start their schedule (docs/algorithms.md, "Window").
  size_t window_end(const XOp& x) const;
  void on_control(int peer, std::string_view msg);
  void on_write(int peer, uint32_t region, uint64_t offset, uint64_t len, uint64_t imm);
  void on_write_done(int peer, uint64_t cookie, const Status& st);
  void on_peer_up(int peer);
  void on_peer_down(int peer, const Status& why);

  bool joined(const XOp& op, int peer, const std::vector<cluster::OpKey>& open) const;
  void maybe_run(XOp& op);
  cluster::OpReady op_message(const XOp& op, uint8_t type, double weight) const;
  void send_ready(XOp& op);
  Status shape_mismatch(const XOp& op, const cluster::OpReady& m, const std::string& from) const;
  // Eager ops (cross_host_eager.cc).
  void send_eager(XOp& op, const collective::Phase& p);
  void on_eager_data(XOp& op, int peer, const cluster::OpReady& m, std::string_view data);
  bool eager_waits_on(const XOp& op, int participant) const;
  std::string eager_waiting_for(const XOp& op) const;
  std::chrono::milliseconds eager_timeout_grace(const XOp& op) const;
  void progress(XOp& op, size_t c);
  bool chunk_local_ready(const XOp& op, size_t c) const;
  void start_local_chunks(XOp& op, size_t from);
  void issue_sends(XOp& op, size_t c);
  void fold(XOp& op, size_t c, const collective::Phase& p);
  void sample_rates();
  void expire_early();
  void complete(XOp& op, const Status& st);
  void fail(XOp& op, const Status& st, bool tell_peers);
  void send_abort(const std::string& job, const OpId& id, const Status& st, int host);
  XOp* find(std::string_view job, const OpId& id) const;
  std::shared_ptr<XOp> hold(XOp& x) const;
  Scratch take_scratch(uint64_t bytes);
  void give_scratch(Scratch s);
  void send_all(std::string_view msg);

  const DaemonConfig& cfg_;
  ClusterFile cluster_;
  EventLoop& loop_;
  std::unique_ptr<transport::Context> net_;
  uint64_t epoch_ = 1;
  uint32_t next_token_ = 1;

  cluster::Membership members_;
  // Ops by (job, id), found by a string_view of the job: the lookups of
  // every message and completion copy no job name (longer ones than 15
  // characters would cost an allocation each).
  using OpKey = std::pair<std::string, OpId>;
  using OpKeyView = std::pair<std::string_view, OpId>;
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
  // Rendezvous and aborts that came before the local op began.
  struct Early {
    std::map<int, std::string> ready;  // whole messages (eager ones carry data)
    std::unique_ptr<Status> abort;
    Clock::time_point expires;
  };
  std::map<OpKey, Early, OpKeyLess> early_;
  std::vector<Scratch> free_scratch_;
  std::vector<RateMeter> sent_meter_, recv_meter_;
  std::vector<uint64_t> last_sent_, last_recv_;
  std::string last_algo_;
};

}  // namespace gsync
