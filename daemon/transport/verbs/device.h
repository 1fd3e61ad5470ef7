// SPDX-License-Identifier: Apache-2.0
//
// What the verbs provider owns once per daemon: the opened RDMA device, the
// port and GID it uses, one protection domain, and one completion channel
// (its fd goes into Context::event_fd; every pair's CQ reports to it).
// Acquired in that order in create() - as in rdma-core's rc_pingpong.c - and
// released in reverse in the destructor. Memory registration goes through
// register_memory() only, so GPU memory (a dma-buf fd) plugs in there.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <memory>
#include <string>

#include "daemon/core/status.h"
#include "daemon/transport/transport.h"
#include "daemon/transport/verbs/buffer.h"

namespace gsync::transport::verbs {

// Which device, port and GID fit the options, without keeping anything open.
struct DeviceChoice {
  std::string device;
  int port = 0;
  int gid_index = -1;
  std::string gid_text;  // "::ffff:10.0.0.1"
  std::string gid_type;  // "RoCE v2", "RoCE v1", "IB"
};

// Why verbs cannot be used here ("ibv_get_device_list: Function not
// implemented", "no active port on mlx5_0"), or ok with *out filled in.
Status probe(const ContextOptions::Verbs& want, const std::string& local_address,
             DeviceChoice* out);

class Device final : public Registrar {
 public:
  static Status create(const ContextOptions::Verbs& want, const std::string& local_address,
                       std::unique_ptr<Device>* out);
  ~Device() override;
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  ibv_context* context() const { return ctx_; }
  ibv_pd* pd() const { return pd_; }
  ibv_comp_channel* channel() const { return channel_; }
  const DeviceChoice& choice() const { return choice_; }
  const ibv_port_attr& port_attr() const { return port_attr_; }
  const ibv_gid& gid() const { return gid_; }
  int max_qp_wr() const { return max_qp_wr_; }

  // ibv_reg_mr, or ibv_reg_dmabuf_mr when dmabuf_fd >= 0 (GPU memory
  // exported as a dma-buf; base is then the offset into it). An ENOMEM/EPERM
  // failure names RLIMIT_MEMLOCK and the unit's LimitMEMLOCK.
  Status register_memory(uint8_t* base, uint64_t bytes, int dmabuf_fd,
                         Registration* out) override;
  void deregister_memory(const Registration& r) override;

 private:
  Device() = default;

  ibv_context* ctx_ = nullptr;
  ibv_pd* pd_ = nullptr;
  ibv_comp_channel* channel_ = nullptr;
  DeviceChoice choice_;
  ibv_port_attr port_attr_{};
  ibv_gid gid_{};
  int max_qp_wr_ = 0;
};

// "RLIMIT_MEMLOCK is 8 MiB ..." when the limit may stop registrations of
// `bytes`, else "".
std::string memlock_problem(uint64_t bytes);

}  // namespace gsync::transport::verbs
