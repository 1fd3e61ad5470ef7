// SPDX-License-Identifier: Apache-2.0
#include "tools/gsyncctl/host_checks.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <vector>

#include <fmt/format.h>

#include "tools/gsyncctl/table.h"

namespace gsync::cli {

namespace fs = std::filesystem;

namespace {

std::string limit_text(uint64_t v) { return v == kUnlimited ? "unlimited" : format_bytes(v); }

// Numeric entries of a folder (ports "1", "2"; GID indexes), in order.
std::vector<int> numbered(const std::string& dir) {
  std::vector<int> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string n = e.path().filename().string();
    if (!n.empty() && std::all_of(n.begin(), n.end(), ::isdigit)) out.push_back(std::stoi(n));
  }
  std::sort(out.begin(), out.end());
  return out;
}

// "0000:...:ffff:0a4d:0101" (sysfs) -> "::ffff:10.77.1.1"; the text as it
// is when it is not a GID.
std::string gid_text(const std::string& sysfs) {
  std::string hex;
  for (char c : sysfs)
    if (c != ':') hex += c;
  unsigned char b[16];
  if (hex.size() != 32) return sysfs;
  for (int i = 0; i < 16; i++) {
    unsigned v = 0;
    if (std::sscanf(hex.c_str() + 2 * i, "%2x", &v) != 1) return sysfs;
    b[i] = static_cast<unsigned char>(v);
  }
  char text[INET6_ADDRSTRLEN];
  return inet_ntop(AF_INET6, b, text, sizeof text) ? text : sysfs;
}

bool all_zero_gid(const std::string& sysfs) {
  return !sysfs.empty() &&
         std::all_of(sysfs.begin(), sysfs.end(), [](char c) { return c == '0' || c == ':'; });
}

}  // namespace

std::string read_small_file(const std::string& path) {
  std::ifstream f(path);
  if (!f) return "";
  std::stringstream ss;
  ss << f.rdbuf();
  std::string s = ss.str();
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  return s;
}

// ---------------------------------------------------------------- memlock

bool parse_memlock_limit(const std::string& text, uint64_t* soft) {
  std::istringstream in(text);
  const std::string key = "Max locked memory";
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(key, 0) != 0) continue;
    std::istringstream f(line.substr(key.size()));
    std::string value;
    if (!(f >> value)) return false;
    if (value == "unlimited") {
      *soft = kUnlimited;
      return true;
    }
    if (value.empty() || !std::all_of(value.begin(), value.end(), ::isdigit)) return false;
    *soft = std::stoull(value);
    return true;
  }
  return false;
}

Check judge_memlock(uint64_t limit, const std::string& whose, const ArenaNeed& need, pid_t pid,
                    bool have_rdma) {
  nlohmann::json data{{"limit_bytes", limit == kUnlimited ? nlohmann::json(nullptr)
                                                          : nlohmann::json(limit)},
                      {"default_arena", need.default_arena},
                      {"max_arena", need.max_arena},
                      {"from_daemon", need.from_daemon}};
  const std::string found = fmt::format(
      "{} may lock {}; one session's arena is {}, the largest {} ([limits] default_arena and "
      "max_arena{})",
      whose, limit_text(limit), format_bytes(need.default_arena), format_bytes(need.max_arena),
      need.from_daemon ? "" : ": the built-in defaults, no daemon answered");
  const std::string now =
      have_rdma ? "" : " (no RDMA port here yet: while every link is TCP nothing is registered)";
  const std::string fix = fmt::format(
      "{}LimitMEMLOCK=infinity in [Service] of gsyncd.service (`systemctl edit gsyncd`) for the "
      "next start, or `ulimit -l unlimited` in the shell that starts gsyncd",
      pid > 0 ? fmt::format("`prlimit --pid {} --memlock=unlimited:unlimited` now; ", pid) : "");
  if (limit < need.default_arena)
    return fail("memlock", found + ": RDMA cannot register even one session's arena" + now, fix,
                data);
  if (limit < need.max_arena)
    return warn("memlock",
                found + fmt::format(": a client that asks for more than {} cannot have its "
                                    "arena registered for RDMA",
                                    limit_text(limit)),
                fix + fmt::format(", or set [limits] max_arena to {} at most",
                                  format_bytes(limit)),
                data);
  return ok("memlock", found, data);
}

