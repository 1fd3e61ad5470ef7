// SPDX-License-Identifier: Apache-2.0
//
// What the DPDK provider needs once per daemon: DPDK's environment (EAL,
// started once per process from [dpdk] eal_args), one Ethernet port with
// one receive and one transmit queue, and the packet buffer pool. No
// hugepages and no PCI device are needed for the virtual devices the tests
// run on (net_memif between processes, net_af_packet on a veth); on a real
// NIC the same code runs with hugepages and a VFIO-bound port
// (docs/transport.md, "The DPDK provider").
//
// The EAL's main thread is the one that calls open(): the daemon's event
// thread, which polls the port (no dedicated lcore, docs/transport.md says
// why). Unless eal_args say otherwise, its lcore floats over every CPU the
// daemon may use, so DPDK does not pin the event thread to one core.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <rte_ethdev.h>
#include <rte_mbuf.h>

#include "daemon/core/status.h"
#include "daemon/transport/dpdk/buffer.h"
#include "daemon/transport/transport.h"

namespace gsync::transport::dpdk {

// The EAL arguments actually used: eal_args split on blanks, plus
// --file-prefix, --lcores and --no-telemetry where eal_args do not say.
std::vector<std::string> eal_argv(const std::string& eal_args, const std::string& file_prefix);

// What eal_args say of the net_memif vdev named port (nullopt: no such
// vdev). memif has no MTU of its own, and a frame longer than one of its
// buffers travels in several, which the provider cannot take, so bsize
// (2048 unless "bsize=" says, read as the PMD reads it) bounds a frame. A
// zero-copy client ("zero-copy=yes" with "role=client") sends only memory
// it shares with its peer: no payload by reference.
struct MemifVdev {
  uint32_t bsize = 2048;
  bool zero_copy = false;
};
std::optional<MemifVdev> memif_vdev(const std::string& eal_args, const std::string& port);

class Device {
 public:
  // Starts the EAL (once per process) and the port. Fails naming the step.
  static Status open(const ContextOptions::Dpdk& o, const std::string& file_prefix,
                     std::unique_ptr<Device>* out);
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  uint16_t rx(rte_mbuf** bufs, uint16_t n) { return rte_eth_rx_burst(port_, 0, bufs, n); }
  const uint8_t* mac() const { return mac_; }
  uint16_t mtu() const { return mtu_; }
  // Bytes of a frame one packet buffer holds.
  uint16_t data_room() const { return data_room_; }
  const std::string& name() const { return name_; }
  rte_mempool* pool() { return pool_; }
  uint16_t port() const { return port_; }
  // "net_memif0 02:fe:..., MTU 1500" for logs and CAPS.
  std::string describe() const;
  // Whether the port's link is up (a memif peer connected, a cable in).
  bool link_up() const;
  // The port takes a frame in two pieces, the payload by reference (an
  // external buffer): a PMD that copies in software (memif, af_packet),
  // where no DMA needs the memory mapped.
  bool payload_by_reference() const { return by_reference_; }
  // Frames the port itself lost (its ring was full) and buffers it lacked.
  uint64_t missed() const;

 private:
  Device() = default;
  Status start_port(const ContextOptions::Dpdk& o);
  // An MTU for want_mtu bytes past the Ethernet header where the port
  // takes it (memif_bsize: a memif port's buffer size, else 0); a warning
  // naming what it takes where it does not.
  void raise_mtu(const ContextOptions::Dpdk& o, uint32_t want_mtu, uint32_t memif_bsize);

  uint16_t port_ = 0;
  bool started_ = false;
  std::string name_;
  uint8_t mac_[6] = {};
  uint16_t mtu_ = 1500;
  uint16_t data_room_ = 0;
  bool by_reference_ = false;
  rte_mempool* pool_ = nullptr;
};

// The transmit burst: frames are built straight into packet buffers and go
// out together; what the port does not take goes first next time.
class TxBurst final : public TxSink {
 public:
  explicit TxBurst(Device& d) : dev_(d) {}
  ~TxBurst() override;
  uint8_t* frame(size_t bytes) override;
  uint8_t* frame_with(size_t header, const uint8_t* payload, size_t len) override;
  size_t room() const override { return kMax - n_; }
  // Hands the burst to the port; true when all of it went.
  bool flush();
  // Drops what the port did not take: frames whose payload is sent by
  // reference must not outlive the write that owns it.
  void discard();
  uint64_t no_buffer = 0;  // frames not built: the pool was empty

 private:
  static constexpr size_t kMax = 256;
  Device& dev_;
  rte_mbuf* bufs_[kMax] = {};
  size_t n_ = 0;
};

}  // namespace gsync::transport::dpdk
