// SPDX-License-Identifier: Apache-2.0
#include "daemon/core/unix_socket.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

namespace gsync {

int listen_unix(const std::string& path, int type, unsigned mode, Status* err) {
  sockaddr_un addr{};
  if (path.empty() || path.size() >= sizeof addr.sun_path) {
    *err = Status(GSYNC_ERR_INVALID,
                  fmt::format("socket path '{}' must have 1 to {} bytes", path, sizeof addr.sun_path - 1));
    return -1;
  }
  struct stat st{};
  if (lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      *err = Status(GSYNC_ERR_INVALID,
                    fmt::format("{} exists and is not a socket; not replacing it", path));
      return -1;
    }
    // A live daemon on it would answer; a stale file from a crash would not.
    int probe = socket(AF_UNIX, type | SOCK_CLOEXEC, 0);
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, path.c_str(), path.size());
    bool live = connect(probe, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
    close(probe);
    if (live) {
      *err = Status(GSYNC_ERR_INVALID,
                    fmt::format("{} is in use by another running daemon", path));
      return -1;
    }
    unlink(path.c_str());
  }
  int fd = socket(AF_UNIX, type | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size());
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      listen(fd, 128) != 0) {
    *err = Status(GSYNC_ERR_INVALID, fmt::format("listening on {}: {}", path, strerror(errno)));
    if (fd >= 0) close(fd);
    return -1;
  }
  if (chmod(path.c_str(), mode) != 0) {
    *err = Status(GSYNC_ERR_INVALID, fmt::format("chmod {:o} {}: {}", mode, path, strerror(errno)));
    close(fd);
    return -1;
  }
  return fd;
}

}  // namespace gsync
