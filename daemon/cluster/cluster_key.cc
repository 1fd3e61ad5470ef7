// SPDX-License-Identifier: Apache-2.0
#include "daemon/cluster/cluster_key.h"

#include <fcntl.h>
#include <sodium.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

namespace gsync {

namespace {

constexpr size_t kHexChars = 2 * kClusterKeySize;

std::string mode_text(mode_t mode) { return fmt::format("{:04o}", mode & 07777); }

std::string kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a fifo";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
  return "not a regular file";
}

// The file at fd is a key file we may trust: regular, no group or other bit.
Status check_file(int fd, const std::string& path, off_t* size) {
  struct stat st {};
  if (fstat(fd, &st) != 0)
    return {GSYNC_ERR_INVALID,
            fmt::format("cluster key file {}: fstat: {}", path, strerror(errno))};
  if (!S_ISREG(st.st_mode))
    return {GSYNC_ERR_INVALID,
            fmt::format("cluster key file {} is {} (mode {}); the key must be a regular file "
                        "only its owner can read (chmod 600): make one with `gsyncctl keygen "
                        "-o PATH`",
                        path, kind_of(st.st_mode), mode_text(st.st_mode))};
  if ((st.st_mode & 077) != 0)
    return {GSYNC_ERR_PERMISSION,
            fmt::format("cluster key file {} has mode {}: group or others may use it, and "
                        "whoever reads it can join the cluster; run `chmod 600 {}`",
                        path, mode_text(st.st_mode), path)};
  *size = st.st_size;
  return Status::ok();
}

Status parse(const std::string& path, const char* text, size_t len, off_t size, std::string* key) {
  size_t hex = len;
  if (hex > 0 && text[hex - 1] == '\n') hex--;
  unsigned char bin[kClusterKeySize];
  size_t got = 0;
  const char* end = nullptr;
  bool ok = size == static_cast<off_t>(len) && hex == kHexChars &&
            sodium_hex2bin(bin, sizeof bin, text, hex, nullptr, &got, &end) == 0 &&
            got == kClusterKeySize && end == text + hex;
  if (!ok) {
    sodium_memzero(bin, sizeof bin);
    return {GSYNC_ERR_INVALID,
            fmt::format("cluster key file {}: not a key ({} bytes; a key is {} hex characters, "
                        "optionally followed by a newline); make one with `gsyncctl keygen -o "
                        "PATH`",
                        path, size, kHexChars)};
  }
  key->assign(reinterpret_cast<const char*>(bin), sizeof bin);
  sodium_memzero(bin, sizeof bin);
  return Status::ok();
}

}  // namespace

Status load_cluster_key(const std::string& path, std::string* key) {
  if (sodium_init() < 0) return {GSYNC_ERR_INTERNAL, "libsodium failed to initialise"};
  // O_NONBLOCK: a fifo put where the key should be must not hang the start.
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0)
    return {GSYNC_ERR_INVALID, fmt::format("cluster key file {}: {}{}", path, strerror(errno),
                                           errno == ENOENT ? " (make one with `gsyncctl keygen "
                                                             "-o PATH` and copy it to every host)"
                                                           : "")};
  off_t size = 0;
  Status st = check_file(fd, path, &size);
  char buf[kHexChars + 2];
  ssize_t n = st ? read(fd, buf, sizeof buf) : 0;
  int err = errno;
  close(fd);
  if (!st) return st;
  if (n < 0)
    return {GSYNC_ERR_INVALID, fmt::format("cluster key file {}: read: {}", path, strerror(err))};
  st = parse(path, buf, static_cast<size_t>(n), size, key);
  sodium_memzero(buf, sizeof buf);
  return st;
}

Status create_cluster_key(const std::string& path) {
  if (sodium_init() < 0) return {GSYNC_ERR_INTERNAL, "libsodium failed to initialise"};
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    if (errno == EEXIST)
      return {GSYNC_ERR_INVALID,
              fmt::format("{} exists; a key is never overwritten (every daemon of the cluster "
                          "must hold the same one): remove it first to make a new one",
                          path)};
    return {GSYNC_ERR_INVALID, fmt::format("cannot create {}: {}", path, strerror(errno))};
  }
  unsigned char bin[kClusterKeySize];
  char hex[kHexChars + 1];
  randombytes_buf(bin, sizeof bin);
  sodium_bin2hex(hex, sizeof hex, bin, sizeof bin);
  hex[kHexChars] = '\n';
  // The umask may only take bits away, but make the mode exact anyway.
  bool ok =
      fchmod(fd, 0600) == 0 && write(fd, hex, sizeof hex) == ssize_t(sizeof hex) && fsync(fd) == 0;
  int err = errno;
  sodium_memzero(bin, sizeof bin);
  sodium_memzero(hex, sizeof hex);
  if (close(fd) != 0 && ok) {
    ok = false;
    err = errno;
  }
  if (!ok) {
    unlink(path.c_str());
    return {GSYNC_ERR_INTERNAL, fmt::format("writing {}: {}", path, strerror(err))};
  }
  return Status::ok();
}

}  // namespace gsync
