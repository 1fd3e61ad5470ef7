// SPDX-License-Identifier: Apache-2.0
//
// This daemon's membership on etcd (docs/membership.md): join() claims the
// host's slot, registers its record under a lease and reads who is there,
// before the event loop runs; then two threads of their own keep it up, so
// no etcd call ever blocks the event thread:
//   - the keeper renews the lease every ttl/3 and, when the lease is gone
//     (etcd was away longer than the ttl), registers again;
//   - the watcher follows the hosts/ prefix and turns its events into
//     Changes; after a failure or a compaction it reads the prefix again
//     and hands over the whole list (kSnapshot).
// Changes wait in a queue the event thread empties with take() when wake()
// (called from those threads) tells it to.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "daemon/cluster/etcd/record.h"
#include "daemon/core/status.h"

namespace gsync::cluster::etcd {

class Client;

struct Change {
  enum class Kind {
    kJoined,    // host: a record was written (a host joined, or came back)
    kLeft,      // id: its key went (lease expired, revoked or deleted)
    kSnapshot,  // hosts: every host registered now (after a gap in the watch)
    kEtcdDown,  // text: etcd cannot be reached; membership stays as it is
    kEtcdUp,    // etcd answers again
    kRejoined,  // this host's lease was gone; it registered again
  };
  Kind kind = Kind::kJoined;
  HostRecord host;
  std::string id;
  std::vector<HostRecord> hosts;
  std::string text;
};

struct RegistryOptions {
  std::vector<std::string> endpoints;
  std::string cluster;  // cluster_prefix(etcd_prefix, name)
  uint32_t ttl_s = 10;
  HostRecord self;      // slot is filled in by join()
  // join() keeps trying an etcd it cannot reach for this long.
  std::chrono::milliseconds join_deadline{15000};
};

class Registry {
 public:
  explicit Registry(RegistryOptions options);
  ~Registry();  // stops the threads and revokes the lease: peers see the leave at once
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // Blocking: this host's slot and every host registered now (self
  // included), with the revision they were read at.
  Status join(int* slot, std::vector<HostRecord>* hosts);
  void start(std::function<void()> wake);
  std::vector<Change> take();

  struct State {
    bool etcd_up = true;
    std::string endpoint, last_error;
    int64_t lease = 0, revision = 0;
    uint64_t changes = 0, rejoins = 0;
  };
  State state() const;
  const RegistryOptions& options() const { return o_; }

 private:
  Status claim_slot(Client& c, int* slot);
  Status register_self(Client& c);
  Status read_hosts(Client& c, std::vector<HostRecord>* hosts, int64_t* revision);
  void keep();
  void watch();
  void post(Change c);
  void set_down(const Status& why);
  void set_up();
  // Waits up to d or until stop; false when stopping.
  bool pause(std::chrono::milliseconds d);

  RegistryOptions o_;
  std::unique_ptr<Client> keeper_client_, watcher_client_;
  int64_t revision_ = 0;  // of join()'s read: the watch starts after it
  std::function<void()> wake_;
  std::thread keeper_, watcher_;
  std::atomic<bool> stop_{false};
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Change> queue_;
  State state_;
};

}  // namespace gsync::cluster::etcd
