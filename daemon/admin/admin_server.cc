// SPDX-License-Identifier: Apache-2.0
#include "daemon/admin/admin_server.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "daemon/core/unix_socket.h"

namespace gsync {

namespace {
constexpr size_t kMaxCommand = 256;
constexpr size_t kMaxConns = 64;
}  // namespace

AdminServer::~AdminServer() {
  for (auto& [fd, c] : conns_) close(fd);
  if (listen_fd_ >= 0) {
    close(listen_fd_);
    unlink(path_.c_str());
  }
}

Status AdminServer::listen(const std::string& path, unsigned mode) {
  Status err;
  listen_fd_ = listen_unix(path, SOCK_STREAM, mode, &err);
  if (listen_fd_ < 0) return err;
  path_ = path;
  loop_.add(listen_fd_, EPOLLIN, [this](uint32_t) { accept_all(); });
  return Status::ok();
}

std::string AdminServer::reply(const std::string& command) const {
  if (auto it = reports_.find(command); it != reports_.end()) return it->second();
  std::string known;
  for (const auto& [name, report] : reports_) known += (known.empty() ? "" : ", ") + name;
  return nlohmann::json{{"error", "unknown admin command '" + command + "'; known: " + known}}
      .dump();
}

void AdminServer::accept_all() {
  for (;;) {
    int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;
    if (conns_.size() >= kMaxConns) {
      close(fd);
      continue;
    }
    conns_[fd] = Conn{};
    loop_.add(fd, EPOLLIN | EPOLLRDHUP, [this, fd](uint32_t ev) { on_event(fd, ev); });
  }
}

void AdminServer::on_event(int fd, uint32_t events) {
  Conn& c = conns_[fd];
  if (events & EPOLLIN) {
    char buf[512];
    ssize_t n;
    while ((n = read(fd, buf, sizeof buf)) > 0) c.in.append(buf, static_cast<size_t>(n));
    size_t nl = c.in.find('\n');
    if (nl == std::string::npos && c.in.size() > kMaxCommand) return drop(fd);
    if (nl != std::string::npos && c.out.empty()) {
      std::string cmd = c.in.substr(0, nl);
      if (!cmd.empty() && cmd.back() == '\r') cmd.pop_back();
      c.out = reply(cmd) + "\n";
      loop_.modify(fd, EPOLLOUT | EPOLLRDHUP);
    } else if (n == 0 && c.out.empty()) {
      return drop(fd);
    }
  }
  if ((events & (EPOLLERR | EPOLLHUP)) && c.out.empty()) return drop(fd);
  if (!c.out.empty()) {
    while (c.sent < c.out.size()) {
      ssize_t n = send(fd, c.out.data() + c.sent, c.out.size() - c.sent, MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EAGAIN) return;
        return drop(fd);
      }
      c.sent += static_cast<size_t>(n);
    }
    drop(fd);
  }
}

void AdminServer::drop(int fd) {
  loop_.remove(fd);
  close(fd);
  conns_.erase(fd);
}

}  // namespace gsync
