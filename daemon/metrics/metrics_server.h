// SPDX-License-Identifier: Apache-2.0
//
// Prometheus metrics over HTTP (docs/operations.md, "Metrics"): GET
// /metrics on [metrics] listen, served by libmicrohttpd's own thread. The
// numbers live on the event thread, so a scrape hands the event loop a
// request (an eventfd) and waits for the text it renders there; a scrape
// costs the loop one render, never a lock on its state. A loop that does
// not answer within 2 s gets the scrape a 503, not a hang. Any other path
// or method is answered 404 / 405; the socket is bound here, so a port in
// use is an error at start naming the address.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "daemon/core/event_loop.h"
#include "daemon/core/status.h"

struct MHD_Daemon;

namespace gsync::metrics {

class MetricsServer {
 public:
  using Render = std::function<std::string()>;
  MetricsServer(EventLoop& loop, Render render);
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  Status start(const std::string& listen);
  uint16_t port() const { return port_; }  // the bound one (listen may say 0)
  uint64_t scrapes() const { return scrapes_; }

  // libmicrohttpd's thread: the text the loop rendered, or "" after 2 s.
  std::string scrape();

 private:
  struct Pending {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    std::string text;
  };
  void on_wake();

  EventLoop& loop_;
  Render render_;
  int wake_fd_ = -1;
  int listen_fd_ = -1;
  uint16_t port_ = 0;
  MHD_Daemon* mhd_ = nullptr;
  std::mutex mu_;
  std::deque<std::shared_ptr<Pending>> queue_;
  uint64_t scrapes_ = 0;  // event thread
};

}  // namespace gsync::metrics
