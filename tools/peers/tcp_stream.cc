// SPDX-License-Identifier: Apache-2.0
//
// The ceiling for any TCP design between two host slots: one plain TCP
// stream, blocking sockets, 1 MiB writes (what iperf3 does by default, as in
// the peers baseline), no application work per byte.
//
//   tcp-stream server --bind ADDR [--port P] [--timeout S]
//       Prints {"port": P} once listening (P is the kernel's pick for port 0),
//       takes one connection, reads until EOF, prints the bytes received.
//   tcp-stream client --connect ADDR --port P [--seconds S]
//       Writes for S seconds, half-closes, waits for the server's close so
//       that every byte counted has been read, prints
//       {"peer": "tcp_stream", "gbps": X, "bytes": B, "seconds": T}  (GB = 1e9 B).

#include <getopt.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

constexpr size_t kWriteBytes = size_t{1} << 20;

struct Options {
  std::string mode;
  std::string address;
  int port = 0;
  double seconds = 3.0;
  int timeout_s = 120;
};

void usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s server --bind ADDR [--port P] [--timeout S]\n"
               "       %s client --connect ADDR --port P [--seconds S] [--timeout S]\n",
               argv0, argv0);
}

bool parse_options(int argc, char** argv, Options* o) {
  if (argc < 2) return false;
  o->mode = argv[1];
  if (o->mode != "server" && o->mode != "client") return false;
  enum { kBind = 1, kConnect, kPort, kSeconds, kTimeout };
  static const option kLong[] = {
      {"bind", required_argument, nullptr, kBind},
      {"connect", required_argument, nullptr, kConnect},
      {"port", required_argument, nullptr, kPort},
      {"seconds", required_argument, nullptr, kSeconds},
      {"timeout", required_argument, nullptr, kTimeout},
      {nullptr, 0, nullptr, 0},
  };
  optind = 2;
  int c;
  while ((c = getopt_long(argc, argv, "", kLong, nullptr)) != -1) {
    switch (c) {
      case kBind:
      case kConnect:
        o->address = optarg;
        break;
      case kPort:
        o->port = std::atoi(optarg);
        break;
      case kSeconds:
        o->seconds = std::atof(optarg);
        break;
      case kTimeout:
        o->timeout_s = std::atoi(optarg);
        break;
      default:
        return false;
    }
  }
  if (optind != argc || o->address.empty() || o->port < 0 || o->port > 65535) return false;
  if (o->mode == "client" && (o->port == 0 || !(o->seconds > 0))) return false;
  return o->timeout_s > 0;
}

// A numeric address (IPv4 or IPv6) and port; no name lookups.
bool resolve(const Options& o, sockaddr_storage* sa, socklen_t* len) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string port = std::to_string(o.port);
  int rc = getaddrinfo(o.address.c_str(), port.c_str(), &hints, &res);
  if (rc != 0) {
    std::fprintf(stderr, "tcp-stream: address %s: %s\n", o.address.c_str(), gai_strerror(rc));
    return false;
  }
  std::memcpy(sa, res->ai_addr, res->ai_addrlen);
  *len = res->ai_addrlen;
  freeaddrinfo(res);
  return true;
}

int serve(const Options& o) {
  sockaddr_storage sa{};
  socklen_t len = 0;
  if (!resolve(o, &sa, &len)) return 1;
  int ls = socket(sa.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  if (ls < 0 || setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
      bind(ls, reinterpret_cast<sockaddr*>(&sa), len) != 0 || listen(ls, 1) != 0) {
    std::fprintf(stderr, "tcp-stream server: bind %s port %d: %s\n", o.address.c_str(), o.port,
                 std::strerror(errno));
    return 1;
  }
  len = sizeof sa;
  getsockname(ls, reinterpret_cast<sockaddr*>(&sa), &len);
  const int port = ntohs(sa.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&sa)->sin6_port
                                                  : reinterpret_cast<sockaddr_in*>(&sa)->sin_port);
  std::printf("{\"port\": %d}\n", port);
  std::fflush(stdout);

  int s = accept4(ls, nullptr, nullptr, SOCK_CLOEXEC);
  if (s < 0) {
    std::fprintf(stderr, "tcp-stream server: accept on %s:%d: %s\n", o.address.c_str(), port,
                 std::strerror(errno));
    return 1;
  }
  close(ls);
  std::vector<char> buf(kWriteBytes);
  uint64_t total = 0;
  ssize_t n;
  while ((n = read(s, buf.data(), buf.size())) > 0) total += static_cast<uint64_t>(n);
  if (n < 0) {
    std::fprintf(stderr, "tcp-stream server: read: %s\n", std::strerror(errno));
    return 1;
  }
  close(s);  // the client's final read returns 0: every byte has been consumed
  std::printf("{\"received_bytes\": %llu}\n", static_cast<unsigned long long>(total));
  return 0;
}

int stream(const Options& o) {
  sockaddr_storage sa{};
  socklen_t len = 0;
  if (!resolve(o, &sa, &len)) return 1;
  int s = socket(sa.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0 || connect(s, reinterpret_cast<sockaddr*>(&sa), len) != 0) {
    std::fprintf(stderr, "tcp-stream client: connect %s port %d: %s\n", o.address.c_str(), o.port,
                 std::strerror(errno));
    return 1;
  }
  std::vector<char> buf(kWriteBytes, 'g');
  uint64_t total = 0;
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  const auto stop =
      t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.seconds));
  while (Clock::now() < stop) {
    size_t off = 0;
    while (off < buf.size()) {
      ssize_t n = send(s, buf.data() + off, buf.size() - off, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        std::fprintf(stderr, "tcp-stream client: send to %s:%d after %llu bytes: %s\n",
                     o.address.c_str(), o.port, static_cast<unsigned long long>(total),
                     std::strerror(errno));
        return 1;
      }
      off += static_cast<size_t>(n);
      total += static_cast<uint64_t>(n);
    }
  }
  shutdown(s, SHUT_WR);
  char c;
  while (read(s, &c, 1) > 0) {
  }
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  close(s);
  std::printf("{\"peer\": \"tcp_stream\", \"gbps\": %.4f, \"bytes\": %llu, \"seconds\": %.4f}\n",
              static_cast<double>(total) / secs / 1e9, static_cast<unsigned long long>(total),
              secs);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!parse_options(argc, argv, &o)) {
    usage(argv[0]);
    return 2;
  }
  // Kill switch: a server nobody connects to, or a stalled peer, ends here.
  alarm(static_cast<unsigned>(o.timeout_s));
  return o.mode == "server" ? serve(o) : stream(o);
}