Check check_memlock(const std::string& root, pid_t pid, const ArenaNeed& need, bool have_rdma) {
  uint64_t limit = 0;
  if (pid > 0 &&
      parse_memlock_limit(read_small_file(fmt::format("{}/proc/{}/limits", root, pid)), &limit))
    return judge_memlock(limit, fmt::format("gsyncd (pid {})", pid), need, pid, have_rdma);
  rlimit r{};
  if (getrlimit(RLIMIT_MEMLOCK, &r) != 0)
    return warn("memlock", fmt::format("getrlimit(RLIMIT_MEMLOCK): {}", std::strerror(errno)),
                "run gsyncctl doctor as the daemon's user, or as root");
  limit = r.rlim_cur == RLIM_INFINITY ? kUnlimited : static_cast<uint64_t>(r.rlim_cur);
  return judge_memlock(limit,
                       pid > 0 ? fmt::format("this process (gsyncd's /proc/{}/limits cannot be "
                                             "read)",
                                             pid)
                               : "this process",
                       need, 0, have_rdma);
}

// ---------------------------------------------------------------- memfd

Check check_memfd() {
  constexpr size_t kBytes = 2 << 20;
  int fd = memfd_create("gsync-doctor", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) {
    const int e = errno;
    return fail("memfd", fmt::format("memfd_create: {}: no client session can be made", std::strerror(e)),
                e == ENOSYS ? "run on a kernel with memfd_create (Linux 3.17 or later)"
                : e == EPERM
                    ? "allow memfd_create in the seccomp profile of the container gsyncd runs in"
                    : "raise the open-files limit (LimitNOFILE=65536 in gsyncd.service)");
  }
  std::string why;
  if (ftruncate(fd, kBytes) != 0)
    why = fmt::format("ftruncate to {}: {}", format_bytes(kBytes), std::strerror(errno));
  else if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)
    why = fmt::format("sealing: {}", std::strerror(errno));
  void* p = why.empty() ? mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                        : MAP_FAILED;
  if (why.empty() && p == MAP_FAILED) why = fmt::format("mmap: {}", std::strerror(errno));
  if (p != MAP_FAILED) {
    static_cast<volatile char*>(p)[kBytes - 1] = 1;
    munmap(p, kBytes);
  }
  close(fd);
  if (!why.empty())
    return fail("memfd", "memfd_create works, but " + why + ": no client session can be made",
                "check the memory cgroup's limit (`systemctl show gsyncd -p MemoryMax`) and "
                "the shmem mount (`grep shm /proc/mounts`)");
  return ok("memfd", fmt::format("memfd_create, sealing and a shared {} mapping work",
                                 format_bytes(kBytes)));
}

// ---------------------------------------------------------------- huge pages

Meminfo parse_meminfo(const std::string& text) {
  Meminfo m;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    std::istringstream f(line);
    std::string key;
    long v = 0;
    if (!(f >> key >> v)) continue;
    if (key == "HugePages_Total:") m.hugepages_total = v;
    if (key == "HugePages_Free:") m.hugepages_free = v;
    if (key == "Hugepagesize:") m.hugepage_kib = v;
  }
  return m;
}

std::string thp_mode(const std::string& text) {
  size_t a = text.find('['), b = text.find(']');
  if (a == std::string::npos || b == std::string::npos || b < a) return "";
  return text.substr(a + 1, b - a - 1);
}

Check check_hugepages(const std::string& root) {
  const std::string thp = root + "/sys/kernel/mm/transparent_hugepage/";
  const std::string enabled = thp_mode(read_small_file(thp + "enabled"));
  const std::string shmem = thp_mode(read_small_file(thp + "shmem_enabled"));
  const Meminfo m = parse_meminfo(read_small_file(root + "/proc/meminfo"));
  nlohmann::json data{{"thp_enabled", enabled}, {"thp_shmem_enabled", shmem},
                      {"hugepages_total", m.hugepages_total},
                      {"hugepages_free", m.hugepages_free}, {"hugepage_kib", m.hugepage_kib}};
  const std::string reserved =
      m.hugepages_total < 0
          ? "no HugePages lines in /proc/meminfo"
          : fmt::format("HugePages {} of {} free, {} KiB each (gsync reserves none)",
                        m.hugepages_free, m.hugepages_total, m.hugepage_kib);
  if (enabled.empty())
    return ok("hugepages", "no transparent huge pages in this kernel; " + reserved, data);
  const std::string found = fmt::format(
      "transparent huge pages {} (scratch buffers madvise for them), shmem {} (the client "
      "arenas{}); {}",
      enabled, shmem.empty() ? "-" : shmem,
      shmem == "never" || shmem.empty() || shmem == "deny" ? " stay on 4 KiB pages"
                                                           : " may get them",
      reserved);
  if (enabled == "never")
    return warn("hugepages", found,
                "`echo madvise > /sys/kernel/mm/transparent_hugepage/enabled` (or "
                "transparent_hugepage=madvise on the kernel command line)",
                data);
  return ok("hugepages", found, data);
}

// ---------------------------------------------------------------- RDMA

