// SPDX-License-Identifier: Apache-2.0
#include "daemon/cluster/etcd/responses.h"

#include <charconv>
#include <limits>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "daemon/core/text.h"

namespace gsync::cluster::etcd {

namespace {

using Json = nlohmann::json;

constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

// gRPC status codes etcd's errors carry (grpc/codes).
constexpr int kGrpcDeadlineExceeded = 4;
constexpr int kGrpcUnavailable = 14;

// Each reader below returns "" or what is wrong with the field, named by
// its path in the answer ("kvs[2].key: not base64"), so a bad answer says
// where it went wrong.
using Problem = std::string;

const Json* member(const Json& obj, const char* name) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(name);
  return it == obj.end() ? nullptr : &*it;
}

std::string path_of(const std::string& at, const char* name) {
  return at.empty() ? name : at + "." + name;
}

// proto3 JSON writes int64 as a decimal string; a number is accepted too.
// Absent is 0 (proto3 leaves out defaults).
Problem read_int64(const Json& obj, const char* name, const std::string& at, int64_t* out) {
  *out = 0;
  const Json* v = member(obj, name);
  if (!v) return {};
  const std::string where = path_of(at, name);
  if (v->is_number_integer() && !v->is_number_unsigned()) {
    *out = v->get<int64_t>();
    return {};
  }
  if (v->is_number_unsigned()) {
    uint64_t u = v->get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      return where + ": past the int64 range";
    *out = static_cast<int64_t>(u);
    return {};
  }
  if (!v->is_string()) return where + ": not an int64 (a string or an integer)";
  const std::string& s = v->get_ref<const std::string&>();
  const char* end = s.data() + s.size();
  auto [p, ec] = std::from_chars(s.data(), end, *out);
  if (s.empty() || ec != std::errc() || p != end) {
    *out = 0;
    return where + ": \"" + printable(s, 40) + "\" is not an int64";
  }
  return {};
}

Problem read_bool(const Json& obj, const char* name, const std::string& at, bool* out) {
  *out = false;
  const Json* v = member(obj, name);
  if (!v) return {};
  if (!v->is_boolean()) return path_of(at, name) + ": not a boolean";
  *out = v->get<bool>();
  return {};
}

Problem read_text(const Json& obj, const char* name, const std::string& at, std::string* out) {
  out->clear();
  const Json* v = member(obj, name);
  if (!v) return {};
  if (!v->is_string()) return path_of(at, name) + ": not a string";
  *out = v->get_ref<const std::string&>();
  return {};
}

// A bytes field: base64 in a string.
Problem read_bytes(const Json& obj, const char* name, const std::string& at, std::string* out) {
  std::string text;
  if (Problem p = read_text(obj, name, at, &text); !p.empty()) return p;
  if (!base64_decode(text, out)) return path_of(at, name) + ": not base64";
  return {};
}

// The header's revision; the header itself may be absent (a canceled
// watch's has no revision either).
Problem read_revision(const Json& obj, const std::string& at, int64_t* revision) {
  *revision = 0;
  const Json* h = member(obj, "header");
  if (!h) return {};
  if (!h->is_object()) return path_of(at, "header") + ": not an object";
  return read_int64(*h, "revision", path_of(at, "header"), revision);
}

Problem read_kv(const Json& v, const std::string& at, KeyValue* kv) {
  if (!v.is_object()) return at + ": not an object";
  if (!member(v, "key")) return at + ".key: missing";
  Problem p = read_bytes(v, "key", at, &kv->key);
  if (p.empty()) p = read_bytes(v, "value", at, &kv->value);
  if (p.empty()) p = read_int64(v, "create_revision", at, &kv->create_revision);
  if (p.empty()) p = read_int64(v, "mod_revision", at, &kv->mod_revision);
  if (p.empty()) p = read_int64(v, "version", at, &kv->version);
  if (p.empty()) p = read_int64(v, "lease", at, &kv->lease);
  return p;
}

// A watch event's type: absent for PUT (proto3 leaves out the enum's
// default), "DELETE" for a delete; the enum's numbers are accepted too.
Problem read_event(const Json& v, const std::string& at, WatchEvent* ev) {
  if (!v.is_object()) return at + ": not an object";
  ev->kind = WatchEvent::Kind::kPut;
  if (const Json* t = member(v, "type")) {
    if ((t->is_string() && *t == "DELETE") || (t->is_number_integer() && *t == 1)) {
      ev->kind = WatchEvent::Kind::kDelete;
    } else if (!((t->is_string() && *t == "PUT") || (t->is_number_integer() && *t == 0))) {
      return at + ".type: neither PUT nor DELETE";
    }
  }
  const Json* kv = member(v, "kv");
  if (!kv) return at + ".kv: missing";
  return read_kv(*kv, at + ".kv", &ev->kv);
}

// The error an answer reports, if it is one; *grpc_code 0 when not.
Status error_of(const Json& doc, int* grpc_code) {
  *grpc_code = 0;
  const Json* e = member(doc, "error");
  const Json* inner = e && e->is_object() ? e : &doc;
  const Json* code = member(*inner, inner == e ? "grpc_code" : "code");
  const Json* message = member(*inner, "message");
  bool is_error = (e && e->is_object()) ||
                  (e && e->is_string() && !e->get_ref<const std::string&>().empty()) ||
                  (code && message && !member(doc, "header") && !member(doc, "result"));
  if (!is_error) return Status::ok();
  std::string text = message && message->is_string() ? message->get<std::string>() : "";
  if (text.empty() && e && e->is_string()) text = e->get<std::string>();
  if (code && code->is_number_integer() && *code >= 0 && *code <= 1000)
    *grpc_code = code->get<int>();
  int gsync_code = *grpc_code == kGrpcDeadlineExceeded ? GSYNC_ERR_TIMEOUT
                   : *grpc_code == kGrpcUnavailable    ? GSYNC_ERR_CONNECT
                                                       : GSYNC_ERR_REFUSED;
  return {gsync_code, fmt::format("etcd says: {} (gRPC code {})",
                                  text.empty() ? "no message" : printable(text, 300), *grpc_code)};
}

// Parses body as one JSON object that is not an error answer.
Status document_of(std::string_view body, const char* what, Json* doc) {
  *doc = Json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (doc->is_discarded()) return {GSYNC_ERR_PROTOCOL, fmt::format("{} answer: not JSON", what)};
  if (!doc->is_object())
    return {GSYNC_ERR_PROTOCOL, fmt::format("{} answer: not a JSON object", what)};
  int grpc_code;
  return error_of(*doc, &grpc_code);
}

Status problem(const char* what, const Problem& p) {
  if (p.empty()) return Status::ok();
  return {GSYNC_ERR_PROTOCOL, fmt::format("{} answer: {}", what, p)};
}

int value_of(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

}  // namespace

Status parse_error_response(std::string_view body) {
  Json doc = Json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  int grpc_code;
  if (doc.is_discarded()) return Status::ok();
  return error_of(doc, &grpc_code);
}

int error_grpc_code(std::string_view body) {
  Json doc = Json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  int grpc_code = 0;
  if (!doc.is_discarded()) (void)error_of(doc, &grpc_code);
  return grpc_code;
}

Status parse_header_response(std::string_view body, int64_t* revision) {
  *revision = 0;
  Json doc;
  if (Status st = document_of(body, "etcd", &doc); !st) return st;
  if (!member(doc, "header")) return problem("etcd", "header: missing");
  return problem("etcd", read_revision(doc, "", revision));
}

Status parse_range_response(std::string_view body, std::vector<KeyValue>* kvs, int64_t* revision) {
  kvs->clear();
  *revision = 0;
  Json doc;
  if (Status st = document_of(body, "range", &doc); !st) return st;
  if (!member(doc, "header")) return problem("range", "header: missing");
  // Outputs are written only once the whole answer parsed: a caller that
  // gets an error sees no revision (found by fuzz_etcd_response: a revision
  // stayed behind when "kvs" was not an array).
  int64_t rev = 0;
  if (Problem p = read_revision(doc, "", &rev); !p.empty()) return problem("range", p);
  const Json* list = member(doc, "kvs");
  if (list && !list->is_array()) return problem("range", "kvs: not an array");
  if (list) {
    kvs->resize(list->size());
    for (size_t i = 0; i < list->size(); i++) {
      Problem p = read_kv((*list)[i], fmt::format("kvs[{}]", i), &(*kvs)[i]);
      if (!p.empty()) {
        kvs->clear();
        return problem("range", p);
      }
    }
  }
  *revision = rev;  // no "kvs": no key in the range
  return Status::ok();
}

Status parse_watch_response(std::string_view line, WatchResponse* out) {
  *out = WatchResponse{};
  Json doc;
  if (Status st = document_of(line, "watch", &doc); !st) return st;
  const Json* r = member(doc, "result");
  if (!r) return problem("watch", "result: missing");
  if (!r->is_object()) return problem("watch", "result: not an object");
  Problem p = read_revision(*r, "result", &out->revision);
  if (p.empty()) p = read_bool(*r, "created", "result", &out->created);
  if (p.empty()) p = read_bool(*r, "canceled", "result", &out->canceled);
  if (p.empty()) p = read_int64(*r, "compact_revision", "result", &out->compact_revision);
  if (p.empty()) p = read_text(*r, "cancel_reason", "result", &out->cancel_reason);
  const Json* events = member(*r, "events");
  if (p.empty() && events && !events->is_array()) p = "result.events: not an array";
  if (p.empty() && events) {
    out->events.resize(events->size());
    for (size_t i = 0; i < events->size() && p.empty(); i++)
      p = read_event((*events)[i], fmt::format("result.events[{}]", i), &out->events[i]);
  }
  if (!p.empty()) *out = WatchResponse{};
  return problem("watch", p);
}

Status parse_grant_response(std::string_view body, int64_t* lease_id, int64_t* ttl) {
  *lease_id = 0;
  *ttl = 0;
  Json doc;
  if (Status st = document_of(body, "lease grant", &doc); !st) return st;
  Problem p = read_int64(doc, "ID", "", lease_id);
  if (p.empty()) p = read_int64(doc, "TTL", "", ttl);
  if (p.empty() && *lease_id == 0) p = "ID: missing";
  if (p.empty() && *ttl <= 0) p = fmt::format("TTL: {}, not a positive number of seconds", *ttl);
  if (!p.empty()) *lease_id = *ttl = 0;
  return problem("lease grant", p);
}

Status parse_keepalive_response(std::string_view body, int64_t* ttl_left) {
  *ttl_left = 0;
  Json doc;
  if (Status st = document_of(body, "lease keepalive", &doc); !st) return st;
  const Json* r = member(doc, "result");
  if (!r) return problem("lease keepalive", "result: missing");
  if (!r->is_object()) return problem("lease keepalive", "result: not an object");
  int64_t id = 0;
  Problem p = read_int64(*r, "ID", "result", &id);
  if (p.empty()) p = read_int64(*r, "TTL", "result", ttl_left);
  // etcd answers a lease it no longer has with its ID and no TTL (0); a
  // negative TTL means the same.
  if (*ttl_left < 0 || !p.empty()) *ttl_left = 0;
  return problem("lease keepalive", p);
}

Status parse_txn_response(std::string_view body, bool* succeeded, int64_t* revision) {
  *succeeded = false;
  *revision = 0;
  Json doc;
  if (Status st = document_of(body, "txn", &doc); !st) return st;
  if (!member(doc, "header")) return problem("txn", "header: missing");
  Problem p = read_revision(doc, "", revision);
  if (p.empty()) p = read_bool(doc, "succeeded", "", succeeded);
  if (!p.empty()) {
    *succeeded = false;
    *revision = 0;
  }
  return problem("txn", p);
}

std::string base64_encode(std::string_view data) {
  std::string out;
  out.reserve((data.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= data.size(); i += 3) {
    uint32_t v = uint32_t(uint8_t(data[i])) << 16 | uint32_t(uint8_t(data[i + 1])) << 8 |
                 uint8_t(data[i + 2]);
    for (int s = 18; s >= 0; s -= 6) out += kAlphabet[(v >> s) & 63];
  }
  if (size_t rest = data.size() - i; rest > 0) {
    uint32_t v = uint32_t(uint8_t(data[i])) << 16;
    if (rest == 2) v |= uint32_t(uint8_t(data[i + 1])) << 8;
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += rest == 2 ? kAlphabet[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

bool base64_decode(std::string_view text, std::string* out) {
  out->clear();
  if (text.size() % 4 != 0) return false;
  size_t pad = 0;
  while (pad < 2 && pad < text.size() && text[text.size() - 1 - pad] == '=') pad++;
  std::string bytes;
  bytes.reserve(text.size() / 4 * 3);
  uint32_t v = 0;
  for (size_t i = 0; i < text.size() - pad; i++) {
    int d = value_of(text[i]);
    if (d < 0) return false;
    v = v << 6 | uint32_t(d);
    if (i % 4 == 3) {
      bytes += char(v >> 16);
      bytes += char(v >> 8);
      bytes += char(v);
      v = 0;
    }
  }
  // The last group: 2 or 3 digits carry 1 or 2 bytes; the bits below them
  // must be zero (canonical), or two texts would decode to the same bytes.
  if (pad == 2) {
    if (v & 0xf) return false;
    bytes += char(v >> 4);
  } else if (pad == 1) {
    if (v & 0x3) return false;
    bytes += char(v >> 10);
    bytes += char(v >> 2);
  }
  *out = std::move(bytes);
  return true;
}

std::string prefix_end(std::string_view prefix) {
  std::string end(prefix);
  while (!end.empty()) {
    auto last = static_cast<unsigned char>(end.back());
    if (last < 0xff) {
      end.back() = static_cast<char>(last + 1);
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');
}

}  // namespace gsync::cluster::etcd
