// SPDX-License-Identifier: Apache-2.0
#include "libclient/error.h"

#include <utility>

namespace gsync::client {
namespace {

// thread_local so that concurrent callers on different threads each read
// the text of their own failure, as errno works.
thread_local std::string t_last_error;

}  // namespace

int fail(int code, std::string message) {
  t_last_error = std::move(message);
  return code;
}

const char* last_error() { return t_last_error.c_str(); }

const char* error_name(int code) {
  switch (code) {
    case GSYNC_OK:
      return "success";
    case GSYNC_ERR_INVALID:
      return "invalid argument";
    case GSYNC_ERR_CONNECT:
      return "cannot reach the gsync daemon";
    case GSYNC_ERR_REFUSED:
      return "the gsync daemon refused the session";
    case GSYNC_ERR_VERSION:
      return "protocol version mismatch between libgsync and gsyncd";
    case GSYNC_ERR_NOMEM:
      return "out of memory (shared arena or host)";
    case GSYNC_ERR_TIMEOUT:
      return "operation timed out (ranks missing)";
    case GSYNC_ERR_RANK_DEAD:
      return "a rank of the job died or disconnected";
    case GSYNC_ERR_MISMATCH:
      return "ranks disagree on count, dtype, op or root";
    case GSYNC_ERR_PROTOCOL:
      return "malformed protocol message or ring entry";
    case GSYNC_ERR_CLOSED:
      return "the session is closed";
    case GSYNC_ERR_AGAIN:
      return "not complete yet";
    case GSYNC_ERR_BUSY:
      return "too many operations in flight";
    case GSYNC_ERR_UNSUPPORTED:
      return "dtype/op combination not supported";
    case GSYNC_ERR_PERMISSION:
      return "permission denied by the gsync daemon";
    case GSYNC_ERR_INTERNAL:
      return "internal error in gsync";
    case GSYNC_ERR_HOST_LOST:
      return "a host of the job was lost";
    case GSYNC_ERR_ANOMALY:
      return "the reduced gradient is an anomaly (non-finite or a norm spike)";
    case GSYNC_ERR_WORLD_CHANGED:
      return "the job's world changed (a host left or joined); call gsync_world";
    default:
      return "unknown gsync error code";
  }
}

}  // namespace gsync::client
