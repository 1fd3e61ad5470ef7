// SPDX-License-Identifier: Apache-2.0
//
// gsyncctl doctor's checks on what they read and on the daemon's reports.
// The host checks read /proc and /sys under a root; here that root is a
// FAKE tree of those files made in a temporary directory, because this
// machine has no RDMA NIC, no GPU and one memlock limit: the files are
// written as the kernel writes them (sysfs of an mlx5 port with RoCE
// GIDs, /proc/driver/nvidia/version, /proc/PID/limits), the checks are
// the real code. The peer checks are judged on report rows shaped as the
// daemon's `peers` and `probe` replies.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "tools/gsyncctl/doctor.h"
#include "tools/gsyncctl/host_checks.h"
#include "tools/gsyncctl/peer_checks.h"

namespace gsync::cli {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// A fake /proc and /sys: files written under a temporary root.
class FakeTree {
 public:
  FakeTree() {
    std::string t = (fs::temp_directory_path() / "gsync-fake-sysfs.XXXXXX").string();
    root_ = mkdtemp(t.data());
  }
  ~FakeTree() { fs::remove_all(root_); }
  void write(const std::string& path, const std::string& text) const {
    fs::create_directories(fs::path(root_ + path).parent_path());
    std::ofstream(root_ + path) << text;
  }
  const std::string& root() const { return root_; }

