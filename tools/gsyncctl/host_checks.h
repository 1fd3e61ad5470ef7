// SPDX-License-Identifier: Apache-2.0
//
// gsyncctl doctor's checks of this host (docs/operations.md, "Doctor"):
// locked memory against the arenas the daemon registers, memfd, huge pages,
// RDMA ports and their RoCE v2 GIDs, GPUDirect. Each reads /proc and /sys
// under `root` ("" is the real /), so that the unit tests can hand them a
// fake tree (tests/unit/test_doctor_checks.cc).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "tools/gsyncctl/doctor_check.h"

namespace gsync::cli {

constexpr uint64_t kUnlimited = UINT64_MAX;

// The soft "Max locked memory" of a /proc/PID/limits text, in bytes
// (kUnlimited for "unlimited"); false when the line is not there.
bool parse_memlock_limit(const std::string& limits_text, uint64_t* soft);

// What the daemon registers: one session's arena when the client asks for
// no size, and the largest a client may ask for ([limits]).
struct ArenaNeed {
  uint64_t default_arena = 1ull << 30;
  uint64_t max_arena = 64ull << 30;
  bool from_daemon = false;  // false: the built-in defaults (no daemon answered)
};

// The verdict on a limit: fail below one default arena, warn below the
// largest, ok otherwise. whose: "gsyncd (pid 4242)" or "this process";
// pid > 0 puts a prlimit for it in the fix; have_rdma false says that
// nothing is registered until the host has an RDMA port (it still fails:
// the unit sets LimitMEMLOCK=infinity, and a daemon started otherwise
// should match it before the first port appears).
Check judge_memlock(uint64_t limit, const std::string& whose, const ArenaNeed& need, pid_t pid,
                    bool have_rdma = true);

// The daemon's limit from root/proc/PID/limits when pid > 0 and it can be
// read, else this process's own (getrlimit).
Check check_memlock(const std::string& root, pid_t pid, const ArenaNeed& need, bool have_rdma);

// memfd_create, sealing and a shared mapping, as a session's shared memory
// is made (daemon/shm/session.cc).
Check check_memfd();

struct Meminfo {
  long hugepages_total = -1, hugepages_free = -1, hugepage_kib = -1;
};
Meminfo parse_meminfo(const std::string& text);
// The bracketed word of a transparent_hugepage file: "always [madvise]
// never" -> "madvise"; "" when there is none.
std::string thp_mode(const std::string& text);
Check check_hugepages(const std::string& root);

// One check per RDMA port (state, link layer, the first RoCE v2 GID and
// its index), or one warn when there is no device ("tcp only").
std::vector<Check> check_rdma(const std::string& root);

// GPUDirect RDMA where an NVIDIA driver is loaded: nvidia_peermem, or
// dma-buf (the open kernel module on a kernel of 5.12 or later). No driver
// is an ok "no GPU"; have_rdma false an ok that it does not apply.
Check check_gpudirect(const std::string& root, bool have_rdma);

// Where an NVIDIA driver is loaded, the PCIe path between GPUs and the NIC:
// a warn when the IOMMU translates (on without iommu=pt) or a PCI bridge
// has ACS P2P redirect on (read from its config space; root only sees
// it), naming the bridges and the fix. No driver is an ok "no GPU".
Check check_pcie_path(const std::string& root);

// The whole of a small file, "" when it cannot be read; trailing
// whitespace removed.
std::string read_small_file(const std::string& path);

}  // namespace gsync::cli
