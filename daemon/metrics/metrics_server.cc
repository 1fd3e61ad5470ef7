// SPDX-License-Identifier: Apache-2.0
#include "daemon/metrics/metrics_server.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "daemon/core/text.h"

namespace gsync::metrics {

namespace {
constexpr auto kRenderWait = std::chrono::seconds(2);
constexpr unsigned kConnectionLimit = 16;
constexpr unsigned kConnectionTimeoutS = 10;

MHD_Result answer(MHD_Connection* conn, unsigned code, const std::string& body, const char* type) {
  MHD_Response* r = MHD_create_response_from_buffer(body.size(), const_cast<char*>(body.data()),
                                                    MHD_RESPMEM_MUST_COPY);
  if (!r) return MHD_NO;
  MHD_add_response_header(r, "Content-Type", type);
  MHD_Result ok = MHD_queue_response(conn, code, r);
  MHD_destroy_response(r);
  return ok;
}

MHD_Result on_request(void* cls, MHD_Connection* conn, const char* url, const char* method,
                      const char*, const char*, size_t* upload_size, void** state) {
  // The first call of a request only says it came (its headers); a body
  // comes in the calls after (read and dropped: nothing takes one); the
  // answer goes on the last, which has none.
  if (*state == nullptr) {
    *state = conn;
    return MHD_YES;
  }
  if (*upload_size != 0) {
    *upload_size = 0;
    return MHD_YES;
  }
  const std::string path = url ? url : "";
  if (path != "/metrics")
    return answer(conn, MHD_HTTP_NOT_FOUND, "gsyncd serves /metrics only\n", "text/plain");
  if (std::strcmp(method, "GET") != 0 && std::strcmp(method, "HEAD") != 0)
    return answer(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "GET /metrics\n", "text/plain");
  std::string text = static_cast<MetricsServer*>(cls)->scrape();
  if (text.empty())
    return answer(conn, MHD_HTTP_SERVICE_UNAVAILABLE,
                  "gsyncd's event loop did not render the metrics within 2 s\n", "text/plain");
  return answer(conn, MHD_HTTP_OK, text, "text/plain; version=0.0.4; charset=utf-8");
}
}  // namespace

MetricsServer::MetricsServer(EventLoop& loop, Render render)
    : loop_(loop), render_(std::move(render)) {}

MetricsServer::~MetricsServer() {
  if (mhd_) MHD_stop_daemon(mhd_);  // joins its thread: no scrape runs after this
  if (wake_fd_ >= 0) {
    loop_.remove(wake_fd_);
    close(wake_fd_);
  }
  if (listen_fd_ >= 0) close(listen_fd_);
}

Status MetricsServer::start(const std::string& listen) {
  std::string host;
  uint16_t port = 0;
  if (std::string why = parse_host_port(listen, &host, &port); !why.empty())
    return Status(GSYNC_ERR_INVALID, "metrics.listen " + why);
  listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0)
    return Status(GSYNC_ERR_INTERNAL,
                  fmt::format("metrics.listen {}: socket: {}", listen, std::strerror(errno)));
  int one = 1;
  setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  inet_pton(AF_INET, host.c_str(), &sa.sin_addr);
  if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 ||
      ::listen(listen_fd_, 64) != 0)
    return Status(GSYNC_ERR_INVALID, fmt::format("metrics.listen {}: cannot listen there: {}",
                                                 listen, std::strerror(errno)));
  socklen_t len = sizeof sa;
  getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&sa), &len);
  port_ = ntohs(sa.sin_port);
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0 || !loop_.add(wake_fd_, EPOLLIN, [this](uint32_t) { on_wake(); }))
    return Status(GSYNC_ERR_INTERNAL, fmt::format("metrics: eventfd: {}", std::strerror(errno)));
  mhd_ = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL, 0, nullptr, nullptr,
                          &on_request, this, MHD_OPTION_LISTEN_SOCKET, listen_fd_,
                          MHD_OPTION_CONNECTION_LIMIT, kConnectionLimit,
                          MHD_OPTION_CONNECTION_TIMEOUT, kConnectionTimeoutS, MHD_OPTION_END);
  if (!mhd_)
    return Status(GSYNC_ERR_INTERNAL,
                  fmt::format("metrics.listen {}: libmicrohttpd did not start", listen));
  listen_fd_ = -1;  // libmicrohttpd closes it when it stops
  spdlog::info("metrics: serving http://{}:{}/metrics", host, port_);
  return Status::ok();
}

std::string MetricsServer::scrape() {
  auto p = std::make_shared<Pending>();
  {
    std::lock_guard lk(mu_);
    queue_.push_back(p);
  }
  uint64_t one = 1;
  [[maybe_unused]] ssize_t n = write(wake_fd_, &one, sizeof one);
  std::unique_lock lk(p->mu);
  p->cv.wait_for(lk, kRenderWait, [&] { return p->done; });
  return p->done ? p->text : std::string();
}

void MetricsServer::on_wake() {
  uint64_t n;
  [[maybe_unused]] ssize_t r = read(wake_fd_, &n, sizeof n);
  std::deque<std::shared_ptr<Pending>> todo;
  {
    std::lock_guard lk(mu_);
    todo.swap(queue_);
  }
  if (todo.empty()) return;
  const std::string text = render_();  // once for every scrape waiting now
  for (auto& p : todo) {
    std::lock_guard lk(p->mu);
    p->text = text;
    p->done = true;
    p->cv.notify_one();
  }
  scrapes_ += todo.size();
}

}  // namespace gsync::metrics
