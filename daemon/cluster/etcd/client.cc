// SPDX-License-Identifier: Apache-2.0
#include "daemon/cluster/etcd/client.h"

#include <curl/curl.h>

#include <mutex>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "daemon/core/json_text.h"
#include "daemon/core/text.h"

namespace gsync::cluster::etcd {

namespace {

using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

// An answer (or a watch line) past this is not one etcd sends (its requests
// are at most 1.5 MiB by default); it ends the call instead of growing.
constexpr size_t kMaxAnswerBytes = 64 << 20;
// How long a watch waits on a quiet connection before it looks at stop.
constexpr long kPollMs = 100;
// gRPC's NOT_FOUND, what revoking a lease that is gone answers.
constexpr int kGrpcNotFound = 5;

void init_curl_once() {
  static std::once_flag once;
  // Not thread-safe itself (curl_global_init(3)), hence the once.
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

// The request's headers for the life of one call. "Expect:" keeps curl
// from waiting for a 100-continue the gateway never sends.
class Headers {
 public:
  Headers() {
    list_ = curl_slist_append(nullptr, "Content-Type: application/json");
    if (list_) list_ = curl_slist_append(list_, "Expect:");
  }
  ~Headers() { curl_slist_free_all(list_); }
  Headers(const Headers&) = delete;
  Headers& operator=(const Headers&) = delete;
  curl_slist* get() const { return list_; }

 private:
  curl_slist* list_ = nullptr;
};

// The options of every call: a JSON POST of body to url, curl's error text
// into error, no signals (curl's timeouts would otherwise use SIGALRM in a
// threaded daemon), http and https only.
void prepare(CURL* h, const std::string& url, const std::string& body, const Headers& headers,
             char* error, std::chrono::milliseconds connect_timeout) {
  curl_easy_setopt(h, CURLOPT_URL, url.c_str());
  curl_easy_setopt(h, CURLOPT_POSTFIELDS, body.c_str());
  curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers.get());
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(connect_timeout.count()));
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, error);
  curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
}

size_t append_answer(char* data, size_t size, size_t n, void* user) {
  auto* body = static_cast<std::string*>(user);
  if (body->size() + size * n > kMaxAnswerBytes) return 0;  // curl ends it: CURLE_WRITE_ERROR
  body->append(data, size * n);
  return size * n;
}

// curl calls this once a connection is up (new or reused), before the
// request goes out: a call that failed before it never reached etcd and
// may go to the next endpoint; one that failed after may have been done.
int note_connected(void* user, char*, char*, int, int) {
  *static_cast<bool*>(user) = true;
  return CURL_PREREQFUNC_OK;
}

std::string excerpt(std::string_view body) { return printable(body.substr(0, 400), 160); }

std::string error_text(const char* error, CURLcode code) {
  return error[0] ? std::string(error) : std::string(curl_easy_strerror(code));
}

// A parser's Status, told where it came from: the endpoint and the call,
// and for an answer that did not parse, how it starts.
Status named(Status st, const std::string& endpoint, const char* path, std::string_view answer) {
  if (st) return st;
  std::string text = fmt::format("etcd {}{}: {}", endpoint, path, st.message());
  if (st.code() == GSYNC_ERR_PROTOCOL) text += fmt::format("; the answer: \"{}\"", excerpt(answer));
  return {st.code(), std::move(text)};
}

// An answer other than HTTP 200: the error etcd reports in it.
Status http_error(const std::string& endpoint, const char* path, long http, std::string_view body) {
  Status st = parse_error_response(body);
  if (!st) return named(std::move(st), endpoint, path, body);
  return {GSYNC_ERR_PROTOCOL,
          fmt::format("etcd {}{}: HTTP {} with \"{}\"", endpoint, path, http, excerpt(body))};
}