namespace {

// The first RoCE v2 GID of a port that is in use: its index, or -1.
int roce_v2_gid(const std::string& port, std::string* gid, std::string* netdev) {
  for (int i : numbered(port + "/gid_attrs/types")) {
    if (read_small_file(fmt::format("{}/gid_attrs/types/{}", port, i)) != "RoCE v2") continue;
    std::string g = read_small_file(fmt::format("{}/gids/{}", port, i));
    if (g.empty() || all_zero_gid(g)) continue;
    *gid = gid_text(g);
    *netdev = read_small_file(fmt::format("{}/gid_attrs/ndevs/{}", port, i));
    return i;
  }
  return -1;
}

Check port_check(const std::string& dev, int p, const std::string& dir) {
  const std::string name = fmt::format("rdma {} port {}", dev, p);
  const std::string state = read_small_file(dir + "/state");  // "4: ACTIVE"
  const std::string layer = read_small_file(dir + "/link_layer");
  std::string gid, netdev;
  const int index = layer == "InfiniBand" ? -1 : roce_v2_gid(dir, &gid, &netdev);
  nlohmann::json data{{"device", dev}, {"port", p}, {"state", state}, {"link_layer", layer},
                      {"roce_v2_gid_index", index < 0 ? nlohmann::json(nullptr) : nlohmann::json(index)},
                      {"gid", gid}, {"netdev", netdev}};
  const std::string what = fmt::format("{}, {}", state.empty() ? "state unknown" : state,
                                       layer.empty() ? "link layer unknown" : layer);
  if (state.find("ACTIVE") == std::string::npos)
    return warn(name, what + ": not usable; links go over TCP",
                "bring the port up: `ip link set <its netdev> up`, check the cable and the "
                "switch port (`rdma link show` says which netdev)",
                data);
  if (layer == "InfiniBand") return ok(name, what, data);
  if (index < 0)
    return warn(name, what + ", no RoCE v2 GID: links go over TCP",
                "give the port's netdev an IP address (`ip addr add ADDRESS/PREFIX dev NETDEV`): "
                "the kernel adds a RoCE v2 GID for each address",
                data);
  return ok(name,
            fmt::format("{}, RoCE v2 GID at index {} ({}{})", what, index, gid,
                        netdev.empty() ? "" : " on " + netdev),
            data);
}

}  // namespace

std::vector<Check> check_rdma(const std::string& root) {
  const std::string dir = root + "/sys/class/infiniband";
  std::vector<std::string> devs;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) devs.push_back(e.path().filename());
  std::sort(devs.begin(), devs.end());
  std::vector<Check> out;
  for (const auto& d : devs)
    for (int p : numbered(dir + "/" + d + "/ports"))
      out.push_back(port_check(d, p, fmt::format("{}/{}/ports/{}", dir, d, p)));
  if (out.empty())
    out.push_back(warn("rdma",
                       fmt::format("no RDMA device ({} is {}): tcp only", "/sys/class/infiniband",
                                   devs.empty() ? "empty or absent" : "without ports"),
                       "none needed to run over TCP; for RDMA install the NIC's driver and "
                       "`apt-get install rdma-core ibverbs-providers` (a test host can make a "
                       "soft-RoCE device: `rdma link add rxe0 type rxe netdev eth0`)",
                       nlohmann::json{{"devices", 0}}));
  return out;
}

// ---------------------------------------------------------------- GPUDirect

namespace {

// "5.15.0-91-generic" -> true for 5.12 and later.
bool kernel_has_dmabuf_rdma(const std::string& release) {
  int major = 0, minor = 0;
  if (std::sscanf(release.c_str(), "%d.%d", &major, &minor) != 2) return false;
  return major > 5 || (major == 5 && minor >= 12);
}

}  // namespace

Check check_gpudirect(const std::string& root, bool have_rdma) {
  const std::string version = read_small_file(root + "/proc/driver/nvidia/version");
  if (version.empty())
    return ok("gpudirect",
              "no GPU (no NVIDIA driver: /proc/driver/nvidia/version is absent); skipped",
              nlohmann::json{{"gpu", false}});
  const std::string first = version.substr(0, version.find('\n'));
  const bool open_module = first.find("Open Kernel Module") != std::string::npos;
  const std::string release = read_small_file(root + "/proc/sys/kernel/osrelease");
  const bool peermem = fs::exists(root + "/sys/module/nvidia_peermem");
  const bool dmabuf = open_module && kernel_has_dmabuf_rdma(release);
  nlohmann::json data{{"gpu", true}, {"driver", first}, {"nvidia_peermem", peermem},
                      {"dma_buf", dmabuf}, {"kernel", release}};
  if (!have_rdma)
    return ok("gpudirect", "NVIDIA driver loaded, but no RDMA port: GPUDirect RDMA does not apply",
              data);
  if (peermem) return ok("gpudirect", "NVIDIA driver loaded, nvidia_peermem loaded", data);
  if (dmabuf)
    return ok("gpudirect",
              fmt::format("NVIDIA open kernel module on kernel {}: dma-buf registration", release),
              data);
  return warn("gpudirect",
              fmt::format("NVIDIA driver loaded, but neither nvidia_peermem nor dma-buf ({}, "
                          "kernel {}): GPU memory cannot be registered with the NIC",
                          open_module ? "open kernel module" : "proprietary kernel module",
                          release.empty() ? "unknown" : release),
              "`modprobe nvidia_peermem`, and `echo nvidia_peermem > "
              "/etc/modules-load.d/nvidia-peermem.conf` to load it at boot",
              data);
}

}  // namespace gsync::cli

