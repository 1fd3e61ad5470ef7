// SPDX-License-Identifier: Apache-2.0
//
// The daemon's log lines are made printable where they are written: a
// message that quotes text from outside (a peer's abort message, a REFUSE
// reason, a client's job id) cannot break a line in two, forge the next
// line, carry terminal escapes or invalid UTF-8 into the journal. The sink
// below wraps the real one and passes each message through printable()
// (text.h); messages that are printable already are passed as they are.
#pragma once

#include <memory>
#include <string>

#include <spdlog/sinks/sink.h>

namespace gsync {

class PrintableSink final : public spdlog::sinks::sink {
 public:
  explicit PrintableSink(std::shared_ptr<spdlog::sinks::sink> inner) : inner_(std::move(inner)) {}
  void log(const spdlog::details::log_msg& msg) override;
  void flush() override { inner_->flush(); }
  void set_pattern(const std::string& pattern) override { inner_->set_pattern(pattern); }
  void set_formatter(std::unique_ptr<spdlog::formatter> f) override {
    inner_->set_formatter(std::move(f));
  }

 private:
  std::shared_ptr<spdlog::sinks::sink> inner_;
};

// Wraps every sink of the default logger in a PrintableSink. Call once at
// start, before any other thread logs.
void make_log_printable();

}  // namespace gsync