 private:
  std::string root_;
};

constexpr const char* kLimits =
    "Limit                     Soft Limit           Hard Limit           Units     \n"
    "Max cpu time              unlimited            unlimited            seconds   \n"
    "Max locked memory         8388608              16777216             bytes     \n"
    "Max address space         unlimited            unlimited            bytes     \n";

TEST(DoctorMemlock, ReadsTheSoftLimit) {
  uint64_t v = 0;
  ASSERT_TRUE(parse_memlock_limit(kLimits, &v));
  EXPECT_EQ(v, 8388608u);
  ASSERT_TRUE(parse_memlock_limit("Max locked memory         unlimited  unlimited  bytes\n", &v));
  EXPECT_EQ(v, kUnlimited);
  EXPECT_FALSE(parse_memlock_limit("Max cpu time unlimited unlimited seconds\n", &v));
  EXPECT_FALSE(parse_memlock_limit("Max locked memory  lots  lots  bytes\n", &v));
}

TEST(DoctorMemlock, FailsBelowOneArenaWarnsBelowTheLargest) {
  ArenaNeed need{64ull << 20, 1ull << 30, true};
  Check f = judge_memlock(32ull << 20, "gsyncd (pid 77)", need, 77);
  EXPECT_EQ(f.level, Level::kFail);
  EXPECT_NE(f.found.find("gsyncd (pid 77) may lock 32.0 MiB"), std::string::npos) << f.found;
  EXPECT_NE(f.fix.find("prlimit --pid 77 --memlock=unlimited:unlimited"), std::string::npos);
  EXPECT_NE(f.fix.find("LimitMEMLOCK=infinity"), std::string::npos);
  Check w = judge_memlock(256ull << 20, "gsyncd (pid 77)", need, 77);
  EXPECT_EQ(w.level, Level::kWarn);
  EXPECT_NE(w.fix.find("max_arena to 256.0 MiB at most"), std::string::npos) << w.fix;
  EXPECT_EQ(judge_memlock(1ull << 30, "x", need, 0).level, Level::kOk);
  EXPECT_EQ(judge_memlock(kUnlimited, "x", need, 0).level, Level::kOk);
  // No pid: no prlimit to suggest.
  EXPECT_EQ(judge_memlock(1, "this process", need, 0).fix.find("prlimit"), std::string::npos);
}

TEST(DoctorMemlock, ReadsTheDaemonsLimitsFile) {
  FakeTree t;
  t.write("/proc/4242/limits", kLimits);
  Check c = check_memlock(t.root(), 4242, ArenaNeed{1ull << 30, 64ull << 30, true}, true);
  EXPECT_EQ(c.level, Level::kFail);
  EXPECT_NE(c.found.find("gsyncd (pid 4242) may lock 8.0 MiB"), std::string::npos) << c.found;
  EXPECT_EQ(c.data["limit_bytes"], 8388608u);
  // Unreadable: this process's own limit, said so.
  Check self = check_memlock(t.root(), 4243, ArenaNeed{}, true);
  EXPECT_NE(self.found.find("this process (gsyncd's /proc/4243/limits cannot be read)"),
            std::string::npos)
      << self.found;
}

TEST(DoctorMemfd, WorksHere) {
  Check c = check_memfd();
  EXPECT_EQ(c.level, Level::kOk) << c.found;
}

TEST(DoctorHugepages, ReadsMeminfoAndTheModes) {
  Meminfo m = parse_meminfo("MemTotal: 100 kB\nHugePages_Total:      16\nHugePages_Free:       "
                            "12\nHugepagesize:       2048 kB\n");
  EXPECT_EQ(m.hugepages_total, 16);
  EXPECT_EQ(m.hugepages_free, 12);
  EXPECT_EQ(m.hugepage_kib, 2048);
  EXPECT_EQ(thp_mode("always [madvise] never"), "madvise");
  EXPECT_EQ(thp_mode("always within_size advise [never] deny force"), "never");
  EXPECT_EQ(thp_mode("garbage"), "");

  FakeTree t;
  t.write("/proc/meminfo", "HugePages_Total: 0\nHugePages_Free: 0\nHugepagesize: 2048 kB\n");
  t.write("/sys/kernel/mm/transparent_hugepage/enabled", "always madvise [never]\n");
  t.write("/sys/kernel/mm/transparent_hugepage/shmem_enabled", "always within_size [advise] never");
  Check never = check_hugepages(t.root());
  EXPECT_EQ(never.level, Level::kWarn) << never.found;
  EXPECT_NE(never.fix.find("echo madvise > /sys/kernel/mm/transparent_hugepage/enabled"),
            std::string::npos);
  EXPECT_NE(never.found.find("shmem advise (the client arenas may get them)"), std::string::npos)
      << never.found;
  t.write("/sys/kernel/mm/transparent_hugepage/enabled", "always [madvise] never\n");
  EXPECT_EQ(check_hugepages(t.root()).level, Level::kOk);
  FakeTree bare;  // a kernel without THP
  Check none = check_hugepages(bare.root());
  EXPECT_EQ(none.level, Level::kOk);
  EXPECT_NE(none.found.find("no transparent huge pages"), std::string::npos) << none.found;
}

// An mlx5-like device, as sysfs shows it: port 1 active on Ethernet with a
// RoCE v1 and a v2 GID of 10.0.0.1 (and an unused, zero v2 entry first),
// port 2 down.
void fake_mlx5(const FakeTree& t) {
  const std::string p1 = "/sys/class/infiniband/mlx5_0/ports/1";
  t.write(p1 + "/state", "4: ACTIVE\n");
  t.write(p1 + "/link_layer", "Ethernet\n");
  t.write(p1 + "/gid_attrs/types/0", "IB/RoCE v1\n");
  t.write(p1 + "/gids/0", "fe80:0000:0000:0000:0a00:27ff:fe00:0001\n");
  t.write(p1 + "/gid_attrs/types/1", "RoCE v2\n");
  t.write(p1 + "/gids/1", "0000:0000:0000:0000:0000:0000:0000:0000\n");
  t.write(p1 + "/gid_attrs/types/3", "RoCE v2\n");
  t.write(p1 + "/gids/3", "0000:0000:0000:0000:0000:ffff:0a00:0001\n");
  t.write(p1 + "/gid_attrs/ndevs/3", "ens1f0\n");
  const std::string p2 = "/sys/class/infiniband/mlx5_0/ports/2";
  t.write(p2 + "/state", "1: DOWN\n");
  t.write(p2 + "/link_layer", "Ethernet\n");
}

TEST(DoctorRdma, NoDeviceIsTcpOnlyAWarnNotAFail) {
  FakeTree t;
  std::vector<Check> c = check_rdma(t.root());
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].level, Level::kWarn);
  EXPECT_NE(c[0].found.find("tcp only"), std::string::npos) << c[0].found;
}

TEST(DoctorRdma, EachPortWithItsStateAndRoceV2Gid) {
  FakeTree t;
  fake_mlx5(t);
  std::vector<Check> c = check_rdma(t.root());
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0].name, "rdma mlx5_0 port 1");
  EXPECT_EQ(c[0].level, Level::kOk) << c[0].found;
  EXPECT_NE(c[0].found.find("RoCE v2 GID at index 3 (::ffff:10.0.0.1 on ens1f0)"),
            std::string::npos)
      << c[0].found;
  EXPECT_EQ(c[0].data["roce_v2_gid_index"], 3);
  EXPECT_EQ(c[1].name, "rdma mlx5_0 port 2");
  EXPECT_EQ(c[1].level, Level::kWarn);
  EXPECT_NE(c[1].found.find("1: DOWN"), std::string::npos) << c[1].found;
}