// ---------------------------------------------------------------- PCIe path

namespace gsync::cli {

namespace {

// The ACS Control register of a device's config space (the extended
// capability 0x000D, its 16 bits at +6), or -1 when it has none (or the
// file stops short: only root reads past the first 64 bytes).
int acs_control(const std::string& config) {
  auto u32 = [&](size_t at) -> int64_t {
    if (at + 4 > config.size()) return -1;
    return int64_t(uint8_t(config[at])) | int64_t(uint8_t(config[at + 1])) << 8 |
           int64_t(uint8_t(config[at + 2])) << 16 | int64_t(uint8_t(config[at + 3])) << 24;
  };
  size_t at = 0x100;
  for (int hops = 0; hops < 64 && at >= 0x100 && at + 8 <= config.size(); hops++) {
    const int64_t header = u32(at);
    if (header <= 0) return -1;
    if ((header & 0xffff) == 0x000d) return int((u32(at + 4) >> 16) & 0xffff);
    at = size_t((header >> 20) & 0xffc);
  }
  return -1;
}

std::string read_binary(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace

Check check_pcie_path(const std::string& root) {
  if (read_small_file(root + "/proc/driver/nvidia/version").empty())
    return ok("pcie_path", "no GPU (no NVIDIA driver); skipped", nlohmann::json{{"gpu", false}});
  // The IOMMU: translating (on, not pass-through) puts every peer-to-peer
  // and NIC-to-GPU transfer through it.
  const std::string cmdline = " " + read_small_file(root + "/proc/cmdline") + " ";
  const bool translating = (cmdline.find(" intel_iommu=on ") != std::string::npos ||
                            cmdline.find(" amd_iommu=on ") != std::string::npos) &&
                           cmdline.find(" iommu=pt ") == std::string::npos;
  // ACS on the bridges: P2P Request or Completion Redirect (bits 2, 3) send
  // peer-to-peer traffic up to the root complex instead of across the
  // switch the GPUs (and the NIC) share.
  std::vector<std::string> redirecting;
  const std::string pci = root + "/sys/bus/pci/devices";
  std::error_code ec;
  std::vector<std::string> devs;
  for (const auto& e : fs::directory_iterator(pci, ec)) devs.push_back(e.path().filename());
  std::sort(devs.begin(), devs.end());
  for (const auto& d : devs) {
    if (read_small_file(pci + "/" + d + "/class").rfind("0x0604", 0) != 0) continue;  // bridges
    const int ctl = acs_control(read_binary(pci + "/" + d + "/config"));
    if (ctl >= 0 && (ctl & 0x000c)) redirecting.push_back(d);
  }
  nlohmann::json data{{"gpu", true}, {"iommu_translating", translating},
                      {"acs_redirecting_bridges", redirecting}};
  if (!translating && redirecting.empty())
    return ok("pcie_path", "IOMMU off or pass-through; no bridge redirects peer-to-peer (ACS)",
              data);
  std::string found, fix;
  if (translating) {
    found = "the IOMMU translates (intel_iommu=on / amd_iommu=on without iommu=pt)";
    fix = "add iommu=pt to the kernel command line";
  }
  if (!redirecting.empty()) {
    std::string list;
    for (size_t i = 0; i < redirecting.size() && i < 4; i++) list += (i ? ", " : "") + redirecting[i];
    if (redirecting.size() > 4) list += fmt::format(" and {} more", redirecting.size() - 4);
    found += fmt::format("{}{} bridge{} redirect{} peer-to-peer through the root complex (ACS: {})",
                         found.empty() ? "" : "; ", redirecting.size(),
                         redirecting.size() == 1 ? "" : "s", redirecting.size() == 1 ? "s" : "",
                         list);
    fix += fmt::format("{}turn ACS redirect off on them at boot (`setpci -s {} ECAP_ACS+0x6.w=0000`, "
                       "or the BIOS's ACS setting)",
                       fix.empty() ? "" : "; ", redirecting[0]);
  }
  return warn("pcie_path",
              found + ": GPU peer-to-peer and GPUDirect RDMA go the long way, or fail", fix, data);
}

}  // namespace gsync::cli
