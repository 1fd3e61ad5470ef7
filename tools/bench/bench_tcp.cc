// SPDX-License-Identifier: Apache-2.0
//
// bench_tcp: how fast the TCP provider moves large writes between two
// contexts in one process (two threads, loopback), over 1, 2 and 4 streams,
// next to a plain blocking TCP socket measured in the same run: the
// transport's overhead is the gap between the two. Not a test; prints a
// table in the spirit of nccl-tests (size, time, algbw).
//
//   bench_tcp [seconds per row = 2] [write MiB = 64] [writes in flight = 2]
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <random>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "daemon/transport/transport.h"

namespace {

using Clock = std::chrono::steady_clock;
using gsync::Status;
namespace tr = gsync::transport;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

uint16_t free_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

// A plain blocking socket pair over loopback: one thread sends size-byte
// chunks for `seconds`, the other receives into one buffer. The reference
// line for what one TCP stream can do on this machine right now.
double plain_tcp(double seconds, uint64_t size, int bufsize) {
  int lfd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bufsize > 0) {
    setsockopt(lfd, SOL_SOCKET, SO_SNDBUF, &bufsize, sizeof bufsize);
    setsockopt(lfd, SOL_SOCKET, SO_RCVBUF, &bufsize, sizeof bufsize);
  }
  bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  getsockname(lfd, reinterpret_cast<sockaddr*>(&a), &len);
  listen(lfd, 1);
  std::vector<uint8_t> src(size, 0x5a), dst(size);
  uint64_t received = 0;
  Clock::time_point first{}, last{};
  std::thread rx([&] {
    int fd = accept(lfd, nullptr, nullptr);
    for (;;) {
      ssize_t n = recv(fd, dst.data(), dst.size(), 0);
      if (n <= 0) break;
      if (received == 0) first = Clock::now();
      received += static_cast<uint64_t>(n);
    }
    last = Clock::now();
    close(fd);
  });
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (bufsize > 0) {
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bufsize, sizeof bufsize);
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bufsize, sizeof bufsize);
  }
  connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  auto t0 = Clock::now();
  while (seconds_since(t0) < seconds) {
    uint64_t off = 0;
    while (off < size) {
      ssize_t n = send(fd, src.data() + off, size - off, 0);
      if (n <= 0) break;
      off += static_cast<uint64_t>(n);
    }
  }
  close(fd);
  rx.join();
  close(lfd);
  double t = std::chrono::duration<double>(last - first).count();
  return t > 0 ? static_cast<double>(received) / t / 1e9 : 0;
}

struct Row {
  uint64_t writes = 0;
  uint64_t bytes = 0;
  double seconds = 0;
  bool ok = false;
};

// Drives ctx on this thread until done() says so.
template <typename Done>
void drive(tr::Context& ctx, Done done) {
  pollfd p{ctx.event_fd(), POLLIN, 0};
  while (!done()) {
    ::poll(&p, 1, 10);
    ctx.poll();
  }
}

// Two TCP contexts on loopback, a (host 0) and b (host 1), with this many
// streams between them; false, said on stderr, when one cannot be made.
bool make_contexts(int streams, std::unique_ptr<tr::Context>* a, std::unique_ptr<tr::Context>* b) {
  tr::ContextOptions base;
  base.identity = {"bench", 1, "bench"};
  base.hosts = {{"a", "127.0.0.1", free_port(), ""}, {"b", "127.0.0.1", free_port(), ""}};
  base.streams = streams;
  // A context refuses to start without the cluster key its handshake
  // proves (docs/security.md): one of random bytes for this run.
  base.cluster_key.resize(tr::kClusterKeyBytes);
  std::random_device rd;
  for (char& c : base.cluster_key) c = static_cast<char>(rd());
  tr::ContextOptions oa = base, ob = base;
  oa.self = 0;
  ob.self = 1;
  Status st;
  *a = tr::make_tcp_context(oa, &st);
  if (!*a) {
    fmt::print(stderr, "context a: {}\n", st.message());
    return false;
  }
  *b = tr::make_tcp_context(ob, &st);
  if (!*b) {
    fmt::print(stderr, "context b: {}\n", st.message());
    return false;
  }
  return true;
}

