// SPDX-License-Identifier: Apache-2.0
//
// What etcd's JSON gateway (etcd v3.4, /v3/...) answers, read without trust:
// the bytes come over the network, so every parser here returns a Status
// naming the field that is wrong instead of throwing, and all of them are
// fuzzed (tests/fuzz/fuzz_etcd_response.cc). Kept apart from client.h so
// that the parsers build without libcurl.
//
// The gateway writes protobuf messages as proto3 JSON: int64 fields are
// decimal strings ("123"; numbers are accepted too), bytes fields (keys,
// values) base64, and every field at its default value is left out - a
// PUT watch event has no "type", a failed txn no "succeeded", an expired
// lease's keepalive no "TTL". A missing field therefore reads as 0 / false /
// "" unless it is one the answer cannot be without.
//
// An answer may instead be an error: {"error":"..","message":"..","code":N}
// for a unary call (with an HTTP status other than 200), or
// {"error":{"grpc_code":N,"message":".."}} inside a stream. Every parser
// turns one into the Status of parse_error_response. A parser that fails
// leaves its outputs at zero / empty.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/core/status.h"

namespace gsync::cluster::etcd {

struct KeyValue {
  std::string key, value;
  int64_t create_revision = 0, mod_revision = 0, version = 0, lease = 0;
};

struct WatchEvent {
  enum class Kind { kPut, kDelete } kind = Kind::kPut;
  KeyValue kv;
};

// What one line of the watch stream said.
struct WatchResponse {
  bool created = false, canceled = false;
  int64_t revision = 0, compact_revision = 0;
  std::string cancel_reason;
  std::vector<WatchEvent> events;
};

// OK when body is not one of etcd's error answers; else the error it
// reports: gRPC DEADLINE_EXCEEDED (4) is GSYNC_ERR_TIMEOUT, UNAVAILABLE (14)
// GSYNC_ERR_CONNECT, anything else GSYNC_ERR_REFUSED, each with etcd's
// message and gRPC code. A body that is not JSON is OK here: the caller's
// parser says what is wrong with it.
Status parse_error_response(std::string_view body);
// The gRPC code of an error answer (0 when body is none).
int error_grpc_code(std::string_view body);

// Answers the client needs only the header of (put, deleterange, revoke,
// compaction): *revision is the store's revision after the call.
Status parse_header_response(std::string_view body, int64_t* revision);
Status parse_range_response(std::string_view body, std::vector<KeyValue>* kvs, int64_t* revision);
Status parse_watch_response(std::string_view line, WatchResponse* out);
Status parse_grant_response(std::string_view body, int64_t* lease_id, int64_t* ttl);
// *ttl_left 0: the lease is gone (etcd answers an expired or unknown lease
// with its ID and no TTL, HTTP 200).
Status parse_keepalive_response(std::string_view body, int64_t* ttl_left);
Status parse_txn_response(std::string_view body, bool* succeeded, int64_t* revision);

// RFC 4648 base64 with padding, the encoding of protobuf bytes in JSON.
// Decoding is strict: only canonical text (padding present, unused bits
// zero) decodes, so decode and encode are each other's inverse.
std::string base64_encode(std::string_view data);
bool base64_decode(std::string_view text, std::string* out);

// The key just after every key that starts with prefix (etcd's range_end
// for a prefix): its last byte below 0xff incremented, what follows it cut.
// "\0" - every key from the start key on - when there is no such byte.
std::string prefix_end(std::string_view prefix);

}  // namespace gsync::cluster::etcd
