// SPDX-License-Identifier: Apache-2.0
//
// The receive poll on a dedicated lcore ([dpdk] rx_lcore): the usual DPDK
// shape, measured against polling from the event loop (docs/transport.md,
// "Polling"). A thread of its own, registered with the EAL (its own lcore
// id, so the packet pool's per-lcore cache serves it), spins on the port's
// receive queue and passes each burst to the event thread through a
// single-producer single-consumer rte_ring. The event thread keeps every
// piece of state (pairs, windows, regions, the transmit queue); only the
// receive queue and the drop test hook run on the lcore. Where the event
// thread may sleep, it arms the wake-up first, and the lcore writes an
// eventfd after the next burst it passes on: the port then has the
// receive interrupt a virtual device lacks, and an idle daemon sleeps in
// epoll instead of looking at the port on a timer.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "daemon/core/status.h"
#include "daemon/transport/dpdk/device.h"

struct rte_ring;

namespace gsync::transport::dpdk {

class RxLcore {
 public:
  // cpu: the CPU it is pinned to, or -1 (it floats over the daemon's
  // CPUs); mbufs: the port's pool, which sizes the ring. Fails naming the
  // step (the ring, the eventfd, the CPU).
  static Status start(Device& dev, int cpu, uint32_t mbufs, std::unique_ptr<RxLcore>* out);
  // Stops the thread, then frees what it had passed on and was not taken.
  ~RxLcore();
  RxLcore(const RxLcore&) = delete;
  RxLcore& operator=(const RxLcore&) = delete;

  // Up to n received frames, oldest first (event thread).
  unsigned take(rte_mbuf** bufs, unsigned n);
  // The eventfd the lcore writes for an armed consumer; take() reads it.
  int event_fd() const { return efd_; }
  // The event thread may sleep after this: the next burst writes
  // event_fd(). True when frames are waiting already (then do not sleep).
  bool arm();
  bool waiting() const;
  // Whether the event thread is armed now: may sleep until the lcore wakes
  // it (gsyncctl peers).
  bool armed() const { return armed_.load(std::memory_order_relaxed); }
  // Frames the lcore freed because the ring was full (the event thread
  // fell behind): lost like frames the port missed, and resent.
  uint64_t ring_full() const { return ring_full_.load(std::memory_order_relaxed); }
  // Times it woke an armed event thread.
  uint64_t wakeups() const { return wakeups_.load(std::memory_order_relaxed); }
  // "lcore 3 on CPU 1" / "lcore 3 on any CPU" (logs, gsyncctl peers).
  std::string describe() const;

 private:
  RxLcore(Device& dev, int cpu) : dev_(dev), cpu_(cpu) {}
  void run();
  void clear_signal();
  Device& dev_;
  int cpu_;  // -1: any
  rte_ring* ring_ = nullptr;
  int efd_ = -1;
  std::atomic<bool> stop_{false}, armed_{false}, ready_{false};
  std::atomic<unsigned> lcore_{~0u};
  std::atomic<uint64_t> ring_full_{0}, wakeups_{0};
  bool armed_by_me_ = false;  // event thread's
  std::thread thread_;
};

}  // namespace gsync::transport::dpdk
