// SPDX-License-Identifier: Apache-2.0
#include "daemon/transport/dpdk/device.h"

#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>

#include <fmt/format.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <spdlog/spdlog.h>

#include "daemon/transport/dpdk/frame.h"

namespace gsync::transport::dpdk {

namespace {

bool has_arg(const std::vector<std::string>& args, std::initializer_list<const char*> names) {
  for (const auto& a : args)
    for (std::string n : names) {
      // "--lcores=...", and a short option glued to its value ("-l0").
      bool is_short = n.size() == 2;
      if (a == n || a.rfind(n + "=", 0) == 0 || (is_short && a.rfind(n, 0) == 0)) return true;
    }
  return false;
}

std::string allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return "0";
  std::string out;
  for (int c = 0; c < CPU_SETSIZE; c++) {
    if (!CPU_ISSET(c, &set)) continue;
    if (!out.empty()) out += ',';
    out += std::to_string(c);
  }
  return out.empty() ? "0" : out;
}

// The EAL's runtime folders of daemons no longer running: each start makes
// its own (--file-prefix gsync-<host>-<pid>, so two daemons of one machine
// never share one), and nothing removes it when a daemon dies.
void remove_stale_runtime_dirs() {
  std::string base = getuid() == 0 ? "/var/run/dpdk"
                     : getenv("XDG_RUNTIME_DIR") ? std::string(getenv("XDG_RUNTIME_DIR")) + "/dpdk"
                                                 : "/tmp/dpdk";
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(base, ec)) {
    std::string name = e.path().filename().string();
    size_t dash = name.rfind('-');
    if (name.rfind("gsync-", 0) != 0 || dash == std::string::npos || dash + 1 == name.size())
      continue;
    std::string pid = name.substr(dash + 1);
    if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
    if (kill(pid_t(std::stol(pid)), 0) == 0 || errno != ESRCH) continue;
    std::filesystem::remove_all(e.path(), ec);
  }
}

// The EAL starts once per process and cannot start again after cleanup.
std::once_flag eal_once;
Status eal_status;

// eal_args split on blanks, as the EAL gets them.
std::vector<std::string> split_blanks(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> words;
  for (std::string w; in >> w;) words.push_back(w);
  return words;
}

}  // namespace

std::optional<MemifVdev> memif_vdev(const std::string& eal_args, const std::string& port) {
  if (port.rfind("net_memif", 0) != 0) return std::nullopt;
  const std::vector<std::string> args = split_blanks(eal_args);
  for (size_t i = 0; i < args.size(); i++) {
    std::string dev;
    if (args[i].rfind("--vdev=", 0) == 0) dev = args[i].substr(7);
    else if (args[i] == "--vdev" && i + 1 < args.size()) dev = args[i + 1];
    std::vector<std::string> kv;
    std::istringstream parts(dev);
    for (std::string p; std::getline(parts, p, ',');) kv.push_back(p);
    if (kv.empty() || kv[0] != port) continue;
    MemifVdev m;
    bool client = false, zero_copy = false;
    for (size_t k = 1; k < kv.size(); k++) {
      if (kv[k] == "zero-copy=yes") zero_copy = true;
      if (kv[k] == "role=client" || kv[k] == "role=slave") client = true;
      // Read as the PMD reads it (strtoul): "9k" is 9 there too.
      if (kv[k].rfind("bsize=", 0) == 0)
        m.bsize = uint32_t(std::strtoul(kv[k].c_str() + 6, nullptr, 10));
    }
    m.zero_copy = zero_copy && client;  // the PMD ignores it on a server
    return m;
  }
  return std::nullopt;
}

