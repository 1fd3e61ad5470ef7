// SPDX-License-Identifier: Apache-2.0
//
// The admin socket gsyncctl talks to: a client writes one command line
// ("status\n"), gets one JSON document, and the daemon closes. Connections
// are non-blocking and bounded, so a stuck admin client cannot stall the
// event loop that serves the jobs. What each command answers is not known
// here: every layer registers the report it owns (the jobs layer "jobs",
// the client listener "clients", the control plane "peers", the daemon
// "status"), so this folder depends on none of them.
//
// The socket is created with [daemon] admin_socket_mode (0660) and handed
// to [daemon] admin_group (gsync) when that group exists: only root, the
// daemon's user and that group may connect. A request that is malformed
// (too long, not UTF-8, control characters) or names no command gets a
// JSON {"error": ...} and one log line naming the sender's pid and uid
// (SO_PEERCRED). docs/operations.md, "The admin protocol".
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>

#include "daemon/core/event_loop.h"
#include "daemon/core/status.h"

namespace gsync {

struct AdminSocketOptions {
  std::string path;
  unsigned mode = 0660;
  std::string group;  // "": keep the daemon's own group
};

class AdminServer {
 public:
  // The reply document of a command (JSON text).
  using Report = std::function<std::string()>;

  explicit AdminServer(EventLoop& loop) : loop_(loop) {}
  ~AdminServer();
  AdminServer(const AdminServer&) = delete;
  AdminServer& operator=(const AdminServer&) = delete;
  Status listen(const AdminSocketOptions& options);
  void add(const std::string& command, Report report) { reports_[command] = std::move(report); }
  // "command ARG": ARG is the rest of the line after one space (printable,
  // checked like every request), handed to the report as it is.
  using ArgReport = std::function<std::string(const std::string& arg)>;
  void add_with_argument(const std::string& command, ArgReport report) {
    arg_reports_[command] = std::move(report);
  }
  // A command whose answer waits on something else (peers: `probe`): the
  // handler gets the command's argument ("" when none) and a Reply to call
  // once, now or later, on the event thread, with the JSON text. Nothing
  // waits meanwhile; a client that goes away first is dropped, and its
  // Reply then does nothing.
  using Reply = std::function<void(const std::string& doc)>;
  using AsyncReport = std::function<void(const std::string& arg, Reply reply)>;
  void add_async(const std::string& command, AsyncReport report) {
    async_reports_[command] = std::move(report);
  }
  // The reply to one command; unknown commands get {"error": "..."}.
  std::string reply(const std::string& command) const;
  // The reply to what a connection sent so far (closed: it sends no more);
  // empty while a whole request has not come yet. *refused says why the
  // request was refused, empty when it was answered.
  std::string respond(std::string_view in, bool closed, std::string* refused) const;

 private:
  struct Conn {
    std::string in, out;
    size_t sent = 0;
    uint64_t serial = 0;   // tells a reused fd's connections apart
    bool waiting = false;  // an async command's reply is due
  };
  static bool group_of(const std::string& path, const std::string& group, gid_t* gid);
  Status set_group(const std::string& group, gid_t gid) const;
  void accept_all();
  void on_event(int fd, uint32_t events);
  bool read_request(int fd, Conn& c, uint32_t events);
  // Starts c's command if it is an async one; false if it is not.
  bool start_async(int fd, Conn& c, bool closed);
  void deliver(int fd, uint64_t serial, const std::string& doc);
  void log_refusal(int fd, const std::string& why) const;
  void drop(int fd);

  EventLoop& loop_;
  std::map<std::string, Report> reports_;
  std::map<std::string, ArgReport> arg_reports_;
  std::map<std::string, AsyncReport> async_reports_;
  uint64_t next_serial_ = 1;
  // Replies still out hold a weak reference: after the server is gone,
  // they do nothing.
  std::shared_ptr<AdminServer*> self_ = std::make_shared<AdminServer*>(this);
  int listen_fd_ = -1;
  std::string path_;
  std::unordered_map<int, Conn> conns_;
  std::chrono::steady_clock::time_point last_full_log_{};
};

}  // namespace gsync
