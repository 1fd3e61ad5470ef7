// SPDX-License-Identifier: Apache-2.0
//
// Thin header-only C++ wrapper over the C API in gsync.h: RAII owners for
// the comm, requests and arena buffers, and gsync::Error (code + the text of
// gsync_last_error) thrown where the C API returns a negative code. It adds
// no behaviour of its own; the C API's documentation applies.
//
// C++17 and later (PyTorch extensions and many frameworks build with C++17).
// Under C++20 a Buffer's as<T>() is a std::span and TensorRange is a
// concept; under C++17 as<T>() is a gsync::Span with the same data(),
// size(), begin() and end(), and the typed calls take any container with
// std::data and std::size.
#pragma once

#include <gsync/gsync.h>

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#if __cplusplus >= 202002L && __has_include(<span>) && __has_include(<concepts>)
#include <span>
#define GSYNC_HPP_CXX20 1
#else
#define GSYNC_HPP_CXX20 0
#endif

namespace gsync {

class Error : public std::runtime_error {
 public:
  Error(int code, const std::string& message) : std::runtime_error(message), code_(code) {}
  // A GSYNC_ERR_* value.
  int code() const noexcept { return code_; }

 private:
  int code_;
};

namespace detail {
inline void check(int rc) {
  if (rc >= 0) return;
  const char* text = gsync_last_error();
  throw Error(rc, (text != nullptr && *text != '\0') ? text : gsync_strerror(rc));
}
}  // namespace detail

// The gsync_dtype of a C++ element type, -1 for types the typed calls do not
// take (use the *_raw calls for GSYNC_FLOAT16 / GSYNC_BFLOAT16 buffers).
template <typename T>
struct DtypeOf : std::integral_constant<int, -1> {};
template <>
struct DtypeOf<float> : std::integral_constant<int, GSYNC_FLOAT32> {};
template <>
struct DtypeOf<double> : std::integral_constant<int, GSYNC_FLOAT64> {};
template <>
struct DtypeOf<int32_t> : std::integral_constant<int, GSYNC_INT32> {};
template <typename T>
inline constexpr int kDtypeOf = DtypeOf<T>::value;

namespace detail {
// The element type of a container with std::data and std::size (const when
// it is read-only), void for anything else.
template <typename R, typename = void>
struct Element {
  using type = void;
};
template <typename R>
struct Element<R, std::void_t<decltype(std::data(std::declval<R&>())),
                              decltype(std::size(std::declval<R&>()))>> {
  using type = std::remove_pointer_t<decltype(std::data(std::declval<R&>()))>;
};
template <typename R>
using element_t = typename Element<std::remove_reference_t<R>>::type;
}  // namespace detail

// A writable contiguous range of a supported element type (std::vector,
// std::array, a gsync::Buffer's as<T>() ...).
template <typename R>
inline constexpr bool kIsTensorRange =
    !std::is_void_v<detail::element_t<R>> && !std::is_const_v<detail::element_t<R>> &&
    kDtypeOf<std::remove_cv_t<detail::element_t<R>>> >= 0;

#if GSYNC_HPP_CXX20
template <typename R>
concept TensorRange = kIsTensorRange<R>;
template <typename T>
using Span = std::span<T>;
#else
// What as<T>() returns under C++17: a view of count elements at data.
template <typename T>
class Span {
 public:
  constexpr Span() noexcept = default;
  constexpr Span(T* data, size_t size) noexcept : data_(data), size_(size) {}
  constexpr T* data() const noexcept { return data_; }
  constexpr size_t size() const noexcept { return size_; }
  constexpr bool empty() const noexcept { return size_ == 0; }
  constexpr T* begin() const noexcept { return data_; }
  constexpr T* end() const noexcept { return data_ + size_; }
  constexpr T& operator[](size_t i) const noexcept { return data_[i]; }

 private:
  T* data_ = nullptr;
  size_t size_ = 0;
};
#endif

struct Config {
  std::string socket_path;  // empty: $GSYNC_SOCKET, else GSYNC_DEFAULT_SOCKET
  std::string job_id;
  int32_t world_size = 1;
  int32_t rank = 0;
  int32_t local_rank = 0;
  int32_t local_size = 1;
  uint64_t arena_bytes = 0;  // 0: daemon default
  uint32_t timeout_ms = 0;   // 0: daemon default
  int32_t sync_mode = GSYNC_SYNC_BSP;  // the job's (parameter server): every rank the same
  uint32_t staleness = 0;              // GSYNC_SYNC_SSP's bound
};

// A parameter's optimizer (ps_declare): gsync_ps_opts_t with its defaults.
struct PsOptions {
  int32_t optimizer = GSYNC_OPT_SGD;
  float lr = 0.01f;
  float momentum = 0;
  float weight_decay = 0;
  float beta1 = 0.9f, beta2 = 0.999f;
  float eps = 1e-8f;
};

// An operation in flight; freed (abandoned if still pending) on destruction.
class Request {
 public:
  Request() = default;
  explicit Request(gsync_request_t* req) noexcept : req_(req) {}
  Request(Request&& o) noexcept : req_(std::exchange(o.req_, nullptr)) {}
  Request& operator=(Request&& o) noexcept {
    if (this != &o) {
      gsync_request_free(req_);
      req_ = std::exchange(o.req_, nullptr);
    }
    return *this;
  }
  Request(const Request&) = delete;
  Request& operator=(const Request&) = delete;
  ~Request() { gsync_request_free(req_); }