std::vector<std::string> eal_argv(const std::string& eal_args, const std::string& file_prefix) {
  std::vector<std::string> args{"gsyncd"};
  for (std::string& a : split_blanks(eal_args)) args.push_back(std::move(a));
  if (!has_arg(args, {"--file-prefix", "--in-memory"})) args.push_back("--file-prefix=" + file_prefix);
  if (!has_arg(args, {"-l", "-c", "--lcores"}))
    args.push_back(fmt::format("--lcores=0@({})", allowed_cpus()));
  if (!has_arg(args, {"--no-telemetry", "--telemetry"})) args.push_back("--no-telemetry");
  return args;
}

Status Device::open(const ContextOptions::Dpdk& o, const std::string& file_prefix,
                    std::unique_ptr<Device>* out) {
  std::vector<std::string> args = eal_argv(o.eal_args, file_prefix);
  std::call_once(eal_once, [&] {
    remove_stale_runtime_dirs();
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    if (rte_eal_init(int(args.size()), argv.data()) < 0) {
      eal_status = Status(GSYNC_ERR_UNSUPPORTED,
                          fmt::format("dpdk: rte_eal_init({}): {}", o.eal_args,
                                      rte_strerror(rte_errno)));
    }
  });
  if (!eal_status) return eal_status;
  std::unique_ptr<Device> d(new Device());
  if (Status st = d->start_port(o); !st) return st;
  *out = std::move(d);
  return Status::ok();
}

void Device::raise_mtu(const ContextOptions::Dpdk& o, uint32_t want_mtu, uint32_t memif_bsize) {
  // A PMD without an MTU to set takes what its receive side says it
  // takes; memif (frames in shared-memory buffers, in several when longer
  // than one) what one of its buffers holds.
  rte_eth_dev_info info{};
  rte_eth_dev_info_get(port_, &info);
  const uint32_t takes = memif_bsize != 0 ? memif_bsize : info.max_rx_pktlen;
  int rc = rte_eth_dev_set_mtu(port_, uint16_t(want_mtu));
  if (rc == -ENOTSUP && takes >= want_mtu + kEtherHeaderBytes) rc = 0;
  if (rc == 0)
    mtu_ = uint16_t(want_mtu);
  else
    spdlog::warn("dpdk: port {} ({}) keeps MTU {}: setting {} for [dpdk] payload {}: {} "
                 "(it takes frames of up to {} bytes{})",
                 port_, name_, mtu_, want_mtu, o.payload, rte_strerror(-rc), takes,
                 memif_bsize != 0 ? "; a memif vdev's bsize= raises that" : "");
}