// What a watch's stream has said so far; curl's write callback feeds it.
struct WatchStream {
  CURL* easy = nullptr;
  const std::function<bool(const WatchResponse&)>* on_response = nullptr;
  std::string endpoint;
  std::string pending;     // the start of a line not ended yet
  std::string error_body;  // the answer, when it is not HTTP 200
  bool connected = false;
  bool created = false;
  bool done = false;  // the watch is over; result says how
  Status result;
};

void finish(WatchStream* w, Status result) {
  w->done = true;
  w->result = std::move(result);
}

void take_line(WatchStream* w, std::string_view line) {
  WatchResponse r;
  Status st = parse_watch_response(line, &r);
  if (!st) return finish(w, named(std::move(st), w->endpoint, "/v3/watch", line));
  if (!w->created) {
    if (!r.created)
      return finish(w, {GSYNC_ERR_PROTOCOL,
                        fmt::format("etcd {}/v3/watch: the first answer is not \"created\": \"{}\"",
                                    w->endpoint, excerpt(line))});
    w->created = true;
    // etcd answers a watch it cannot create with created and canceled in
    // one line (a cancel_reason); the caller sees that one.
    if (!r.canceled) return;
  }
  bool go_on = false;
  try {
    go_on = (*w->on_response)(r);
  } catch (const std::exception& e) {
    return finish(w,
                  {GSYNC_ERR_INTERNAL, fmt::format("etcd watch: on_response threw: {}", e.what())});
  } catch (...) {
    return finish(w, {GSYNC_ERR_INTERNAL, "etcd watch: on_response threw"});
  }
  // A canceled watch's stream stays open, silent: it is over all the same.
  if (r.canceled) {
    std::string why = r.compact_revision > 0
                          ? fmt::format("history compacted up to revision {}", r.compact_revision)
                          : printable(r.cancel_reason.empty() ? "no reason" : r.cancel_reason, 300);
    return finish(w, {GSYNC_ERR_CLOSED,
                      fmt::format("etcd {}/v3/watch: canceled by etcd: {}", w->endpoint, why)});
  }
  if (!go_on) finish(w, Status::ok());
}

size_t on_stream_bytes(char* data, size_t size, size_t n, void* user) {
  auto* w = static_cast<WatchStream*>(user);
  const size_t len = size * n;
  long http = 0;
  curl_easy_getinfo(w->easy, CURLINFO_RESPONSE_CODE, &http);
  if (http != 200) {
    if (w->error_body.size() < (64 << 10)) w->error_body.append(data, len);
    return len;
  }
  w->pending.append(data, len);
  size_t start = 0, end;
  while (!w->done && (end = w->pending.find('\n', start)) != std::string::npos) {
    std::string_view line(w->pending.data() + start, end - start);
    start = end + 1;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (!line.empty()) take_line(w, line);
  }
  w->pending.erase(0, start);
  if (!w->done && w->pending.size() > kMaxAnswerBytes)
    finish(w, {GSYNC_ERR_PROTOCOL, fmt::format("etcd {}/v3/watch: a line over {} bytes",
                                               w->endpoint, kMaxAnswerBytes)});
  return w->done ? 0 : len;  // 0 ends the transfer
}

// One watch transfer's handles, released in one place.
struct Transfer {
  CURL* easy = curl_easy_init();
  CURLM* multi = curl_multi_init();
  bool added = false;
  ~Transfer() {
    if (added) curl_multi_remove_handle(multi, easy);
    if (multi) curl_multi_cleanup(multi);
    if (easy) curl_easy_cleanup(easy);
  }
};

// The range of a prefix: etcd has no empty key, so "" is every key from
// "\0" on.
std::pair<std::string, std::string> range_of(std::string_view prefix) {
  std::string key = prefix.empty() ? std::string(1, '\0') : std::string(prefix);
  return {base64_encode(key), base64_encode(prefix_end(prefix))};
}

}  // namespace

struct Client::Answer {
  CURLcode result = CURLE_OK;
  bool connected = false;
  long http = 0;
  std::string body;
  std::string error;  // curl's, when result is not CURLE_OK
};

