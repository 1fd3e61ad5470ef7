// SPDX-License-Identifier: Apache-2.0
#include "daemon/transport/verbs/device.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <sys/resource.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace gsync::transport::verbs {
namespace {

std::string gid_text(const ibv_gid& g) {
  char buf[INET6_ADDRSTRLEN] = {};
  inet_ntop(AF_INET6, g.raw, buf, sizeof buf);
  return buf;
}

const char* gid_type_name(uint32_t t) {
  switch (t) {
    case IBV_GID_TYPE_ROCE_V2: return "RoCE v2";
    case IBV_GID_TYPE_ROCE_V1: return "RoCE v1";
    default: return "IB";
  }
}

// The GID as ::ffff:a.b.c.d for an IPv4 address, as the kernel fills the
// table for a RoCE netdev's addresses.
bool v4_mapped(const std::string& address, ibv_gid* out) {
  in_addr a{};
  if (inet_pton(AF_INET, address.c_str(), &a) != 1) return false;
  std::memset(out->raw, 0, 16);
  out->raw[10] = out->raw[11] = 0xff;
  std::memcpy(out->raw + 12, &a, 4);
  return true;
}

// Port and GID on an opened device; "" or why none fits.
std::string pick(ibv_context* ctx, const ContextOptions::Verbs& want,
                 const std::string& local_address, DeviceChoice* c, ibv_port_attr* pa) {
  ibv_device_attr da{};
  if (ibv_query_device(ctx, &da) != 0) return fmt::format("ibv_query_device: {}", strerror(errno));
  std::string why;
  for (int p = 1; p <= da.phys_port_cnt; p++) {
    if (want.port != 0 && p != want.port) continue;
    if (ibv_query_port(ctx, uint8_t(p), pa) != 0) {
      why = fmt::format("ibv_query_port {}: {}", p, strerror(errno));
      continue;
    }
    if (pa->state != IBV_PORT_ACTIVE) {
      why = fmt::format("port {} is not active (state {})", p, ibv_port_state_str(pa->state));
      continue;
    }
    c->port = p;
    if (want.gid_index >= 0) {
      ibv_gid g{};
      if (want.gid_index >= pa->gid_tbl_len || ibv_query_gid(ctx, uint8_t(p), want.gid_index, &g) != 0)
        return fmt::format("port {} has no GID index {}", p, want.gid_index);
      ibv_gid_entry e{};
      c->gid_index = want.gid_index;
      c->gid_text = gid_text(g);
      c->gid_type = ibv_query_gid_ex(ctx, uint32_t(p), uint32_t(want.gid_index), &e, 0) == 0
                        ? gid_type_name(e.gid_type) : "?";
      return "";
    }
    if (pa->link_layer == IBV_LINK_LAYER_INFINIBAND) {
      c->gid_index = 0;  // IB routes by LID; GID 0 for the GRH-less path
      ibv_gid g{};
      ibv_query_gid(ctx, uint8_t(p), 0, &g);
      c->gid_text = gid_text(g);
      c->gid_type = "IB";
      return "";
    }
    // RoCE: a v2 GID (routable, UDP), the listen address's if it has one.
    ibv_gid mine{};
    bool have_mine = v4_mapped(local_address, &mine);
    int first_v2 = -1, first_v2_v4 = -1;
    for (int i = 0; i < pa->gid_tbl_len; i++) {
      ibv_gid_entry e{};
      if (ibv_query_gid_ex(ctx, uint32_t(p), uint32_t(i), &e, 0) != 0) continue;
      if (e.gid_type != IBV_GID_TYPE_ROCE_V2) continue;
      if (have_mine && std::memcmp(e.gid.raw, mine.raw, 16) == 0) {
        first_v2_v4 = i;
        first_v2 = i;
        break;
      }
      static const uint8_t v4pfx[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
      if (first_v2_v4 < 0 && std::memcmp(e.gid.raw, v4pfx, 12) == 0) first_v2_v4 = i;
      if (first_v2 < 0) first_v2 = i;
    }
    int i = first_v2_v4 >= 0 ? first_v2_v4 : first_v2;
    if (i < 0) {
      why = fmt::format("port {} has no RoCE v2 GID (is an IP address on its netdev?)", p);
      continue;
    }
    ibv_gid g{};
    ibv_query_gid(ctx, uint8_t(p), i, &g);
    c->gid_index = i;
    c->gid_text = gid_text(g);
    c->gid_type = "RoCE v2";
    return "";
  }
  if (want.port != 0 && want.port > da.phys_port_cnt)
    return fmt::format("no port {} (the device has {})", want.port, da.phys_port_cnt);
  return why.empty() ? "no usable port" : why;
}

// Opens the device that fits; *ctx is then the caller's.
Status open_device(const ContextOptions::Verbs& want, const std::string& local_address,
                   ibv_context** ctx, DeviceChoice* c, ibv_port_attr* pa) {
  int n = 0;
  errno = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (list == nullptr)
    return Status(GSYNC_ERR_UNSUPPORTED,
                  fmt::format("ibv_get_device_list: {} (no RDMA support in this kernel?)",
                              strerror(errno ? errno : ENOSYS)));
  std::string why;
  for (int i = 0; i < n && *ctx == nullptr; i++) {
    std::string name = ibv_get_device_name(list[i]);
    if (!want.device.empty() && name != want.device) continue;
    ibv_context* x = ibv_open_device(list[i]);
    if (x == nullptr) {
      why += fmt::format("{}{}: ibv_open_device: {}", why.empty() ? "" : "; ", name, strerror(errno));
      continue;
    }
    std::string no = pick(x, want, local_address, c, pa);
    if (no.empty()) {
      c->device = name;
      *ctx = x;
    } else {
      why += fmt::format("{}{}: {}", why.empty() ? "" : "; ", name, no);
      ibv_close_device(x);
    }
  }
  ibv_free_device_list(list);
  if (*ctx != nullptr) return Status::ok();
  if (n == 0) return Status(GSYNC_ERR_UNSUPPORTED, "no RDMA device (ibv_get_device_list is empty)");
  if (why.empty()) return Status(GSYNC_ERR_UNSUPPORTED, fmt::format("no RDMA device named '{}'", want.device));
  return Status(GSYNC_ERR_UNSUPPORTED, why);
}

}  // namespace

std::string memlock_problem(uint64_t bytes) {
  rlimit r{};
  if (getrlimit(RLIMIT_MEMLOCK, &r) != 0 || r.rlim_cur == RLIM_INFINITY || r.rlim_cur >= bytes)
    return "";
  return fmt::format(
      "RLIMIT_MEMLOCK is {} KiB, too low to register {} bytes for RDMA; raise it "
      "(LimitMEMLOCK=infinity in the gsyncd.service unit, or ulimit -l unlimited)",
      r.rlim_cur >> 10, bytes);
}

Status probe(const ContextOptions::Verbs& want, const std::string& local_address,
             DeviceChoice* out) {
  ibv_context* ctx = nullptr;
  ibv_port_attr pa{};
  Status st = open_device(want, local_address, &ctx, out, &pa);
  if (ctx != nullptr) ibv_close_device(ctx);
  return st;
}

Status Device::create(const ContextOptions::Verbs& want, const std::string& local_address,
                      std::unique_ptr<Device>* out) {
  std::unique_ptr<Device> d(new Device());
  if (Status st = open_device(want, local_address, &d->ctx_, &d->choice_, &d->port_attr_); !st)
    return st;
  ibv_device_attr da{};
  ibv_query_device(d->ctx_, &da);
  d->max_qp_wr_ = da.max_qp_wr;
  if (ibv_query_gid(d->ctx_, uint8_t(d->choice_.port), d->choice_.gid_index, &d->gid_) != 0)
    return Status(GSYNC_ERR_INTERNAL, fmt::format("ibv_query_gid: {}", strerror(errno)));
  d->pd_ = ibv_alloc_pd(d->ctx_);
  if (d->pd_ == nullptr)
    return Status(GSYNC_ERR_NOMEM, fmt::format("ibv_alloc_pd on {}: {}", d->choice_.device, strerror(errno)));
  d->channel_ = ibv_create_comp_channel(d->ctx_);
  if (d->channel_ == nullptr)
    return Status(GSYNC_ERR_NOMEM, fmt::format("ibv_create_comp_channel on {}: {}",
                                               d->choice_.device, strerror(errno)));
  // poll() drains it with ibv_get_cq_event until EAGAIN; it must never block.
  int fl = fcntl(d->channel_->fd, F_GETFL);
  fcntl(d->channel_->fd, F_SETFL, fl | O_NONBLOCK);
  *out = std::move(d);
  return Status::ok();
}

Device::~Device() {
  if (channel_ != nullptr) ibv_destroy_comp_channel(channel_);
  if (pd_ != nullptr) ibv_dealloc_pd(pd_);
  if (ctx_ != nullptr) ibv_close_device(ctx_);
}

Status Device::register_memory(uint8_t* base, uint64_t bytes, int dmabuf_fd, Registration* out) {
  int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
  ibv_mr* mr = dmabuf_fd >= 0
                   ? ibv_reg_dmabuf_mr(pd_, reinterpret_cast<uint64_t>(base), bytes,
                                       reinterpret_cast<uint64_t>(base), dmabuf_fd, access)
                   : ibv_reg_mr(pd_, base, bytes, access);
  if (mr == nullptr) {
    int e = errno;
    std::string limit = (e == ENOMEM || e == EPERM || e == EAGAIN) ? memlock_problem(bytes) : "";
    return Status(GSYNC_ERR_NOMEM,
                  fmt::format("registering {} bytes at {} on {} for RDMA failed: {}{}{}", bytes,
                              static_cast<void*>(base), choice_.device, strerror(e),
                              limit.empty() ? "" : ": ", limit));
  }
  *out = {mr, base, bytes, mr->lkey, mr->rkey};
  return Status::ok();
}

void Device::deregister_memory(const Registration& r) {
  if (r.handle != nullptr) ibv_dereg_mr(static_cast<ibv_mr*>(r.handle));
}

}  // namespace gsync::transport::verbs