Status Device::start_port(const ContextOptions::Dpdk& o) {
  auto fail = [&](const char* step, int rc) {
    return Status(GSYNC_ERR_UNSUPPORTED, fmt::format("dpdk: {} on port {} ({}): {}", step, port_,
                                                     name_, rte_strerror(rc < 0 ? -rc : rc)));
  };
  if (o.port.empty()) {
    if (rte_eth_dev_count_avail() == 0)
      return Status(GSYNC_ERR_UNSUPPORTED,
                    "dpdk: no Ethernet port (give one in [dpdk] eal_args, e.g. "
                    "--vdev=net_memif0,role=server,socket=/run/gsync/memif.sock)");
    port_ = uint16_t(rte_eth_find_next_owned_by(0, RTE_ETH_DEV_NO_OWNER));
  } else if (rte_eth_dev_get_port_by_name(o.port.c_str(), &port_) != 0) {
    return Status(GSYNC_ERR_UNSUPPORTED,
                  fmt::format("dpdk: no port named {} ([dpdk] port; the EAL knows {} ports)",
                              o.port, rte_eth_dev_count_avail()));
  }
  char name[RTE_ETH_NAME_MAX_LEN] = {};
  rte_eth_dev_get_name_by_port(port_, name);
  name_ = name;
  // A payload asked for beyond the MTU's: a bigger MTU, if the port takes
  // one (jumbo frames), and buffers that hold such a frame in one piece.
  uint32_t want_mtu = o.payload != 0 ? o.payload + uint32_t(sizeof(FrameHeader)) : 0;
  uint32_t room = std::max<uint32_t>(RTE_MBUF_DEFAULT_BUF_SIZE,
                                     RTE_PKTMBUF_HEADROOM + kEtherHeaderBytes + want_mtu);
  // One pool per port for the life of the process: a stopped port's
  // queues still hold its buffers until the port is configured again.
  static std::map<uint16_t, rte_mempool*> pools;
  rte_mempool*& pool = pools[port_];
  if (pool != nullptr && rte_pktmbuf_data_room_size(pool) < room) pool = nullptr;  // kept: in use
  if (pool == nullptr)
    pool = rte_pktmbuf_pool_create(
        fmt::format("gsync_pool_{}_{}", port_, room).c_str(), o.mbufs, 256, 0, uint16_t(room),
        int(rte_eth_dev_socket_id(port_)));
  pool_ = pool;
  if (pool_ == nullptr) return fail("rte_pktmbuf_pool_create", rte_errno);
  rte_eth_conf conf{};
  rte_eth_dev_info info{};
  if (int rc = rte_eth_dev_info_get(port_, &info); rc != 0) return fail("dev_info_get", rc);
  std::string driver = info.driver_name ? info.driver_name : "";
  const std::optional<MemifVdev> memif = memif_vdev(o.eal_args, name_);
  // A zero-copy memif client sends its buffers' own memory, which must lie
  // in the regions it shares with its peer: a payload elsewhere (the
  // tensor's) would reach the peer as whatever lies at that offset there.
  // So a memif port whose vdev the arguments do not show (made some other
  // way) sends no payload by reference either.
  by_reference_ = (info.tx_offload_capa & RTE_ETH_TX_OFFLOAD_MULTI_SEGS) &&
                  rte_eal_iova_mode() == RTE_IOVA_VA &&
                  ((driver == "net_memif" && memif && !memif->zero_copy) ||
                   driver == "net_af_packet");
  if (by_reference_) conf.txmode.offloads |= RTE_ETH_TX_OFFLOAD_MULTI_SEGS;
  if (int rc = rte_eth_dev_configure(port_, 1, 1, &conf); rc != 0) return fail("configure", rc);
  if (rte_eth_dev_get_mtu(port_, &mtu_) != 0) mtu_ = 1500;
  const uint32_t bsize = driver == "net_memif" && memif ? memif->bsize : 0;
  // A memif buffer smaller than the MTU's frame bounds the frame too.
  if (bsize != 0 && bsize < mtu_ + kEtherHeaderBytes)
    mtu_ = uint16_t(bsize > kEtherHeaderBytes ? bsize - kEtherHeaderBytes : 0);
  if (want_mtu > mtu_) raise_mtu(o, want_mtu, bsize);
  uint16_t rxd = 1024, txd = 1024;
  if (int rc = rte_eth_dev_adjust_nb_rx_tx_desc(port_, &rxd, &txd); rc != 0)
    return fail("adjust descriptors", rc);
  int socket = rte_eth_dev_socket_id(port_);
  if (int rc = rte_eth_rx_queue_setup(port_, 0, rxd, socket, nullptr, pool_); rc != 0)
    return fail("rx queue setup", rc);
  if (int rc = rte_eth_tx_queue_setup(port_, 0, txd, socket, nullptr); rc != 0)
    return fail("tx queue setup", rc);
  if (int rc = rte_eth_dev_start(port_); rc != 0) return fail("start", rc);
  started_ = true;
  rte_eth_promiscuous_enable(port_);  // not every PMD can; frames are ours by ethertype anyway
  rte_ether_addr mac;
  if (int rc = rte_eth_macaddr_get(port_, &mac); rc != 0) return fail("macaddr_get", rc);
  std::memcpy(mac_, mac.addr_bytes, 6);
  data_room_ = uint16_t(room - RTE_PKTMBUF_HEADROOM);
  return Status::ok();
}