TEST(DoctorRdma, AnActiveEthernetPortWithoutRoceV2IsAWarn) {
  FakeTree t;
  const std::string p = "/sys/class/infiniband/rxe0/ports/1";
  t.write(p + "/state", "4: ACTIVE");
  t.write(p + "/link_layer", "Ethernet");
  t.write(p + "/gid_attrs/types/0", "IB/RoCE v1");
  t.write(p + "/gids/0", "fe80:0000:0000:0000:0a00:27ff:fe00:0001");
  std::vector<Check> c = check_rdma(t.root());
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].level, Level::kWarn);
  EXPECT_NE(c[0].fix.find("ip addr add"), std::string::npos) << c[0].fix;
  // InfiniBand routes by LID: no RoCE GID needed.
  FakeTree ib;
  ib.write("/sys/class/infiniband/mlx5_1/ports/1/state", "4: ACTIVE");
  ib.write("/sys/class/infiniband/mlx5_1/ports/1/link_layer", "InfiniBand");
  EXPECT_EQ(check_rdma(ib.root())[0].level, Level::kOk);
}

TEST(DoctorGpudirect, NoDriverIsNoGpu) {
  FakeTree t;
  Check c = check_gpudirect(t.root(), true);
  EXPECT_EQ(c.level, Level::kOk);
  EXPECT_NE(c.found.find("no GPU"), std::string::npos) << c.found;
}

TEST(DoctorGpudirect, PeermemOrDmabufOrTheFix) {
  FakeTree t;
  t.write("/proc/driver/nvidia/version",
          "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.129.03  Thu Oct 19 18:56:32 UTC "
          "2023\nGCC version:  gcc version 12.2.0\n");
  t.write("/proc/sys/kernel/osrelease", "6.1.0-18-amd64\n");
  Check missing = check_gpudirect(t.root(), true);
  EXPECT_EQ(missing.level, Level::kWarn) << missing.found;
  EXPECT_NE(missing.fix.find("modprobe nvidia_peermem"), std::string::npos);
  EXPECT_EQ(check_gpudirect(t.root(), false).level, Level::kOk);  // nothing to register with
  t.write("/sys/module/nvidia_peermem/refcnt", "0\n");
  EXPECT_EQ(check_gpudirect(t.root(), true).level, Level::kOk);

  FakeTree open;
  open.write("/proc/driver/nvidia/version",
             "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.54.15\n");
  open.write("/proc/sys/kernel/osrelease", "6.1.0-18-amd64\n");
  Check dmabuf = check_gpudirect(open.root(), true);
  EXPECT_EQ(dmabuf.level, Level::kOk);
  EXPECT_NE(dmabuf.found.find("dma-buf"), std::string::npos) << dmabuf.found;
  open.write("/proc/sys/kernel/osrelease", "5.10.0-28-amd64\n");  // before dma-buf in RDMA
  EXPECT_EQ(check_gpudirect(open.root(), true).level, Level::kWarn);
}

// A bridge's config space: 0x100 bytes of header, then an extended
// capability list of AER (0x0001) followed by ACS (0x000D) with `ctl`.
std::string bridge_config(uint16_t ctl) {
  std::string c(0x200, '\0');
  auto put32 = [&](size_t at, uint32_t v) {
    for (int i = 0; i < 4; i++) c[at + size_t(i)] = char((v >> (8 * i)) & 0xff);
  };
  put32(0x100, 0x0001 | (1u << 16) | (0x140u << 20));  // AER, next at 0x140
  put32(0x140, 0x000d | (1u << 16));                    // ACS, last
  put32(0x144, 0x005f | (uint32_t(ctl) << 16));         // capability, control
  return c;
}

