// SPDX-License-Identifier: Apache-2.0
//
// The parameter server of one daemon (docs/parameter-server.md): every
// host of a parameter-server job serves a shard of each declared tensor
// (shards.h, param_server.h) and works for its own ranks, whose pushes and pulls
// go to every shard's host and come back. The op pipeline drives it: a
// declaration's stage (after the broadcast of rank 0's initial values)
// calls declare(); a push, pull or push_pull's stage (after the fold of the
// host's ranks) calls begin(), and the store puts what came back into the
// ranks' buffers.
//
// Per (job, key) each host registers, once, a push region (a slot per
// worker host for its shard, as a server) and a reply region (the whole
// tensor, as a worker), and tells the job's other hosts (PsRegions,
// messages.h); a declaration is complete on a host once every host's
// regions are known. A worker's push is a PsPush message and a one-sided
// write of its data into its slot at the server; a server answers a pull
// by writing its shard's values into the worker's reply region, and a push
// without a pull by a PsAck once the push is applied. One op per key is on
// the wire from a host at a time: the next waits for the previous answer.
//
// The engine and this service share the transport: writes and cookies with
// kPsWriteBit (ps/messages.h) set are this service's. Event thread only.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <set>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "daemon/cluster/control_plane.h"
#include "daemon/core/guard_book.h"
#include "daemon/core/status.h"
#include "daemon/ps/mapping.h"
#include "daemon/ps/messages.h"
#include "daemon/ps/param_server.h"
#include "daemon/ps/shards.h"
#include "daemon/storage/checkpoint_files.h"
#include "daemon/storage/checkpoint_writer.h"
#include "protocol/guard.h"
#include "protocol/ops.h"
#include "protocol/ps.h"

namespace gsync::ps {

struct Declaration {
  std::string job;
  uint64_t key = 0, count = 0;
  proto::DType dtype = proto::DType::kF32;
  proto::PsOptions opts;
  proto::Sync sync;
  std::vector<int> hosts;         // the job's hosts, cluster indices in cluster order
  const uint8_t* init = nullptr;  // the whole tensor's initial values, dtype
  proto::Guard guard;             // the job's anomaly guard (bsp keys use it)
};

struct Request {
  std::string job;
  uint64_t key = 0, clock = 0, count = 0;
  proto::Opcode opcode = proto::Opcode::kPushPull;  // kPush, kPull or kPushPull
  proto::DType dtype = proto::DType::kF32;
  double weight = 0;  // the host's ranks' weights summed
  float lr = 0;       // 0: the declared one
  uint8_t* data = nullptr;  // the host's tensor: the gradient in, the parameters out
  // Keeps data's mapping alive while it is registered for the servers'
  // replies (it stays registered while the key's ops use the same tensor).
  std::shared_ptr<const void> owner;
  uint32_t token = 0;       // never 0; unique among this host's ops in flight (31 bits)
};

using Done = std::function<void(const Status&)>;

// Where this daemon keeps checkpoints (docs/fault-tolerance.md).
struct CheckpointConfig {
  std::string dir;  // "": none on this daemon (a key that asks for them is told so)
  int keep = 3;     // per shard, the newest
};

// gsyncctl jobs, per declared key: its checkpoints.
struct CheckpointReport {
  bool on = false;
  uint32_t every_clocks = 0, every_ms = 0;
  std::string folder;
  uint64_t taken = 0, failed = 0, skipped = 0;
  bool writing = false;
  bool have_last = false;
  uint64_t last_clock = 0, last_bytes = 0;
  double last_age_s = 0, last_duration_s = 0, last_copy_s = 0;
  double longest_stall_s = 0;  // the most one snapshot took from the event thread (its copies)
  std::string last_error;
  uint64_t resumed_from = 0;
};

// gsyncctl jobs, per declared key.
struct KeyReport {
  uint64_t key = 0, count = 0;
  std::string dtype, optimizer, sync;
  uint64_t shard_begin = 0, shard_end = 0;  // this host's
  uint64_t updates = 0;                     // pushes applied here
  std::vector<std::pair<std::string, uint64_t>> worker_clocks;  // host -> next clock
  std::vector<std::pair<std::string, uint64_t>> shard_bytes;    // host -> bytes it serves
  uint64_t pulls_waiting = 0;
  std::vector<std::pair<std::string, double>> pull_wait_s;  // host -> its pulls' wait here
  double updates_per_s = 0;  // over the last 10 s or so
  CheckpointReport checkpoint;
  // The anomaly guard: clocks whose update was rolled back, the last
  // verdict's text, and how long its rollback took.
  uint64_t anomalies = 0;
  std::string last_anomaly;
  double last_rollback_s = 0;
};

class Service final : public cluster::CrossHostService {
 public:
  // cp null: a daemon without a cluster; its jobs' one host is 0. writer
  // null: no checkpoints.
  explicit Service(cluster::ControlPlane* cp, CheckpointConfig ckpt = {},
                   storage::CheckpointWriter* writer = nullptr);
  ~Service() override;
  Service(const Service&) = delete;
  // What it owns in the control plane (added from gsyncd.cc): its
  // messages, and the writes whose immediate has kPsWriteBit.
  static cluster::ServiceClaim claim();
  Service& operator=(const Service&) = delete;

  // The key's shard and regions on this host; done runs once every host of
  // the job has declared it alike (or with the error that says how not).
  void declare(const Declaration& d, Done done);
  // A push, pull or push_pull of this host; done runs exactly once, when
  // r.data holds the parameters (pull) or the push was applied (push), and
  // no write from r.data is in flight.
  void begin(const Request& r, Done done);
  // Fails the op; done follows once no write from its data is in flight.
  void abort(uint32_t token, const Status& why);
  std::string waiting_for(uint32_t token) const;
  void job_closed(const std::string& job);
  std::vector<KeyReport> report(const std::string& job) const;

