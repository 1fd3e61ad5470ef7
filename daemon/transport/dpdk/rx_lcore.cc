// SPDX-License-Identifier: Apache-2.0
#include "daemon/transport/dpdk/rx_lcore.h"

#include <pthread.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>
#include <rte_errno.h>
#include <rte_lcore.h>
#include <rte_pause.h>
#include <rte_ring.h>
#include <spdlog/spdlog.h>

namespace gsync::transport::dpdk {

namespace {
constexpr uint16_t kBurst = 32;
// Empty looks spent spinning before each yield: a spin keeps the next
// frame's latency at a few hundred ns, a yield lets a rank or a reduce
// thread that shares the CPU run (a spinning thread never sleeps).
constexpr int kSpinsPerYield = 64;
std::atomic<unsigned> rings_made{0};
}  // namespace

Status RxLcore::start(Device& dev, int cpu, uint32_t mbufs, std::unique_ptr<RxLcore>* out) {
  if (cpu >= CPU_SETSIZE)
    return Status(GSYNC_ERR_INVALID, fmt::format("dpdk: rx_lcore {}: no such CPU", cpu));
  std::unique_ptr<RxLcore> r(new RxLcore(dev, cpu));
  // Ring names are global to the EAL, and a context may be made again.
  std::string name = fmt::format("gsync_rx_{}", rings_made.fetch_add(1));
  // Frames passed on and not yet taken: at most half the pool's buffers
  // (a power of two), so an event thread that falls behind leaves the
  // transmit side buffers for its ACKs; what does not fit is counted.
  unsigned slots = 64;
  while (slots * 2 <= std::min<uint32_t>(mbufs / 2, 8192)) slots *= 2;
  r->ring_ = rte_ring_create(name.c_str(), slots, int(rte_socket_id()),
                             RING_F_SP_ENQ | RING_F_SC_DEQ);
  if (r->ring_ == nullptr)
    return Status(GSYNC_ERR_NOMEM, fmt::format("dpdk: rte_ring_create for the receive lcore: {}",
                                               rte_strerror(rte_errno)));
  r->efd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (r->efd_ < 0)
    return Status(GSYNC_ERR_NOMEM, fmt::format("dpdk: eventfd for the receive lcore: {}",
                                               strerror(errno)));
  if (cpu >= 0) {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) != 0 || !CPU_ISSET(cpu, &set))
      return Status(GSYNC_ERR_INVALID,
                    fmt::format("dpdk: rx_lcore {}: not a CPU this daemon may run on", cpu));
  }
  RxLcore* self = r.get();
  r->thread_ = std::thread([self] { self->run(); });
  r->ready_.wait(false);  // its lcore id known (describe())
  *out = std::move(r);
  return Status::ok();
}

RxLcore::~RxLcore() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
  if (ring_ != nullptr) {
    rte_mbuf* bufs[kBurst];
    for (unsigned n; (n = rte_ring_sc_dequeue_burst(ring_, reinterpret_cast<void**>(bufs), kBurst,
                                                    nullptr)) > 0;)
      rte_pktmbuf_free_bulk(bufs, n);
    rte_ring_free(ring_);
  }
  if (efd_ >= 0) close(efd_);
}

std::string RxLcore::describe() const {
  unsigned id = lcore_.load();
  std::string lcore = id == ~0u ? "an unregistered thread" : fmt::format("lcore {}", id);
  return cpu_ < 0 ? lcore + " on any CPU" : fmt::format("{} on CPU {}", lcore, cpu_);
}

void RxLcore::run() {
  pthread_setname_np(pthread_self(), "gsync-dpdk-rx");
  if (cpu_ >= 0) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu_, &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);  // checked allowed in start()
  }
  // An lcore id of its own: the packet pool's cache for it. Without one
  // (all ids taken) it still works, on the pool's shared ring.
  if (rte_thread_register() == 0) lcore_.store(rte_lcore_id());
  else spdlog::warn("dpdk: the receive thread has no lcore id ({}): the packet pool serves it "
                    "without a cache", rte_strerror(rte_errno));
  ready_.store(true);
  ready_.notify_one();
  rte_mbuf* bufs[kBurst];
  int idle = 0;
  while (!stop_.load(std::memory_order_relaxed)) {
    uint16_t n = dev_.rx(bufs, kBurst);
    if (n == 0) {
      if (++idle % kSpinsPerYield == 0) sched_yield();
      else rte_pause();
      continue;
    }
    idle = 0;
    unsigned in = rte_ring_sp_enqueue_burst(ring_, reinterpret_cast<void**>(bufs), n, nullptr);
    if (in < n) {
      rte_pktmbuf_free_bulk(bufs + in, n - in);
      ring_full_.fetch_add(n - in, std::memory_order_relaxed);
    }
    // Pairs with arm(): the frames are in the ring before armed_ is read,
    // and the event thread looks at the ring after it sets armed_.
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (armed_.load(std::memory_order_relaxed) && armed_.exchange(false)) {
      // Counted first: whoever the write wakes may read the count at once.
      wakeups_.fetch_add(1, std::memory_order_relaxed);
      const uint64_t one = 1;
      [[maybe_unused]] ssize_t w = write(efd_, &one, sizeof one);
    }
  }
  if (lcore_.load() != ~0u) rte_thread_unregister();
}

void RxLcore::clear_signal() {
  uint64_t count;
  [[maybe_unused]] ssize_t r = read(efd_, &count, sizeof count);  // nonblocking; may be empty
}

unsigned RxLcore::take(rte_mbuf** bufs, unsigned n) {
  // Busy turns make no system call: the eventfd is looked at only after a
  // turn that armed it.
  if (armed_by_me_) {
    armed_by_me_ = false;
    armed_.store(false, std::memory_order_relaxed);
    clear_signal();
  }
  return rte_ring_sc_dequeue_burst(ring_, reinterpret_cast<void**>(bufs), n, nullptr);
}

bool RxLcore::arm() {
  // A signal the lcore wrote after the last clear (it took armed_ just
  // before take() cleared it) goes now, or epoll would keep waking the loop.
  clear_signal();
  armed_by_me_ = true;
  armed_.store(true);
  // Pairs with the lcore's fence: the flag is set before the ring is
  // looked at (a store then a load: only a full fence orders them).
  std::atomic_thread_fence(std::memory_order_seq_cst);
  return waiting();
}

bool RxLcore::waiting() const { return rte_ring_count(ring_) > 0; }

}  // namespace gsync::transport::dpdk
