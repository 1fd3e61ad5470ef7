// SPDX-License-Identifier: Apache-2.0
//
// The shape of every fuzz target in tests/fuzz (docs/testing.md, "The
// fuzzing lane"). A target's body is an ordinary function,
// gsync_fuzz_<name>(data, size), so that the same code runs two ways:
//   - in the fuzz build (meson -Dfuzz=enabled, clang, tools/fuzz/run.sh),
//     where GSYNC_FUZZ_ENTRY makes it libFuzzer's LLVMFuzzerTestOneInput
//     and a failed FUZZ_CHECK aborts, which libFuzzer reports as a crash;
//   - in the regular build, where tests/fuzz/test_fuzz_replay.cc calls it
//     on every seed and every kept regression input and a failed FUZZ_CHECK
//     is a test failure.
// FUZZ_CHECK states a property the code under test must keep for any
// input (a reply is JSON, a decoded message re-encodes to its bytes); a
// crash, a leak or a sanitizer report needs no check to be found.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace gsync::fuzz {

[[noreturn]] void check_failed(const char* what, const char* file, int line);

// The input as text.
inline std::string_view text_of(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// Takes bytes off the front of the input, zeros once it runs out.
class Input {
 public:
  Input(const uint8_t* data, size_t size) : p_(data), n_(size) {}
  uint8_t byte() {
    if (n_ == 0) return 0;
    n_--;
    return *p_++;
  }
  template <typename T>
  T take() {
    T v{};
    for (size_t i = 0; i < sizeof v; i++) reinterpret_cast<uint8_t*>(&v)[i] = byte();
    return v;
  }
  std::string_view rest() const { return {reinterpret_cast<const char*>(p_), n_}; }
  size_t left() const { return n_; }

 private:
  const uint8_t* p_;
  size_t n_;
};

}  // namespace gsync::fuzz

#define FUZZ_CHECK(cond)                                                     \
  do {                                                                       \
    if (!(cond)) ::gsync::fuzz::check_failed(#cond, __FILE__, __LINE__);     \
  } while (0)

#ifdef GSYNC_FUZZ_ENTRY
#define GSYNC_FUZZ_TARGET(name)                                                  \
  int gsync_fuzz_##name(const uint8_t* data, size_t size);                       \
  extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {      \
    return gsync_fuzz_##name(data, size);                                        \
  }                                                                              \
  int gsync_fuzz_##name(const uint8_t* data, size_t size)
#else
#define GSYNC_FUZZ_TARGET(name) int gsync_fuzz_##name(const uint8_t* data, size_t size)
#endif