TEST(DoctorPciePath, IommuAndAcsRedirectOnTheGpusPath) {
  FakeTree none;
  EXPECT_EQ(check_pcie_path(none.root()).level, Level::kOk);  // no GPU: skipped
  EXPECT_NE(check_pcie_path(none.root()).found.find("no GPU"), std::string::npos);

  FakeTree t;
  t.write("/proc/driver/nvidia/version", "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550\n");
  t.write("/proc/cmdline", "BOOT_IMAGE=/vmlinuz root=/dev/sda1 quiet\n");
  t.write("/sys/bus/pci/devices/0000:00:01.0/class", "0x060400\n");
  t.write("/sys/bus/pci/devices/0000:00:01.0/config", bridge_config(0x0001));  // SrcValid only
  t.write("/sys/bus/pci/devices/0000:65:00.0/class", "0x030200\n");           // the GPU
  t.write("/sys/bus/pci/devices/0000:65:00.0/config", bridge_config(0x000c));  // not a bridge
  Check clean = check_pcie_path(t.root());
  EXPECT_EQ(clean.level, Level::kOk) << clean.found;

  t.write("/sys/bus/pci/devices/0000:40:02.0/class", "0x060400\n");
  t.write("/sys/bus/pci/devices/0000:40:02.0/config", bridge_config(0x001d));  // RR on
  Check acs = check_pcie_path(t.root());
  EXPECT_EQ(acs.level, Level::kWarn) << acs.found;
  EXPECT_NE(acs.found.find("1 bridge redirects peer-to-peer through the root complex (ACS: "
                           "0000:40:02.0)"),
            std::string::npos)
      << acs.found;
  EXPECT_NE(acs.fix.find("setpci -s 0000:40:02.0 ECAP_ACS+0x6.w=0000"), std::string::npos)
      << acs.fix;

  t.write("/sys/bus/pci/devices/0000:40:02.0/config", bridge_config(0x0001));
  t.write("/proc/cmdline", "root=/dev/sda1 intel_iommu=on\n");
  Check iommu = check_pcie_path(t.root());
  EXPECT_EQ(iommu.level, Level::kWarn) << iommu.found;
  EXPECT_NE(iommu.fix.find("iommu=pt"), std::string::npos) << iommu.fix;
  t.write("/proc/cmdline", "root=/dev/sda1 intel_iommu=on iommu=pt\n");
  EXPECT_EQ(check_pcie_path(t.root()).level, Level::kOk);
  // A config space cut at 64 bytes (not root): no ACS seen, no warning.
  t.write("/sys/bus/pci/devices/0000:40:02.0/config", bridge_config(0x000c).substr(0, 64));
  EXPECT_EQ(check_pcie_path(t.root()).level, Level::kOk);
}

TEST(DoctorLink, InterfaceSpeedFromSysfs) {
  FakeTree t;
  t.write("/sys/class/net/eth0/speed", "25000\n");
  t.write("/sys/class/net/veth1/speed", "-1\n");
  EXPECT_EQ(interface_speed_mbps(t.root(), "eth0"), 25000);
  EXPECT_EQ(interface_speed_mbps(t.root(), "veth1"), -1);
  EXPECT_EQ(interface_speed_mbps(t.root(), "lo"), -1);
  EXPECT_EQ(interface_speed_mbps(t.root(), "../eth0"), -1);
  EXPECT_EQ(interface_speed_mbps(t.root(), ""), -1);
}

TEST(DoctorPeers, SplitsAddresses) {
  std::string h, p;
  ASSERT_TRUE(split_address("10.77.1.2:7700", &h, &p));
  EXPECT_EQ(h, "10.77.1.2");
  EXPECT_EQ(p, "7700");
  ASSERT_TRUE(split_address("[fd00::2]:7701", &h, &p));
  EXPECT_EQ(h, "fd00::2");
  EXPECT_EQ(p, "7701");
  EXPECT_FALSE(split_address("10.77.1.2", &h, &p));
  EXPECT_FALSE(split_address("10.77.1.2:", &h, &p));
}

json peer_row(const std::string& state) {
  return {{"host", "h2"}, {"address", "10.77.1.2:7700"}, {"state", state},
          {"transport", "tcp"}, {"streams", 2}, {"last_error", state == "up" ? "" : "refused"},
          {"version", "0.1.0"}, {"build_id", "abc"}};
}

TEST(DoctorPeers, ReachNeedsATcpConnectionAndAnUpLink) {
  TcpConnect good{true, 0.2, ""}, refused{false, 0.1, "Connection refused"};
  EXPECT_EQ(judge_reach(peer_row("up"), good).level, Level::kOk);
  Check r = judge_reach(peer_row("down"), refused);
  EXPECT_EQ(r.level, Level::kFail);
  EXPECT_EQ(r.name, "reach h2");
  EXPECT_NE(r.found.find("10.77.1.2:7700 takes no TCP connection from here: Connection refused"),
            std::string::npos)
      << r.found;
  EXPECT_NE(r.fix.find("nc -zv 10.77.1.2 7700"), std::string::npos) << r.fix;
  EXPECT_EQ(judge_reach(peer_row("connecting"), good).level, Level::kFail);
}

