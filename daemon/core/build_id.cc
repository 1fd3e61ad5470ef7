// SPDX-License-Identifier: Apache-2.0
#include "daemon/core/build_id.h"

#include <elf.h>
#include <link.h>

#include <cstring>

#include <fmt/format.h>

namespace gsync {

namespace {

// The note's descriptor in one PT_NOTE segment of the main program, or "".
std::string note_in(const dl_phdr_info* info, const ElfW(Phdr) & ph) {
  const char* p = reinterpret_cast<const char*>(info->dlpi_addr + ph.p_vaddr);
  size_t left = ph.p_memsz;
  // Notes are 4-byte aligned: name and descriptor padded to 4 (elf(5)).
  auto pad = [](size_t n) { return (n + 3) & ~size_t{3}; };
  while (left >= sizeof(ElfW(Nhdr))) {
    ElfW(Nhdr) n;
    std::memcpy(&n, p, sizeof n);
    size_t size = sizeof n + pad(n.n_namesz) + pad(n.n_descsz);
    if (size > left) break;
    const char* name = p + sizeof n;
    if (n.n_type == NT_GNU_BUILD_ID && n.n_namesz == 4 && std::memcmp(name, "GNU", 4) == 0) {
      const auto* d = reinterpret_cast<const unsigned char*>(name + pad(n.n_namesz));
      std::string hex;
      for (size_t i = 0; i < n.n_descsz; i++) hex += fmt::format("{:02x}", d[i]);
      return hex;
    }
    p += size;
    left -= size;
  }
  return "";
}

std::string read_build_id() {
  std::string out;
  // The first object dl_iterate_phdr reports is the main program.
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        auto* id = static_cast<std::string*>(data);
        for (int i = 0; i < info->dlpi_phnum && id->empty(); i++)
          if (info->dlpi_phdr[i].p_type == PT_NOTE) *id = note_in(info, info->dlpi_phdr[i]);
        return 1;  // stop after the main program
      },
      &out);
  return out;
}

}  // namespace

const std::string& build_id() {
  static const std::string id = read_build_id();
  return id;
}

}  // namespace gsync
