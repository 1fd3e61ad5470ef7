// SPDX-License-Identifier: Apache-2.0
#include "daemon/admin/admin_server.h"

#include <grp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "daemon/admin/admin_request.h"
#include "daemon/core/json_text.h"
#include "daemon/core/text.h"
#include "daemon/core/unix_socket.h"

namespace gsync {

namespace {
constexpr size_t kMaxConns = 64;
// Refusals of connections over kMaxConns are logged at most this often.
constexpr auto kFullLogEvery = std::chrono::seconds(10);

std::string error_doc(const std::string& why) {
  return json_text(nlohmann::json{{"error", why}}) + "\n";
}

// The gid of group name; false when there is no such group.
bool find_group(const std::string& name, gid_t* gid, std::string* why) {
  group g{}, *found = nullptr;
  std::vector<char> buf(16384);
  int rc = getgrnam_r(name.c_str(), &g, buf.data(), buf.size(), &found);
  if (rc != 0) {
    *why = fmt::format("looking up group '{}': {}", name, strerror(rc));
    return false;
  }
  if (found == nullptr) {
    *why = fmt::format("there is no group '{}'", name);
    return false;
  }
  *gid = g.gr_gid;
  return true;
}
}  // namespace

AdminServer::~AdminServer() {
  for (auto& [fd, c] : conns_) close(fd);
  if (listen_fd_ >= 0) {
    close(listen_fd_);
    unlink(path_.c_str());
  }
}

Status AdminServer::listen(const AdminSocketOptions& o) {
  // The group is looked up before the socket exists, so that whatever the
  // daemon has to say about it is in the log by the time anyone can connect.
  gid_t gid = 0;
  const bool chgrp = !o.group.empty() && group_of(o.path, o.group, &gid);
  Status err;
  listen_fd_ = listen_unix(o.path, SOCK_STREAM, o.mode, &err);
  if (listen_fd_ < 0) return err;
  path_ = o.path;
  if (chgrp)
    if (Status st = set_group(o.group, gid); !st) return st;
  loop_.add(listen_fd_, EPOLLIN, [this](uint32_t) { accept_all(); });
  return Status::ok();
}

// A missing group is not an error: the socket keeps the daemon's group, so
// with mode 0660 only root and the daemon's own group may connect (closed,
// not open, when the install did not create the group). docs/operations.md.
bool AdminServer::group_of(const std::string& path, const std::string& group, gid_t* gid) {
  std::string why;
  if (find_group(group, gid, &why)) return true;
  spdlog::warn("admin socket {}: {}; it keeps group {} (create the group with `groupadd "
               "--system {}`, or set [daemon] admin_group)",
               path, why, getegid(), group);
  return false;
}

Status AdminServer::set_group(const std::string& group, gid_t gid) const {
  if (chown(path_.c_str(), static_cast<uid_t>(-1), gid) != 0)
    return Status(GSYNC_ERR_INVALID, fmt::format("admin socket {}: chown to group {} ({}): {}",
                                                 path_, group, gid, strerror(errno)));
  return Status::ok();
}

std::string AdminServer::reply(const std::string& command) const {
  std::string refused;
  return respond(command + "\n", true, &refused);
}

std::string AdminServer::respond(std::string_view in, bool closed, std::string* refused) const {
  refused->clear();
  AdminRequest r = parse_admin_request(in, closed);
  switch (r.kind) {
    case AdminRequest::Kind::kIncomplete:
      return "";
    case AdminRequest::Kind::kRefused:
      *refused = r.error;
      return error_doc(r.error);
    case AdminRequest::Kind::kCommand:
      break;
  }
  if (auto it = reports_.find(r.command); it != reports_.end()) {
    // A report is the daemon's own code, but one that fails must not take
    // the connection (or, before the loop's own catch, the daemon) down.
    try {
      return it->second() + "\n";
    } catch (const std::exception& e) {
      spdlog::error("admin socket {}: the '{}' report failed: {}", path_, r.command, e.what());
      return error_doc(fmt::format("the '{}' report failed: {}", r.command, e.what()));
    }
  }
  if (size_t sp = r.command.find(' '); sp != std::string::npos) {
    auto it = arg_reports_.find(r.command.substr(0, sp));
    if (it != arg_reports_.end() && sp + 1 < r.command.size()) {
      try {
        return it->second(r.command.substr(sp + 1)) + "\n";
      } catch (const std::exception& e) {
        spdlog::error("admin socket {}: the '{}' command failed: {}", path_, it->first, e.what());
        return error_doc(fmt::format("the '{}' command failed: {}", it->first, e.what()));
      }
    }
  }
  const std::string name = r.command.substr(0, r.command.find(' '));
  if (async_reports_.count(name)) {
    *refused = fmt::format("'{}' waits on peers: it is answered on a connection only", name);
    return error_doc(*refused);
  }
  std::string known;
  for (const auto& [name, report] : reports_) known += (known.empty() ? "" : ", ") + name;
  for (const auto& [name, report] : async_reports_) known += (known.empty() ? "" : ", ") + name;
  for (const auto& [name, report] : arg_reports_)
    known += (known.empty() ? "" : ", ") + name + " ARG";
  *refused = fmt::format("unknown admin command '{}'; known: {}", r.command, known);
  return error_doc(*refused);
}

void AdminServer::accept_all() {
  for (;;) {
    int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;
    if (conns_.size() >= kMaxConns) {
      auto now = std::chrono::steady_clock::now();
      if (now - last_full_log_ >= kFullLogEvery) {
        last_full_log_ = now;
        log_refusal(fd, fmt::format("{} admin connections are open already (the limit)",
                                    kMaxConns));
      }
      std::string doc = error_doc(fmt::format("gsyncd has {} admin connections open; try again",
                                              kMaxConns));
      [[maybe_unused]] ssize_t n = send(fd, doc.data(), doc.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
      close(fd);
      continue;
    }
    conns_[fd] = Conn{};
    loop_.add(fd, EPOLLIN | EPOLLRDHUP, [this, fd](uint32_t ev) { on_event(fd, ev); });
  }
}

// Reads what the client sent; true once the reply is queued in c.out.
bool AdminServer::read_request(int fd, Conn& c, uint32_t events) {
  char buf[512];
  ssize_t n = -1;
  // Never more than a request and a read's worth: a client that streams
  // bytes at us is refused as too long, not buffered.
  while (c.in.size() <= kMaxAdminRequest && (n = read(fd, buf, sizeof buf)) > 0)
    c.in.append(buf, static_cast<size_t>(n));
  bool closed = c.in.size() <= kMaxAdminRequest && n == 0;
  if (c.in.size() <= kMaxAdminRequest && n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
    drop(fd);
    return false;
  }
  if (start_async(fd, c, closed)) return false;
  std::string refused;
  c.out = respond(c.in, closed, &refused);
  if (c.out.empty()) {
    if (closed || (events & (EPOLLERR | EPOLLHUP))) drop(fd);
    return false;
  }
  if (!refused.empty()) log_refusal(fd, refused);
  loop_.modify(fd, EPOLLOUT | EPOLLRDHUP);
  return true;
}

bool AdminServer::start_async(int fd, Conn& c, bool closed) {
  AdminRequest r = parse_admin_request(c.in, closed);
  if (r.kind != AdminRequest::Kind::kCommand) return false;
  const size_t sp = r.command.find(' ');
  auto it = async_reports_.find(r.command.substr(0, sp));
  if (it == async_reports_.end()) return false;
  const std::string arg = sp == std::string::npos ? "" : r.command.substr(sp + 1);
  const uint64_t serial = next_serial_++;
  c.serial = serial;
  c.waiting = true;
  // Until the reply, only a hang-up matters: more bytes are not read.
  loop_.modify(fd, EPOLLRDHUP);
  std::weak_ptr<AdminServer*> self = self_;
  Reply reply = [self, fd, serial](const std::string& doc) {
    if (auto s = self.lock()) (*s)->deliver(fd, serial, doc);
  };
  try {
    it->second(arg, std::move(reply));
  } catch (const std::exception& e) {
    spdlog::error("admin socket {}: the '{}' command failed: {}", path_, it->first, e.what());
    deliver(fd, serial, error_doc(fmt::format("the '{}' command failed: {}", it->first, e.what())));
  }
  return true;
}

// An async command's reply; nothing when its connection is gone (the fd
// may be another connection's by now: the serial tells).
void AdminServer::deliver(int fd, uint64_t serial, const std::string& doc) {
  auto it = conns_.find(fd);
  if (it == conns_.end() || it->second.serial != serial || !it->second.waiting) return;
  Conn& c = it->second;
  c.waiting = false;
  c.out = doc;
  if (c.out.empty() || c.out.back() != '\n') c.out += '\n';
  loop_.modify(fd, EPOLLOUT | EPOLLRDHUP);
}

void AdminServer::log_refusal(int fd, const std::string& why) const {
  ucred cred{};
  socklen_t len = sizeof cred;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
    spdlog::warn("admin socket {}: refused a request (sender unknown: SO_PEERCRED: {}): {}",
                 path_, strerror(errno), why);
    return;
  }
  spdlog::warn("admin socket {}: refused a request from pid {} uid {} gid {}: {}", path_,
               cred.pid, cred.uid, cred.gid, why);
}

void AdminServer::on_event(int fd, uint32_t events) {
  auto it = conns_.find(fd);
  if (it == conns_.end()) return;
  Conn& c = it->second;
  // Waiting on an async reply, the connection listens for a hang-up only.
  if (c.waiting) return drop(fd);
  if (c.out.empty() && !read_request(fd, c, events)) return;
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

void AdminServer::drop(int fd) {
  loop_.remove(fd);
  close(fd);
  conns_.erase(fd);
}

}  // namespace gsync