  // true when done; throws Error if the operation failed; false if pending.
  bool test() {
    const int rc = gsync_test(req_);
    if (rc == GSYNC_ERR_AGAIN) return false;
    detail::check(rc);
    return true;
  }
  // true when done; throws Error if the operation failed; false if
  // timeout_ms passed first (< 0: no client-side limit).
  bool wait(int timeout_ms = -1) {
    const int rc = gsync_wait(req_, timeout_ms);
    if (rc == GSYNC_ERR_AGAIN) return false;
    detail::check(rc);
    return true;
  }

  bool valid() const noexcept { return req_ != nullptr; }
  gsync_request_t* get() const noexcept { return req_; }
  gsync_request_t* release() noexcept { return std::exchange(req_, nullptr); }

 private:
  gsync_request_t* req_ = nullptr;
};

// Memory in the shared arena (zero-copy path), freed on destruction. Must
// not outlive the Comm it came from.
class Buffer {
 public:
  Buffer() = default;
  Buffer(gsync_comm_t* comm, void* data, size_t bytes) noexcept
      : comm_(comm), data_(data), bytes_(bytes) {}
  Buffer(Buffer&& o) noexcept
      : comm_(std::exchange(o.comm_, nullptr)),
        data_(std::exchange(o.data_, nullptr)),
        bytes_(std::exchange(o.bytes_, 0)) {}
  Buffer& operator=(Buffer&& o) noexcept {
    if (this != &o) {
      reset();
      comm_ = std::exchange(o.comm_, nullptr);
      data_ = std::exchange(o.data_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { reset(); }

  void* data() const noexcept { return data_; }
  size_t size() const noexcept { return bytes_; }
  template <typename T>
  Span<T> as() const noexcept {
    return Span<T>(static_cast<T*>(data_), bytes_ / sizeof(T));
  }
  void reset() noexcept {
    if (data_ != nullptr) gsync_free(comm_, data_);
    data_ = nullptr;
    bytes_ = 0;
  }

 private:
  gsync_comm_t* comm_ = nullptr;
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

class Comm {
 public:
  explicit Comm(const Config& config) {
    gsync_config_t c;
    gsync_config_init(&c);
    c.socket_path = config.socket_path.empty() ? nullptr : config.socket_path.c_str();
    c.job_id = config.job_id.c_str();
    c.world_size = config.world_size;
    c.rank = config.rank;
    c.local_rank = config.local_rank;
    c.local_size = config.local_size;
    c.arena_bytes = config.arena_bytes;
    c.timeout_ms = config.timeout_ms;
    c.sync_mode = config.sync_mode;
    c.staleness = config.staleness;
    detail::check(gsync_connect(&c, &comm_));
  }
  Comm(Comm&& o) noexcept : comm_(std::exchange(o.comm_, nullptr)) {}
  Comm& operator=(Comm&& o) noexcept {
    if (this != &o) {
      if (comm_ != nullptr) gsync_close(comm_);
      comm_ = std::exchange(o.comm_, nullptr);
    }
    return *this;
  }
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;
  ~Comm() {
    if (comm_ != nullptr) gsync_close(comm_);
  }

  // Closes now; pending requests complete with GSYNC_ERR_CLOSED. Buffers
  // from alloc() must be gone (or reset()) before: they free into this comm.
  void close() {
    if (comm_ != nullptr) detail::check(gsync_close(std::exchange(comm_, nullptr)));
  }
  gsync_comm_t* get() const noexcept { return comm_; }

  Buffer alloc(size_t bytes) {
    void* p = nullptr;
    detail::check(gsync_alloc(comm_, bytes, &p));
    return Buffer(comm_, p, bytes);
  }
  struct ArenaInfo {
    size_t capacity = 0;
    size_t free_bytes = 0;
  };
  ArenaInfo arena_info() const {
    ArenaInfo info;
    detail::check(gsync_arena_info(comm_, &info.capacity, &info.free_bytes));
    return info;
  }

  template <typename R, typename = std::enable_if_t<kIsTensorRange<R>>>
  Request allreduce(uint64_t key, uint64_t step, R&& data, int op = GSYNC_SUM,
                    double weight = 1.0) {
    return allreduce_raw(key, step, std::data(data), std::size(data),
                         kDtypeOf<std::remove_cv_t<detail::element_t<R>>>, op, weight);
  }
  Request allreduce_raw(uint64_t key, uint64_t step, void* buf, size_t count, int dtype, int op,
                        double weight = 1.0) {
    gsync_request_t* req = nullptr;
    detail::check(gsync_allreduce(comm_, key, step, buf, count, dtype, op, weight, &req));
    return Request(req);
  }

  template <typename R, typename = std::enable_if_t<kIsTensorRange<R>>>
  Request broadcast(uint64_t key, uint64_t step, R&& data, int root) {
    return broadcast_raw(key, step, std::data(data), std::size(data),
                         kDtypeOf<std::remove_cv_t<detail::element_t<R>>>, root);
  }
  Request broadcast_raw(uint64_t key, uint64_t step, void* buf, size_t count, int dtype, int root) {
    gsync_request_t* req = nullptr;
    detail::check(gsync_broadcast(comm_, key, step, buf, count, dtype, root, &req));
    return Request(req);
  }

  Request ibarrier(uint64_t step) {
    gsync_request_t* req = nullptr;
    detail::check(gsync_ibarrier(comm_, step, &req));
    return Request(req);
  }
  // timeout_ms <= 0: the session's operation timeout applies.
  void barrier(uint64_t step, int timeout_ms = -1) {
    detail::check(gsync_barrier(comm_, step, timeout_ms));
  }

  // The parameter server (docs/parameter-server.md). ps_declare: every
  // rank, once per key; rank 0's data is the initial value and everyone's
  // once it completes. ps_push_pull(key, c, data): data holds the gradient
  // of step c, then the parameters of step c + 1; weight: the samples it
  // stands for; lr 0: the declared one.
  template <typename R, typename = std::enable_if_t<kIsTensorRange<R>>>
  Request ps_declare(uint64_t key, R&& data, const PsOptions& options = {}) {
    return ps_declare_raw(key, std::data(data), std::size(data),
                          kDtypeOf<std::remove_cv_t<detail::element_t<R>>>, options);
  }
  Request ps_declare_raw(uint64_t key, void* buf, size_t count, int dtype,
                         const PsOptions& options = {}) {
    gsync_ps_opts_t o;
    gsync_ps_opts_init(&o);
    o.optimizer = options.optimizer;
    o.lr = options.lr;
    o.momentum = options.momentum;
    o.weight_decay = options.weight_decay;
    o.beta1 = options.beta1;
    o.beta2 = options.beta2;
    o.eps = options.eps;
    gsync_request_t* req = nullptr;
    detail::check(gsync_ps_declare(comm_, key, buf, count, dtype, &o, &req));
    return Request(req);
  }
  template <typename R, typename = std::enable_if_t<kIsTensorRange<R>>>
  Request ps_push_pull(uint64_t key, uint64_t clock, R&& data, double weight = 1.0,
                       float lr = 0) {
    return ps_raw(&gsync_ps_push_pull, key, clock, std::data(data), std::size(data),
                  kDtypeOf<std::remove_cv_t<detail::element_t<R>>>, weight, lr);
  }
  template <typename R, typename = std::enable_if_t<kIsTensorRange<R>>>
  Request ps_push(uint64_t key, uint64_t clock, R&& grad, double weight = 1.0, float lr = 0) {
    return ps_raw(&gsync_ps_push, key, clock, std::data(grad), std::size(grad),
                  kDtypeOf<std::remove_cv_t<detail::element_t<R>>>, weight, lr);
  }
  template <typename R, typename = std::enable_if_t<kIsTensorRange<R>>>
  Request ps_pull(uint64_t key, uint64_t clock, R&& out) {
    gsync_request_t* req = nullptr;
    detail::check(gsync_ps_pull(comm_, key, clock, std::data(out), std::size(out),
                                kDtypeOf<std::remove_cv_t<detail::element_t<R>>>, &req));
    return Request(req);
  }

  // See gsync_completion_fd: poll it, then test() the pending requests.
  int completion_fd() {
    const int fd = gsync_completion_fd(comm_);
    detail::check(fd);
    return fd;
  }

 private:
  using PsCall = int (*)(gsync_comm_t*, uint64_t, uint64_t, void*, size_t, int,
                         const gsync_push_opts_t*, gsync_request_t**);
  Request ps_raw(PsCall call, uint64_t key, uint64_t clock, void* buf, size_t count, int dtype,
                 double weight, float lr) {
    gsync_push_opts_t o;
    gsync_push_opts_init(&o);
    o.weight = weight;
    o.lr = lr;
    gsync_request_t* req = nullptr;
    detail::check(call(comm_, key, clock, buf, count, dtype, &o, &req));
    return Request(req);
  }

  gsync_comm_t* comm_ = nullptr;
};

}  // namespace gsync