Client::Client(std::vector<std::string> endpoints, std::chrono::milliseconds timeout)
    : endpoints_(std::move(endpoints)), timeout_(timeout) {
  init_curl_once();
  for (auto& e : endpoints_)
    while (!e.empty() && e.back() == '/') e.pop_back();
  easy_ = curl_easy_init();
}

Client::~Client() {
  if (easy_) curl_easy_cleanup(static_cast<CURL*>(easy_));
}

std::string Client::endpoint() const {
  return endpoints_.empty() ? std::string() : endpoints_[current_];
}

Client::Answer Client::post_to(const std::string& endpoint, const char* path,
                               const std::string& body) {
  Answer a;
  auto* h = static_cast<CURL*>(easy_);
  // Reset keeps the open connection (curl_easy_reset(3)); the options are
  // set afresh for every call.
  curl_easy_reset(h);
  Headers headers;
  char error[CURL_ERROR_SIZE] = "";
  prepare(h, endpoint + path, body, headers, error, timeout_);
  curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, static_cast<long>(timeout_.count()));
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, append_answer);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &a.body);
  curl_easy_setopt(h, CURLOPT_PREREQFUNCTION, note_connected);
  curl_easy_setopt(h, CURLOPT_PREREQDATA, &a.connected);
  a.result = curl_easy_perform(h);
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &a.http);
  if (a.result != CURLE_OK) a.error = error_text(error, a.result);
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, nullptr);  // error dies here
  return a;
}

Status Client::post(const char* path, const std::string& body, std::string* reply, int* grpc_code) {
  if (grpc_code) *grpc_code = 0;
  if (endpoints_.empty()) return {GSYNC_ERR_INVALID, fmt::format("etcd {}: no endpoints", path)};
  if (!easy_) return {GSYNC_ERR_INTERNAL, fmt::format("etcd {}: curl_easy_init failed", path)};
  std::string tried;
  for (size_t i = 0; i < endpoints_.size(); i++) {
    const size_t k = (current_ + i) % endpoints_.size();
    const std::string& ep = endpoints_[k];
    Answer a = post_to(ep, path, body);
    if (a.connected && a.result == CURLE_OPERATION_TIMEDOUT)
      return {GSYNC_ERR_TIMEOUT,
              fmt::format("etcd {}{}: no answer within {} ms", ep, path, timeout_.count())};
    if (a.connected && a.result == CURLE_WRITE_ERROR)
      return {GSYNC_ERR_PROTOCOL,
              fmt::format("etcd {}{}: an answer over {} bytes", ep, path, kMaxAnswerBytes)};
    if (a.result != CURLE_OK) {  // not reached, or lost before it answered
      tried += fmt::format("{}{} ({})", tried.empty() ? "" : ", ", ep, a.error);
      continue;
    }
    current_ = k;
    if (a.http != 200) {
      if (grpc_code) *grpc_code = error_grpc_code(a.body);
      return http_error(ep, path, a.http, a.body);
    }
    *reply = std::move(a.body);
    return Status::ok();
  }
  return {GSYNC_ERR_CONNECT, fmt::format("etcd {}: no endpoint reachable: {}", path, tried)};
}

Status Client::grant(int64_t ttl_s, int64_t* lease_id) {
  *lease_id = 0;
  std::string reply;
  const char* path = "/v3/lease/grant";
  if (Status st = post(path, json_text({{"TTL", std::to_string(ttl_s)}}), &reply); !st) return st;
  int64_t ttl = 0;
  return named(parse_grant_response(reply, lease_id, &ttl), endpoint(), path, reply);
}

Status Client::keepalive(int64_t lease_id, int64_t* ttl_left) {
  *ttl_left = 0;
  std::string reply;
  const char* path = "/v3/lease/keepalive";
  if (Status st = post(path, json_text({{"ID", std::to_string(lease_id)}}), &reply); !st) return st;
  return named(parse_keepalive_response(reply, ttl_left), endpoint(), path, reply);
}

