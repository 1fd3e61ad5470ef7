// SPDX-License-Identifier: Apache-2.0
//
// The daemon's tuning table (daemon/tuning/tune_table.h): read from
// [tuning] table at start, replaced by the admin command `tune-load PATH`
// (gsyncctl tune load), dropped by `tune-clear`, shown in `status`. A new
// table is written to [tuning] table before it is used, so a full disk
// leaves the old one in force and says so; jobs already running keep the
// table they started with.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "daemon/core/json_text.h"
#include "daemon/gsyncd.h"

namespace gsync {

namespace {
using nlohmann::json;

// The whole of a regular file of at most tuning::kMaxFileBytes; *err the
// errno of a file that cannot be opened (ENOENT: a daemon never tuned).
// Looked at before it is opened for reading (O_PATH), so that a FIFO cannot
// block the event loop nor a device be opened; then read non-blocking.
Status read_table_file(const std::string& path, std::string* out, int* err = nullptr) {
  if (path.empty() || path[0] != '/')
    return {GSYNC_ERR_INVALID, fmt::format("tuning table '{}': not an absolute path", path)};
  int at = ::open(path.c_str(), O_PATH | O_CLOEXEC);
  struct stat st{};
  if (at < 0 || ::fstat(at, &st) != 0) {
    if (err) *err = errno;
    Status s{GSYNC_ERR_INVALID, fmt::format("tuning table {}: {}", path, std::strerror(errno))};
    if (at >= 0) ::close(at);
    return s;
  }
  int fd = -1;
  if (S_ISREG(st.st_mode))
    fd = ::open(fmt::format("/proc/self/fd/{}", at).c_str(),
                O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  ::close(at);
  if (S_ISREG(st.st_mode) && fd < 0) {
    if (err) *err = errno;
    return {GSYNC_ERR_INVALID, fmt::format("tuning table {}: {}", path, std::strerror(errno))};
  }
  Status result;
  if (fd < 0 || ::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    result = {GSYNC_ERR_INVALID, fmt::format("tuning table {}: not a regular file", path)};
  } else if (static_cast<uint64_t>(st.st_size) > tuning::kMaxFileBytes) {
    result = {GSYNC_ERR_INVALID, fmt::format("tuning table {}: {} bytes, over the {} allowed", path,
                                             st.st_size, tuning::kMaxFileBytes)};
  } else {
    out->resize(static_cast<size_t>(st.st_size));
    size_t got = 0;
    while (got < out->size()) {
      ssize_t n = ::read(fd, out->data() + got, out->size() - got);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        result = {GSYNC_ERR_INVALID, fmt::format("tuning table {}: read: {}", path,
                                                 n < 0 ? std::strerror(errno) : "file shrank")};
        break;
      }
      got += static_cast<size_t>(n);
    }
  }
  if (fd >= 0) ::close(fd);
  return result;
}

// path's new content, whole or not at all: a temporary file beside it,
// synced, then renamed over it.
Status write_table_file(const std::string& path, const std::string& text) {
  if (size_t slash = path.rfind('/'); slash != std::string::npos && slash > 0)
    ::mkdir(path.substr(0, slash).c_str(), 0700);  // one level, as a state dir; EEXIST is fine
  std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  size_t put = 0;
  int err = fd < 0 ? errno : 0;
  while (put < text.size() && err == 0) {
    ssize_t n = ::write(fd, text.data() + put, text.size() - put);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) err = errno;
    else put += static_cast<size_t>(n);
  }
  if (err == 0 && ::fsync(fd) != 0) err = errno;
  if (fd >= 0) ::close(fd);
  if (err == 0 && ::rename(tmp.c_str(), path.c_str()) != 0) err = errno;
  if (err != 0) {
    if (fd >= 0) ::unlink(tmp.c_str());
    return {GSYNC_ERR_INVALID, fmt::format("tuning table {}: cannot write it: {} (the table in "
                                           "force is unchanged)",
                                           path, std::strerror(err))};
  }
  return Status::ok();
}

json error_doc(const Status& st) { return json{{"error", st.message()}}; }
}  // namespace

Status Gsyncd::load_tuning() {
  if (cfg_.tuning_table.empty()) return Status::ok();
  std::string text;
  int err = 0;
  if (Status st = read_table_file(cfg_.tuning_table, &text, &err); !st) {
    if (err == ENOENT) return Status::ok();
    // Unreadable (a daemon not run as root, say): no table; a load says
    // why it cannot keep one. A table that is there but wrong stops it.
    if (err != 0) {
      spdlog::warn("{}; planning by the built-in rule", st.message());
      return Status::ok();
    }
    return st;
  }
  auto table = std::make_shared<tuning::TuneTable>();
  if (Status st = tuning::TuneTable::parse(text, table.get()); !st)
    return {st.code(), fmt::format("{}: {}", cfg_.tuning_table, st.message())};
  spdlog::info("tuning table {}: {} entries", cfg_.tuning_table, table->size());
  jobs_->set_tuning(std::move(table));
  return Status::ok();
}

std::string Gsyncd::tune_load(const std::string& path) {
  std::string text;
  if (Status st = read_table_file(path, &text); !st) return json_text(error_doc(st));
  auto table = std::make_shared<tuning::TuneTable>();
  if (Status st = tuning::TuneTable::parse(text, table.get()); !st)
    return json_text(error_doc({st.code(), fmt::format("{}: {}", path, st.message())}));
  if (!cfg_.tuning_table.empty())
    if (Status st = write_table_file(cfg_.tuning_table, table->to_json()); !st)
      return json_text(error_doc(st));
  spdlog::info("tuning table loaded from {}: {} entries; jobs created from now on plan with it",
               path, table->size());
  size_t entries = table->size();
  jobs_->set_tuning(std::move(table));
  return json_text(json{{"loaded", path},
                        {"entries", entries},
                        {"kept_in", cfg_.tuning_table.empty() ? json(nullptr) : json(cfg_.tuning_table)},
                        {"note", "jobs created from now on plan with it; running jobs keep theirs"}});
}

std::string Gsyncd::tune_clear() {
  if (!cfg_.tuning_table.empty() && ::unlink(cfg_.tuning_table.c_str()) != 0 && errno != ENOENT)
    return json_text(error_doc({GSYNC_ERR_INVALID, fmt::format("tuning table {}: cannot remove it: {}",
                                                               cfg_.tuning_table, std::strerror(errno))}));
  jobs_->set_tuning(nullptr);
  spdlog::info("tuning table cleared; jobs created from now on plan by the built-in rule");
  return json_text(json{{"cleared", true}});
}

json Gsyncd::tuning_report() const {
  const auto& t = jobs_->tuning();
  return json{{"file", cfg_.tuning_table.empty() ? json(nullptr) : json(cfg_.tuning_table)},
              {"entries", t ? t->report() : json::array()}};
}

void Gsyncd::register_tuning() {
  admin_.add_with_argument("tune-load", [this](const std::string& path) { return tune_load(path); });
  admin_.add("tune-clear", [this] { return tune_clear(); });
}

}  // namespace gsync
