// SPDX-License-Identifier: Apache-2.0
//
// Messages that came before this host began what they are for: a peer's
// rendezvous for an op this host has not started, a parameter's regions
// before this host declared it. One buffer for every cross-host service
// (services.h), kept by the control plane: a service holds a message under
// (its own name, job, two numbers of its choosing) and takes what it holds
// when it begins that op, in arrival order. What nobody takes expires when
// its holder says (an op's rendezvous 120 s after it came; a parameter's
// regions never, since a host may declare it much later), a job's messages
// go with the job, and the buffer is bounded: a peer that sends for ops
// that never begin cannot grow it without limit (the message is dropped
// with an error that names the peer). Event thread only.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "daemon/core/clock.h"

namespace gsync::cluster {

class CrossHostService;

class EarlyMessages {
 public:
  static constexpr size_t kMaxMessages = size_t{1} << 16;
  static constexpr size_t kMaxBytes = size_t{512} << 20;

  struct Held {
    int peer = -1;
    std::string bytes;  // the whole message, its type first
    Clock::time_point at;  // when it arrived
  };
  // What a service holds a message under: its name and three parts of its
  // choosing (an op: job, key, step; a parameter: job, key, 0). A view:
  // looking one up copies nothing (an op's begin does it every time).
  struct Key {
    const CrossHostService* owner = nullptr;
    std::string_view job;
    uint64_t a = 0, b = 0;
  };

  explicit EarlyMessages(size_t max_messages = kMaxMessages, size_t max_bytes = kMaxBytes)
      : max_messages_(max_messages), max_bytes_(max_bytes) {}

  // Keeps msg from peer until taken, or until `expires` (the latest any
  // message of the key asked for). A peer's later message of the same
  // type for the same key replaces its earlier one. False: the buffer is
  // full and msg was dropped.
  bool hold(const Key& key, int peer, std::string_view msg, Clock::time_point at,
            Clock::time_point expires);
  // What is held for key, in arrival order; none is held after.
  std::vector<Held> take(const Key& key);
  // Everything an owner holds for a job (the job closed).
  void drop_job(const CrossHostService* owner, std::string_view job);
  // Everything an owner holds (the service is gone).
  void drop_owner(const CrossHostService* owner);
  // Drops what expired before now; the count dropped.
  size_t expire(Clock::time_point now);

  size_t messages() const { return messages_; }
  size_t bytes() const { return bytes_; }

 private:
  // The key as the map keeps it (its job owned), compared with a Key
  // without a copy.
  struct Stored {
    const CrossHostService* owner;
    std::string job;
    uint64_t a, b;
  };
  // By owner, then job (a job's entries lie together), then a and b.
  struct Less {
    using is_transparent = void;
    template <typename K>
    static auto tied(const K& k) {
      return std::make_tuple(reinterpret_cast<uintptr_t>(k.owner), std::string_view(k.job), k.a,
                             k.b);
    }
    template <typename L, typename R>
    bool operator()(const L& l, const R& r) const {
      return tied(l) < tied(r);
    }
  };
  struct Entry {
    std::vector<Held> held;
    Clock::time_point expires = Clock::time_point::min();
  };
  using Entries = std::map<Stored, Entry, Less>;
  // Removes an entry and its counts; what it held.
  std::vector<Held> erase(Entries::iterator it);

  size_t max_messages_, max_bytes_;
  size_t messages_ = 0, bytes_ = 0;
  Entries entries_;
};

}  // namespace gsync::cluster