Status Client::revoke(int64_t lease_id) {
  std::string reply;
  const char* path = "/v3/lease/revoke";
  int grpc_code = 0;
  Status st = post(path, json_text({{"ID", std::to_string(lease_id)}}), &reply, &grpc_code);
  if (!st) return grpc_code == kGrpcNotFound ? Status::ok() : st;
  int64_t revision = 0;
  return named(parse_header_response(reply, &revision), endpoint(), path, reply);
}

Status Client::put(std::string_view key, std::string_view value, int64_t lease_id) {
  Json req = {{"key", base64_encode(key)}, {"value", base64_encode(value)}};
  if (lease_id != 0) req["lease"] = std::to_string(lease_id);
  std::string reply;
  const char* path = "/v3/kv/put";
  if (Status st = post(path, json_text(req), &reply); !st) return st;
  int64_t revision = 0;
  return named(parse_header_response(reply, &revision), endpoint(), path, reply);
}

Status Client::del(std::string_view key) {
  std::string reply;
  const char* path = "/v3/kv/deleterange";
  if (Status st = post(path, json_text({{"key", base64_encode(key)}}), &reply); !st) return st;
  int64_t revision = 0;
  return named(parse_header_response(reply, &revision), endpoint(), path, reply);
}

Status Client::range_prefix(std::string_view prefix, std::vector<KeyValue>* kvs,
                            int64_t* revision) {
  kvs->clear();
  *revision = 0;
  auto [key, end] = range_of(prefix);
  std::string reply;
  const char* path = "/v3/kv/range";
  if (Status st = post(path, json_text({{"key", key}, {"range_end", end}}), &reply); !st) return st;
  return named(parse_range_response(reply, kvs, revision), endpoint(), path, reply);
}

Status Client::create_all(const std::vector<std::pair<std::string, std::string>>& kvs,
                          bool* created) {
  *created = false;
  if (kvs.empty()) return {GSYNC_ERR_INVALID, "etcd create_all: no keys to create"};
  // Every key's create_revision 0 - none exists - or nothing is written.
  Json compare = Json::array(), success = Json::array();
  for (const auto& [key, value] : kvs) {
    const std::string k = base64_encode(key);
    compare.push_back({{"key", k}, {"target", "CREATE"}, {"create_revision", "0"}});
    success.push_back({{"request_put", {{"key", k}, {"value", base64_encode(value)}}}});
  }
  Json req = {{"compare", compare}, {"success", success}, {"failure", Json::array()}};
  std::string reply;
  const char* path = "/v3/kv/txn";
  if (Status st = post(path, json_text(req), &reply); !st) return st;
  int64_t revision = 0;
  return named(parse_txn_response(reply, created, &revision), endpoint(), path, reply);
}

Status Client::compact(int64_t revision) {
  std::string reply;
  const char* path = "/v3/kv/compaction";
  if (Status st = post(path, json_text({{"revision", std::to_string(revision)}}), &reply); !st)
    return st;
  int64_t now = 0;
  return named(parse_header_response(reply, &now), endpoint(), path, reply);
}

Status Client::watch_prefix(std::string_view prefix, int64_t start_revision,
                            const std::function<bool(const WatchResponse&)>& on_response,
                            const std::atomic<bool>& stop) {
  const char* path = "/v3/watch";
  if (endpoints_.empty()) return {GSYNC_ERR_INVALID, fmt::format("etcd {}: no endpoints", path)};
  auto [key, end] = range_of(prefix);
  Json create = {{"key", key}, {"range_end", end}};
  if (start_revision > 0) create["start_revision"] = std::to_string(start_revision);
  const std::string body = json_text({{"create_request", create}});
  std::string tried;
  for (size_t i = 0; i < endpoints_.size() && !stop.load(); i++) {
    const size_t k = (current_ + i) % endpoints_.size();
    std::string unreachable;
    Status st = watch_on(k, path, body, on_response, stop, &unreachable);
    if (unreachable.empty()) return st;
    tried += fmt::format("{}{} ({})", tried.empty() ? "" : ", ", endpoints_[k], unreachable);
  }
  if (stop.load()) return Status::ok();
  return {GSYNC_ERR_CONNECT, fmt::format("etcd {}: no endpoint reachable: {}", path, tried)};
}

