// SPDX-License-Identifier: Apache-2.0
#include "daemon/core/log.h"

#include <spdlog/spdlog.h>

#include "daemon/core/text.h"

namespace gsync {

namespace {
// A log line longer than this is cut: nothing the daemon says itself comes
// near it, and a peer's text must not fill the journal.
constexpr size_t kMaxLogMessage = 8192;
}  // namespace

void PrintableSink::log(const spdlog::details::log_msg& msg) {
  std::string_view text(msg.payload.data(), msg.payload.size());
  if (text.size() <= kMaxLogMessage && is_printable(text)) {
    inner_->log(msg);
    return;
  }
  std::string clean = printable(text, kMaxLogMessage);
  spdlog::details::log_msg copy(msg);
  copy.payload = spdlog::string_view_t(clean.data(), clean.size());
  inner_->log(copy);
}

void make_log_printable() {
  for (auto& sink : spdlog::default_logger()->sinks()) {
    if (std::dynamic_pointer_cast<PrintableSink>(sink)) continue;
    sink = std::make_shared<PrintableSink>(sink);
  }
}

}  // namespace gsync