Row transport_run(int streams, double seconds, uint64_t size, int window) {
  std::unique_ptr<tr::Context> a, b;
  if (!make_contexts(streams, &a, &b)) return {};
  std::vector<uint8_t> src(size), dst(size);
  for (size_t i = 0; i < size; i++) src[i] = static_cast<uint8_t>(i * 7 + 3);
  tr::Region region = b->register_region(dst.data(), dst.size());

  std::atomic<bool> sender_done{false};
  std::atomic<uint64_t> landed{0};
  Row row;
  std::thread tb([&] {
    tr::Handlers h;
    h.on_write = [&](int, uint32_t, uint64_t, uint64_t len, uint64_t) { landed += len; };
    Status s = b->start(std::move(h));
    if (!s) fmt::print(stderr, "start b: {}\n", s.message());
    drive(*b, [&] { return sender_done.load(); });
    b.reset();
  });
  std::thread ta([&] {
    bool up = false, failed = false;
    int in_flight = 0;
    uint64_t cookie = 0;
    Clock::time_point t0{};
    bool stopping = false;
    tr::Handlers h;
    h.on_peer_up = [&](int) { up = true; };
    h.on_write_done = [&](int, uint64_t, const Status& s) {
      in_flight--;
      if (!s) {
        failed = true;
        fmt::print(stderr, "write failed: {}\n", s.message());
        return;
      }
      row.writes++;
      row.bytes += size;
    };
    Status s = a->start(std::move(h));
    if (!s) fmt::print(stderr, "start a: {}\n", s.message());
    auto deadline = Clock::now() + std::chrono::seconds(10);
    drive(*a, [&] { return up || Clock::now() > deadline; });
    if (up) {
      t0 = Clock::now();
      drive(*a, [&] {
        if (!stopping && seconds_since(t0) >= seconds) stopping = true;
        while (!stopping && !failed && in_flight < window) {
          a->write(1, src.data(), size, region.id, 0, cookie, cookie);
          cookie++;
          in_flight++;
        }
        return (stopping || failed) && in_flight == 0;
      });
      row.seconds = seconds_since(t0);
      row.ok = !failed;
    }
    // Whichever context goes second sees its peer go: expected, not news.
    spdlog::set_level(spdlog::level::off);
    sender_done = true;
    a.reset();
  });
  ta.join();
  tb.join();
  spdlog::set_level(spdlog::level::warn);
  if (row.ok && std::memcmp(src.data(), dst.data(), size) != 0) {
    fmt::print(stderr, "data mismatch after the run\n");
    row.ok = false;
  }
  return row;
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = argc > 1 ? std::atof(argv[1]) : 2.0;
  uint64_t size = (argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 64) << 20;
  int window = argc > 3 ? std::atoi(argv[3]) : 2;
  if (argc > 4 || seconds <= 0 || size == 0 || window <= 0) {
    fmt::print(stderr,
               "usage: {} [seconds per row = 2] [write MiB = 64] [writes in flight = 2]\n"
               "  (positive numbers; a row moves writes for that long over 1, 2 and 4 "
               "streams)\n",
               argv[0]);
    return 2;
  }
  spdlog::set_level(spdlog::level::warn);

  fmt::print("# bench_tcp: {} MiB writes, {} in flight, {:.1f} s per row, loopback, {} cores\n",
             size >> 20, window, seconds, std::thread::hardware_concurrency());
  fmt::print("# {:<34} {:>10} {:>8} {:>9} {:>12}\n", "what", "size(B)", "count", "time(s)",
             "algbw(GB/s)");
  double plain = plain_tcp(seconds, size, 0);
  fmt::print("  {:<34} {:>10} {:>8} {:>9} {:>12.2f}\n", "plain blocking TCP, default buffers", size,
             "-", "-", plain);
  double plain4 = plain_tcp(seconds, size, 4 << 20);
  fmt::print("  {:<34} {:>10} {:>8} {:>9} {:>12.2f}\n", "plain blocking TCP, 4 MiB buffers", size,
             "-", "-", plain4);
  for (int streams : {1, 2, 4}) {
    Row r = transport_run(streams, seconds, size, window);
    std::string what = fmt::format("tcp transport, {} stream{}", streams, streams == 1 ? "" : "s");
    if (!r.ok) {
      fmt::print("  {:<34} failed\n", what);
      continue;
    }
    fmt::print("  {:<34} {:>10} {:>8} {:>9.3f} {:>12.2f}\n", what, size, r.writes, r.seconds,
               static_cast<double>(r.bytes) / r.seconds / 1e9);
  }
  return 0;
}