TEST(DoctorPeers, AnotherBuildIsAWarn) {
  json self{{"version", "0.1.0"}, {"build_id", "abc"}};
  EXPECT_EQ(judge_version(self, peer_row("up")).level, Level::kOk);
  json other = peer_row("up");
  other["build_id"] = "def";
  Check w = judge_version(self, other);
  EXPECT_EQ(w.level, Level::kWarn);
  EXPECT_NE(w.found.find("h2 runs 0.1.0 build def, this daemon 0.1.0 build abc"),
            std::string::npos)
      << w.found;
  json unknown = peer_row("down");
  unknown["version"] = nullptr;
  unknown["last_error"] = "build id mismatch: h2 runs build '0.2.0', this daemon h1 runs '0.1.0'";
  Check refused = judge_version(self, unknown);
  EXPECT_EQ(refused.level, Level::kWarn);
  EXPECT_NE(refused.found.find("its link was refused: build id mismatch"), std::string::npos);
}

json probe_row(bool ok) {
  json j{{"host", "h2"}, {"address", "10.77.1.2:7700"}, {"ok", ok}, {"pings", 16},
         {"bytes", 4 << 20}, {"error", ok ? json(nullptr) : json("h2 did not answer within 5000 ms: 3 of 16 pings answered")}};
  if (ok) {
    j["rtt_us"] = {{"min", 50.0}, {"median", 60.0}, {"max", 90.0}};
    j["clock_offset_us"] = -1500.0;
    j["clock_uncertainty_us"] = 25.0;
    j["seconds"] = 0.004;
    j["gbit_per_s"] = 8.39;
  }
  return j;
}

TEST(DoctorPeers, ClockAndLinkFromTheProbe) {
  Check clock = judge_clock(probe_row(true));
  EXPECT_EQ(clock.level, Level::kOk);
  EXPECT_NE(clock.found.find("h2's clock is 1.500 ms behind this host's (± 25.0 us"),
            std::string::npos)
      << clock.found;
  json skewed = probe_row(true);
  skewed["clock_offset_us"] = 250000.0;
  EXPECT_EQ(judge_clock(skewed).level, Level::kWarn);
  EXPECT_NE(judge_clock(skewed).fix.find("chrony"), std::string::npos);

  Check link = judge_link(probe_row(true), "eth0", 10000);
  EXPECT_EQ(link.level, Level::kOk);
  EXPECT_NE(link.found.find("8.39 Gbit/s on the control stream; eth0 routes to it at 10 Gbit/s"),
            std::string::npos)
      << link.found;
  EXPECT_EQ(judge_link(probe_row(true), "eth0", 1000000).level, Level::kWarn);  // under 1%
  EXPECT_NE(judge_link(probe_row(true), "lo", -1).found.find("its speed is unknown"),
            std::string::npos);
  Check silent = judge_link(probe_row(false), "", -1);
  EXPECT_EQ(silent.level, Level::kFail);
  EXPECT_NE(silent.found.find("h2 did not answer within 5000 ms"), std::string::npos);
  EXPECT_EQ(judge_clock(probe_row(false)).level, Level::kWarn);
}

TEST(DoctorOutput, OneLinePerCheckTheFixUnderWarnsAndFails) {
  std::vector<Check> c = {ok("memfd", "works"), warn("rdma", "none: tcp only", "install it"),
                          fail("reach h2", "refused\x1b[31m", "start it")};
  EXPECT_EQ(render_doctor(c),
            "ok    memfd: works\n"
            "warn  rdma: none: tcp only\n"
            "      fix: install it\n"
            "fail  reach h2: refused?[31m\n"
            "      fix: start it\n"
            "doctor: 1 ok, 1 warn, 1 fail\n");
  EXPECT_EQ(doctor_exit_status(c), 1);
  c.pop_back();
  EXPECT_EQ(doctor_exit_status(c), 0);  // warns do not fail
  json j = doctor_json(c);
  EXPECT_EQ(j["ok"], 1);
  EXPECT_EQ(j["warn"], 1);
  EXPECT_EQ(j["fail"], 0);
  EXPECT_EQ(j["checks"][1]["check"], "rdma");
  EXPECT_EQ(j["checks"][1]["level"], "warn");
  EXPECT_EQ(j["checks"][0]["fix"], nullptr);
}

}  // namespace
}  // namespace gsync::cli
