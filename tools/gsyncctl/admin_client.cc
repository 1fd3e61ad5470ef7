// SPDX-License-Identifier: Apache-2.0

#include "tools/gsyncctl/admin_client.h"

#include <fmt/format.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace gsync::cli {
namespace {

// A status reply is a few KiB; this bounds memory if the peer is not gsyncd.
constexpr size_t kMaxReplyBytes = 64u << 20;

// Closes the socket on every return path.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

std::string hint_for(int err) {
  switch (err) {
    case ENOENT:
    case ECONNREFUSED:
      return " (is gsyncd running? another socket can be named with --socket or "
             "$GSYNC_ADMIN_SOCKET)";
    case EACCES:
      return " (the socket's mode or its directory does not let this user in)";
    default:
      return "";
  }
}

}  // namespace

bool admin_query(const std::string& socket_path, const std::string& command,
                 std::chrono::milliseconds timeout, std::string* reply, std::string* error) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (socket_path.empty() || socket_path.size() >= sizeof(addr.sun_path)) {
    *error = fmt::format("admin socket path \"{}\" is {} bytes; it must be 1 to {} bytes (unix(7))",
                         socket_path, socket_path.size(), sizeof(addr.sun_path) - 1);
    return false;
  }
  std::memcpy(addr.sun_path, socket_path.data(), socket_path.size());

  Fd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) {
    *error = fmt::format("cannot create a unix socket: {}", std::strerror(errno));
    return false;
  }
  // A blocking unix connect() waits on a full listen backlog for the send
  // timeout (unix_stream_connect uses sock_sndtimeo), so both timeouts also
  // bound the connect.
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(timeout.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>(timeout.count() % 1000 * 1000);
  ::setsockopt(fd.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));

  int rc;
  do {
    rc = ::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr));
  } while (rc < 0 && errno == EINTR);
  if (rc < 0) {
    int err = errno;
    *error =
        fmt::format("cannot connect to gsyncd admin socket {}: {}{}", socket_path,
                    err == EAGAIN ? "timed out (daemon busy)" : std::strerror(err), hint_for(err));
    return false;
  }

  std::string line = command + "\n";
  for (size_t sent = 0; sent < line.size();) {
    // MSG_NOSIGNAL: a daemon that hangs up must give an error, not SIGPIPE.
    ssize_t n = ::send(fd.get(), line.data() + sent, line.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      *error = fmt::format("cannot send \"{}\" to gsyncd admin socket {}: {}", command, socket_path,
                           std::strerror(errno));
      return false;
    }
    sent += static_cast<size_t>(n);
  }

  // No shutdown(SHUT_WR) after the command: the admin server watches for
  // EPOLLRDHUP and may treat a half-close as the client going away.
  auto deadline = std::chrono::steady_clock::now() + timeout;
  reply->clear();
  char buf[16384];
  for (;;) {
    ssize_t n = ::recv(fd.get(), buf, sizeof(buf), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      *error = fmt::format("no complete reply from gsyncd admin socket {} within {} ms",
                           socket_path, timeout.count());
      return false;
    }
    if (n < 0) {
      *error = fmt::format("cannot read the reply from gsyncd admin socket {}: {}", socket_path,
                           std::strerror(errno));
      return false;
    }
    if (n == 0) return true;
    reply->append(buf, static_cast<size_t>(n));
    if (reply->size() > kMaxReplyBytes) {
      *error = fmt::format("reply from {} is larger than {} bytes; is it gsyncd?", socket_path,
                           kMaxReplyBytes);
      return false;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      *error = fmt::format("reply from gsyncd admin socket {} not complete within {} ms",
                           socket_path, timeout.count());
      return false;
    }
  }
}

}  // namespace gsync::cli
