// SPDX-License-Identifier: Apache-2.0
//
// A small etcd v3 client for the daemon's membership: leases, puts, prefix
// ranges, one create-if-absent transaction and prefix watches, over etcd's
// JSON gateway (HTTP POST of JSON to /v3/..., etcd 3.4) with libcurl. The
// answers are read by the parsers of responses.h.
//
// Errors (gsync::Status, never an exception):
//   GSYNC_ERR_CONNECT   no endpoint could be reached; names every endpoint
//                       tried and curl's error for each.
//   GSYNC_ERR_TIMEOUT   an endpoint took the call but did not answer in time.
//   GSYNC_ERR_PROTOCOL  an answer that does not parse; names the call and
//                       quotes the start of the answer.
//   GSYNC_ERR_REFUSED   etcd answered with an error (its message and gRPC
//                       code), e.g. a put on a lease that expired.
//   GSYNC_ERR_CLOSED    a watch that etcd canceled or whose stream ended.
// Every message names the endpoint and the path of the call.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "daemon/cluster/etcd/responses.h"
#include "daemon/core/status.h"

namespace gsync::cluster::etcd {

// Used from one thread at a time: the daemon gives each thread its own.
class Client {
 public:
  // endpoints: "http://127.0.0.1:2379", ...; a call goes to the endpoint that
  // answered last and, when it cannot be reached, to the next (each once).
  // timeout bounds every unary call to one endpoint (connect + answer), so a
  // call that fails over takes at most one timeout per endpoint.
  Client(std::vector<std::string> endpoints, std::chrono::milliseconds timeout);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  Status grant(int64_t ttl_s, int64_t* lease_id);
  // *ttl_left 0: the lease is gone (expired or revoked).
  Status keepalive(int64_t lease_id, int64_t* ttl_left);
  // A lease that is already gone is no error: either way it is gone after.
  Status revoke(int64_t lease_id);
  Status put(std::string_view key, std::string_view value, int64_t lease_id = 0);
  Status del(std::string_view key);
  Status range_prefix(std::string_view prefix, std::vector<KeyValue>* kvs, int64_t* revision);
  // Creates every key with its value in one transaction if none of them
  // exists yet; *created says whether it did. etcd takes at most 128 keys
  // in one transaction (--max-txn-ops) and refuses more.
  Status create_all(const std::vector<std::pair<std::string, std::string>>& kvs, bool* created);
  // Drops the history before revision (watches from before it are then
  // canceled with compact_revision).
  Status compact(int64_t revision);

  // Streams the prefix's changes from start_revision (0: from now), calling
  // on_response for every line after the "created" one. Returns OK when
  // stop becomes true (looked at at least every 100 ms, also while the
  // connection is quiet) or when on_response returns false; an error when
  // the stream fails or ends, naming the endpoint: GSYNC_ERR_CLOSED when
  // etcd canceled the watch (on_response has seen that line: a
  // compact_revision, a cancel_reason) or closed the stream. Connecting and
  // the "created" answer are bounded by the timeout, the stream after that
  // only by stop.
  Status watch_prefix(std::string_view prefix, int64_t start_revision,
                      const std::function<bool(const WatchResponse&)>& on_response,
                      const std::atomic<bool>& stop);

  // The endpoint that answered last ("http://127.0.0.1:2379").
  std::string endpoint() const;

 private:
  struct Answer;
  // One unary call: the JSON body to path on the endpoints in turn; *reply
  // is the answer of HTTP 200, any other is the error it reports.
  Status post(const char* path, const std::string& body, std::string* reply,
              int* grpc_code = nullptr);
  Answer post_to(const std::string& endpoint, const char* path, const std::string& body);
  Status watch_on(size_t index, const char* path, const std::string& body,
                  const std::function<bool(const WatchResponse&)>& on_response,
                  const std::atomic<bool>& stop, std::string* unreachable);

  std::vector<std::string> endpoints_;
  std::chrono::milliseconds timeout_;
  size_t current_ = 0;    // the endpoint that answered last
  void* easy_ = nullptr;  // the unary calls' CURL*, kept for its open connection
};

}  // namespace gsync::cluster::etcd