  // Checkpoints (checkpoints.cc). The clock a declared key resumed from (0:
  // a fresh start).
  uint64_t resumed_clock(const std::string& job, uint64_t key) const;
  // gsyncctl checkpoint JOB: every key of the job that keeps checkpoints
  // takes one at the next clock all its shards reach; the error says why
  // none can (no such job here, no key with checkpoints).
  Status request_checkpoint(const std::string& job);
  // The writer's results (its done_fd is readable).
  void on_checkpoints_written(std::vector<storage::WriteResult> results);

  // --- cluster::CrossHostService
  void on_message(int peer, std::string_view msg) override;
  void on_write(int peer, uint32_t region, uint64_t offset, uint64_t len, uint64_t imm) override;
  void on_write_done(int peer, uint64_t cookie, const Status& st) override;
  void on_peer_lost(int peer, const Status& why) override;
  void on_peer_left_job(std::string_view job, int peer, const std::vector<proto::OpId>& open,
                        const Status& why) override;
  std::vector<proto::OpId> open_ops(std::string_view job) const override;

 private:
  struct Key;
  struct WorkerOp;
  struct Served;  // a worker's request at a server
  struct Norm;    // a shard's sum of squares of a clock (the anomaly guard)

  // Declarations (service.cc).
  Key* find(std::string_view job, uint64_t key) const;
  Status make_key(const Declaration& d, std::unique_ptr<Key>* out);
  void on_regions(int peer, const PsRegions& m);
  Status check_regions(const Key& k, int peer, const PsRegions& m) const;
  void maybe_declared(Key& k);
  void drop(Key& k, const Status& why);
  void maybe_free(Key& k);
  int self() const;
  const std::string& host_id(int host) const;

  // A worker's ops (worker_side.cc).
  void start(Key& k, std::unique_ptr<WorkerOp> op);
  void finish(WorkerOp& op, const Status& st);
  void check_done(WorkerOp& op);
  bool pushed_enough(const WorkerOp& op, int w) const;
  void on_reply(Key& k, int participant, uint64_t imm, uint64_t offset, uint64_t len);
  void on_ack(int peer, const PsAck& m);
  void use_tensor(Key& k, const Request& r);
  void release_tensor(Key& k);

  // Checkpoints and recovery (checkpoints.cc).
  void setup_checkpoints(Key& k);
  void maybe_checkpoint(Key& k);
  void take_checkpoint(Key& k, uint64_t clock);
  void ask_checkpoint(Key& k, uint64_t at);
  void on_checkpoint_request(int peer, const PsCheckpoint& m);
  // Once every host's clocks are known: the newest all hold, loaded. Not
  // ok: this host's copy would not load.
  Status resume(Key& k);
  CheckpointReport checkpoint_report(const Key& k) const;
  // Checkpoint sets (checkpoint_sets.cc).
  storage::CheckpointSet set_now(const Key& k) const;
  bool file_whole(const Key& k, const storage::ListedFile& f, uint64_t clock);
  std::vector<uint64_t> whole_clocks(Key& k, const std::vector<uint64_t>& valid,
                                     const std::vector<storage::CheckpointHeader>& headers);
  void note_set(const std::string& job, int host, uint64_t clock);
  void on_checkpoint_written(Key& k, uint64_t clock);
  uint64_t keep_from(const Key& k) const;

  // The anomaly guard (guard.cc).
  void on_clock_applied(Key& k);
  std::vector<Norm>& norms_of(Key& k, uint64_t clock);

  void on_norm(int peer, const PsNorm& m);
  void try_verdict(Key& k);

  // A server's side (server_side.cc).
  void on_push(int peer, const PsPush& m);
  void on_push_data(Key& k, int w, uint64_t offset, uint64_t len, uint64_t imm);
  Status serve(Key& k, int w);
  void advance(Key& k);
  void answer_ready(Key& k);
  void reply(Key& k, int w, uint64_t upto);
  void send_ack(Key& k, int w, uint32_t token, uint64_t clock, const Status& st);

  cluster::ControlPlane* cp_;
  CheckpointConfig ckpt_cfg_;
  storage::CheckpointWriter* writer_;
  std::map<std::pair<std::string, uint64_t>, std::unique_ptr<Key>> keys_;
  GuardBook guards_;  // the anomaly guard's norms, per job and key
  std::unordered_map<uint32_t, Key*> by_region_;
  std::unordered_map<uint32_t, Key*> by_id_;  // live and retiring keys, for write cookies
  std::map<Key*, std::unique_ptr<Key>> retiring_;  // dropped, memory still in use
  uint32_t next_key_id_ = 1;
  std::unordered_map<uint32_t, WorkerOp*> ops_;  // by token
  // Per job and host (cluster index): the checkpoint sets whole there.
  std::map<std::string, std::map<int, std::set<uint64_t>>> sets_;
  // Files of other keys checked for a set, while they stay the same file.
  struct FileSig {
    uint64_t ino = 0, size = 0, sec = 0, nsec = 0;
    bool operator==(const FileSig&) const = default;
  };
  struct FileCheck {
    FileSig sig;
    bool whole = false;
    uint64_t count = 0;  // the tensor's elements, as its header says
  };
  std::map<std::string, FileCheck> file_checks_;
};

}  // namespace gsync::ps