// One watch on one endpoint. *unreachable: why it never reached etcd
// (then the caller tries the next endpoint and the Status is moot).
Status Client::watch_on(size_t index, const char* path, const std::string& body,
                        const std::function<bool(const WatchResponse&)>& on_response,
                        const std::atomic<bool>& stop, std::string* unreachable) {
  const std::string& ep = endpoints_[index];
  // What the handles point at first, so that it outlives them.
  Headers headers;
  char error[CURL_ERROR_SIZE] = "";
  WatchStream w;
  Transfer t;
  if (!t.easy || !t.multi)
    return {GSYNC_ERR_INTERNAL, fmt::format("etcd {}{}: curl handles not made", ep, path)};
  w.easy = t.easy;
  w.on_response = &on_response;
  w.endpoint = ep;
  prepare(t.easy, ep + path, body, headers, error, timeout_);
  curl_easy_setopt(t.easy, CURLOPT_WRITEFUNCTION, on_stream_bytes);
  curl_easy_setopt(t.easy, CURLOPT_WRITEDATA, &w);
  curl_easy_setopt(t.easy, CURLOPT_PREREQFUNCTION, note_connected);
  curl_easy_setopt(t.easy, CURLOPT_PREREQDATA, &w.connected);
  // A member that vanishes without a FIN would leave the stream quiet
  // forever; TCP keepalive notices within about a minute.
  curl_easy_setopt(t.easy, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(t.easy, CURLOPT_TCP_KEEPIDLE, 30L);
  curl_easy_setopt(t.easy, CURLOPT_TCP_KEEPINTVL, 10L);
  t.added = curl_multi_add_handle(t.multi, t.easy) == CURLM_OK;
  if (!t.added)
    return {GSYNC_ERR_INTERNAL, fmt::format("etcd {}{}: curl_multi_add_handle", ep, path)};
  const auto created_by = Clock::now() + timeout_;
  CURLcode ended = CURLE_OK;
  bool running = true;
  while (!w.done && !stop.load()) {
    int still = 0;
    if (curl_multi_perform(t.multi, &still) != CURLM_OK) {
      ended = CURLE_FAILED_INIT;
      running = false;
      break;
    }
    if (still == 0) {
      int left = 0;
      CURLMsg* m = curl_multi_info_read(t.multi, &left);
      ended = m && m->msg == CURLMSG_DONE ? m->data.result : CURLE_OK;
      running = false;
      break;
    }
    if (!w.created && Clock::now() >= created_by) break;
    curl_multi_poll(t.multi, nullptr, 0, kPollMs, nullptr);
  }
  if (w.created) current_ = index;
  if (w.done) return w.result;  // the stream said how it ends
  if (stop.load()) return Status::ok();
  if (running) {  // no "created" in time
    if (!w.connected) *unreachable = fmt::format("no connection within {} ms", timeout_.count());
    return {GSYNC_ERR_TIMEOUT, fmt::format("etcd {}{}: no \"created\" answer within {} ms", ep,
                                           path, timeout_.count())};
  }
  if (!w.connected) {
    *unreachable = error_text(error, ended);
    return {GSYNC_ERR_CONNECT, *unreachable};
  }
  long http = 0;
  curl_easy_getinfo(t.easy, CURLINFO_RESPONSE_CODE, &http);
  if (http != 200 && http != 0) return http_error(ep, path, http, w.error_body);
  if (ended == CURLE_OK)
    return {GSYNC_ERR_CLOSED, fmt::format("etcd {}{}: etcd ended the stream", ep, path)};
  return {GSYNC_ERR_CLOSED,
          fmt::format("etcd {}{}: the stream broke: {}", ep, path, error_text(error, ended))};
}

}  // namespace gsync::cluster::etcd