Device::~Device() {
  // Stopped, not closed: a closed virtual device is gone for the rest of
  // the process, and a context made again (a test, a restart of the
  // transport) opens the same port.
  if (started_) rte_eth_dev_stop(port_);
}

std::string Device::describe() const {
  return fmt::format("{} {:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}, MTU {}{}", name_, mac_[0],
                     mac_[1], mac_[2], mac_[3], mac_[4], mac_[5], mtu_,
                     by_reference_ ? ", payload sent by reference" : "");
}

bool Device::link_up() const {
  rte_eth_link l{};
  return rte_eth_link_get_nowait(port_, &l) == 0 && l.link_status == RTE_ETH_LINK_UP;
}

uint64_t Device::missed() const {
  rte_eth_stats s{};
  if (rte_eth_stats_get(port_, &s) != 0) return 0;
  return s.imissed + s.rx_nombuf;
}

// ---------------------------------------------------------------- transmit

TxBurst::~TxBurst() { rte_pktmbuf_free_bulk(bufs_, unsigned(n_)); }

uint8_t* TxBurst::frame(size_t bytes) {
  if (n_ == kMax) return nullptr;
  rte_mbuf* m = rte_pktmbuf_alloc(dev_.pool());
  if (m == nullptr) {
    no_buffer++;
    return nullptr;
  }
  char* p = rte_pktmbuf_append(m, uint16_t(bytes));
  if (p == nullptr) {
    rte_pktmbuf_free(m);
    return nullptr;
  }
  bufs_[n_++] = m;
  return reinterpret_cast<uint8_t*>(p);
}

namespace {
// Payloads sent by reference belong to the writer, which keeps them until
// the write completes: nothing to free when the port is done with one.
void no_free(void*, void*) {}
rte_mbuf_ext_shared_info* by_reference_info() {
  static rte_mbuf_ext_shared_info info = [] {
    rte_mbuf_ext_shared_info i{};
    i.free_cb = no_free;
    rte_mbuf_ext_refcnt_set(&i, 1);  // one reference of its own: never 0
    return i;
  }();
  return &info;
}
}  // namespace

uint8_t* TxBurst::frame_with(size_t header, const uint8_t* payload, size_t len) {
  if (!dev_.payload_by_reference() || len == 0) return TxSink::frame_with(header, payload, len);
  uint8_t* p = frame(header);
  if (p == nullptr) return nullptr;
  rte_mbuf* ext = rte_pktmbuf_alloc(dev_.pool());
  if (ext == nullptr) {
    rte_pktmbuf_free(bufs_[--n_]);
    no_buffer++;
    return nullptr;
  }
  rte_mbuf_ext_shared_info* info = by_reference_info();
  rte_mbuf_ext_refcnt_update(info, 1);  // dropped again when the port frees ext
  void* addr = const_cast<uint8_t*>(payload);
  rte_pktmbuf_attach_extbuf(ext, addr, rte_iova_t(reinterpret_cast<uintptr_t>(addr)),
                            uint16_t(len), info);
  ext->data_len = uint16_t(len);
  ext->pkt_len = uint32_t(len);
  if (rte_pktmbuf_chain(bufs_[n_ - 1], ext) != 0) {
    rte_pktmbuf_free(ext);
    rte_pktmbuf_free(bufs_[--n_]);
    return nullptr;
  }
  return p;
}

void TxBurst::discard() {
  rte_pktmbuf_free_bulk(bufs_, unsigned(n_));
  n_ = 0;
}

bool TxBurst::flush() {
  size_t sent = 0;
  while (sent < n_) {
    uint16_t k = rte_eth_tx_burst(dev_.port(), 0, bufs_ + sent, uint16_t(std::min<size_t>(n_ - sent, 64)));
    if (k == 0) break;
    sent += k;
  }
  std::memmove(bufs_, bufs_ + sent, (n_ - sent) * sizeof bufs_[0]);
  n_ -= sent;
  return n_ == 0;
}

}  // namespace gsync::transport::dpdk
