// SPDX-License-Identifier: Apache-2.0
//
// The admin socket gsyncctl talks to: a client writes one command line
// ("status\n"), gets one JSON document, and the daemon closes. Connections
// are non-blocking and bounded, so a stuck admin client cannot stall the
// event loop that serves the jobs.
#pragma once

#include <functional>
#include <string>
#include <unordered_map>

#include "daemon/core/event_loop.h"
#include "daemon/core/status.h"

namespace gsync {

class AdminServer {
 public:
  // Returns the reply document for a command (JSON text).
  using Handler = std::function<std::string(const std::string& command)>;

  AdminServer(EventLoop& loop, Handler handler) : loop_(loop), handler_(std::move(handler)) {}
  ~AdminServer();
  Status listen(const std::string& path, unsigned mode);

 private:
  struct Conn {
    std::string in, out;
    size_t sent = 0;
  };
  void accept_all();
  void on_event(int fd, uint32_t events);
  void drop(int fd);

  EventLoop& loop_;
  Handler handler_;
  int listen_fd_ = -1;
  std::string path_;
  std::unordered_map<int, Conn> conns_;
};

}  // namespace gsync
