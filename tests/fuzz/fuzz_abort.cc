// SPDX-License-Identifier: Apache-2.0
//
// FUZZ_CHECK in the fuzz build: say which property broke, then abort, which
// libFuzzer reports as a crash and keeps the input of (crash-<sha1>).
#include <cstdio>
#include <cstdlib>

#include "tests/fuzz/fuzz_target.h"

namespace gsync::fuzz {

void check_failed(const char* what, const char* file, int line) {
  std::fprintf(stderr, "FUZZ_CHECK failed at %s:%d: %s\n", file, line, what);
  std::abort();
}

}  // namespace gsync::fuzz
