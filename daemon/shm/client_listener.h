// SPDX-License-Identifier: Apache-2.0
//
// The client socket: accepts training processes, reads their hello, checks
// who they are (SO_PEERCRED against [auth]) and what they ask for, creates
// their session (the sealed memfd with rings and arena, its doorbells) and
// hands the fds back; then watches each session's doorbell and socket, and
// feeds its submissions, copied out of shared memory, to the layer above.
// A client's death (even SIGKILL) reaches us as its socket's hangup.
// Decisions about jobs are not made here: the ClientSink (the jobs layer)
// says whether a client may join and takes its submissions.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "daemon/config/config.h"
#include "daemon/core/event_loop.h"
#include "daemon/core/status.h"
#include "daemon/shm/handshake.h"
#include "daemon/shm/session.h"
#include "protocol/device.h"

namespace gsync {

class Worker;

class ClientSink {
 public:
  virtual ~ClientSink() = default;
  // May a client with this identity join? Changes nothing.
  virtual Status check_join(const JoinRequest& req) = 0;
  // A session (identity set) is open; it takes its place in its job.
  virtual void attach(const std::shared_ptr<Session>& s) = 0;
  // The client is gone (closed, killed, or cut off for a protocol violation).
  virtual void detach(const std::shared_ptr<Session>& s, const std::string& reason) = 0;
  virtual void submit(const std::shared_ptr<Session>& s, const proto::SubmitEntry& e) = 0;
};

class ClientListener {
 public:
  // gpu_worker: where clients' device memory is imported and unmapped
  // (outlives every session and op; null: on the event thread).
  ClientListener(const DaemonConfig& cfg, EventLoop& loop, ClientSink& sink,
                 Worker* gpu_worker = nullptr);
  ~ClientListener();
  ClientListener(const ClientListener&) = delete;
  ClientListener& operator=(const ClientListener&) = delete;

  // Listens on [daemon] socket; with polling on, also reads the
  // submission rings while the loop polls (docs/protocol.md, "Doorbells").
  Status start();
  // Every tick: clients that sent no hello in time are dropped.
  void tick(std::chrono::steady_clock::time_point now);
  // Closes a session (the sink's detach runs); deferred-safe.
  void close_session(const std::shared_ptr<Session>& s, const std::string& reason);

  const std::map<uint64_t, std::shared_ptr<Session>>& sessions() const { return sessions_; }
  // gsyncctl clients (client_report.cc).
  nlohmann::json clients_report() const;

 private:
  void accept_clients();
  void on_hello(int fd);
  void open_session(int fd, const Peer& peer, const proto::HelloRequest& hello);
  void watch(const std::shared_ptr<Session>& s);
  // The session's socket is readable: device memory requests, or hangup.
  void on_socket(const std::shared_ptr<Session>& s, uint32_t ev);
  // Sends a device memory request's reply; reading the socket resumes.
  void answer(const std::shared_ptr<Session>& s, const proto::DeviceReply& reply);
  void on_doorbell(const std::shared_ptr<Session>& s);
  void take_submissions(const std::shared_ptr<Session>& s);
  bool take_all_submissions();
  bool allowed(const Peer& peer) const;
  void reap_stale_holder(const JoinRequest& join);
  void refuse(int fd, const Peer& peer, const Status& st);

  const DaemonConfig& cfg_;
  EventLoop& loop_;
  ClientSink& sink_;
  Worker* gpu_worker_;
  int listen_fd_ = -1;
  uint64_t next_session_ = 1;
  std::map<uint64_t, std::shared_ptr<Session>> sessions_;
  std::map<int, std::chrono::steady_clock::time_point> handshakes_;  // fd -> deadline
};

}  // namespace gsync
