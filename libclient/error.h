// SPDX-License-Identifier: Apache-2.0
//
// The client's error model (after liburing): every public function returns 0
// or a negative GSYNC_ERR_* code, and every negative return first stores a
// message on the calling thread, read back with gsync_last_error(). Inside
// the library the same pair travels as `return fail(code, text)`.
#pragma once

#include <string>

#include "gsync/gsync.h"

namespace gsync::client {

// Stores `message` as this thread's last error and returns `code`.
int fail(int code, std::string message);
const char* last_error();
// Static text for a code; never NULL.
const char* error_name(int code);

}  // namespace gsync::client
