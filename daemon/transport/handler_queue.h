// SPDX-License-Identifier: Apache-2.0
//
// The handler calls a provider must not make in the middle of a state
// change (on_write_done, on_peer_up, on_peer_down, a region's released):
// queued, then run in order by flush(). Events a handler raises join the
// flush that is running instead of starting a nested one, so handlers never
// re-enter each other. Shared by the tcp and verbs providers.
#pragma once

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "daemon/core/status.h"
#include "daemon/transport/transport.h"

namespace gsync::transport {

class HandlerQueue {
 public:
  void write_done(int peer, uint64_t cookie, Status st) {
    events_.push_back({Kind::kWriteDone, peer, cookie, std::move(st), {}});
  }
  void peer_up(int peer) { events_.push_back({Kind::kPeerUp, peer, 0, Status::ok(), {}}); }
  void peer_down(int peer, Status why) {
    events_.push_back({Kind::kPeerDown, peer, 0, std::move(why), {}});
  }
  void released(std::function<void()> fn) {
    events_.push_back({Kind::kReleased, -1, 0, Status::ok(), std::move(fn)});
  }
  bool empty() const { return events_.empty(); }

  // Runs every queued event, and those the handlers queue meanwhile.
  void flush(const Handlers& h) {
    if (flushing_) return;  // a handler's own events join the loop below
    flushing_ = true;
    while (!events_.empty()) {
      running_.swap(events_);
      for (Event& e : running_) {
        switch (e.kind) {
          case Kind::kWriteDone:
            if (h.on_write_done) h.on_write_done(e.peer, e.cookie, e.status);
            break;
          case Kind::kPeerUp:
            if (h.on_peer_up) h.on_peer_up(e.peer);
            break;
          case Kind::kPeerDown:
            if (h.on_peer_down) h.on_peer_down(e.peer, e.status);
            break;
          case Kind::kReleased:
            if (e.released) e.released();
            break;
        }
      }
      running_.clear();
    }
    flushing_ = false;
  }

 private:
  enum class Kind : uint8_t { kWriteDone, kPeerUp, kPeerDown, kReleased };
  struct Event {
    Kind kind;
    int peer;
    uint64_t cookie;
    Status status;
    std::function<void()> released;
  };
  std::vector<Event> events_, running_;
  bool flushing_ = false;
};

}  // namespace gsync::transport
