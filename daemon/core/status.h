// SPDX-License-Identifier: Apache-2.0
//
// The daemon's one error value: a GSYNC_ERR_* code plus a message that names
// what happened and where. Functions that can fail return Status; nothing a
// client or peer does may end in abort().
#pragma once

#include <string>
#include <utility>

#include "gsync/gsync.h"

namespace gsync {

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(int code, std::string message) : code_(code), message_(std::move(message)) {}
  static Status ok() { return {}; }

  bool is_ok() const { return code_ == GSYNC_OK; }
  explicit operator bool() const { return is_ok(); }
  int code() const { return code_; }
  const std::string& message() const { return message_; }

 private:
  int code_ = GSYNC_OK;
  std::string message_;
};

}  // namespace gsync
