// SPDX-License-Identifier: Apache-2.0
//
// The admin socket gsyncctl talks to: a client writes one command line
// ("status\n"), gets one JSON document, and the daemon closes. Connections
// are non-blocking and bounded, so a stuck admin client cannot stall the
// event loop that serves the jobs. What each command answers is not known
// here: every layer registers the report it owns (the jobs layer "jobs",
// the client listener "clients", the control plane "peers", the daemon
// "status"), so this folder depends on none of them.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <unordered_map>

#include "daemon/core/event_loop.h"
#include "daemon/core/status.h"

namespace gsync {

class AdminServer {
 public:
  // The reply document of a command (JSON text).
  using Report = std::function<std::string()>;

  explicit AdminServer(EventLoop& loop) : loop_(loop) {}
  ~AdminServer();
  Status listen(const std::string& path, unsigned mode);
  void add(const std::string& command, Report report) { reports_[command] = std::move(report); }
  // The reply to one command line; unknown commands get {"error": "..."}.
  std::string reply(const std::string& command) const;

 private:
  struct Conn {
    std::string in, out;
    size_t sent = 0;
  };
  void accept_all();
  void on_event(int fd, uint32_t events);
  void drop(int fd);

  EventLoop& loop_;
  std::map<std::string, Report> reports_;
  int listen_fd_ = -1;
  std::string path_;
  std::unordered_map<int, Conn> conns_;
};

}  // namespace gsync
