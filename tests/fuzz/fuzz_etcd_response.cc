// SPDX-License-Identifier: Apache-2.0
//
// etcd's answers (daemon/cluster/etcd/responses.h), as the JSON gateway's
// bytes reach the daemon: any bytes. Input: one byte that picks the parser
// (watch line, range, keepalive, txn, grant, header, base64, prefix_end),
// then the text.
//
// Properties: no parser throws; a refused answer says why in one line of
// valid UTF-8 (outside text quoted through printable()) and leaves the
// outputs at zero; a lease granted has an ID and a positive TTL, a lease
// kept alive a TTL of at least 0; base64 decodes only what it encodes, and
// what it encodes decodes back; prefix_end is past every key of the prefix.
#include <string>
#include <vector>

#include "daemon/cluster/etcd/responses.h"
#include "daemon/core/text.h"
#include "tests/fuzz/fuzz_target.h"

namespace {

using gsync::Status;

// A refusal's message: not empty, one line, valid UTF-8.
void check_refusal(const Status& st) {
  const std::string& m = st.message();
  FUZZ_CHECK(!m.empty() && gsync::valid_utf8(m));
  for (char c : m) FUZZ_CHECK(static_cast<unsigned char>(c) >= 0x20);
  FUZZ_CHECK(st.code() == GSYNC_ERR_PROTOCOL || st.code() == GSYNC_ERR_REFUSED ||
             st.code() == GSYNC_ERR_TIMEOUT || st.code() == GSYNC_ERR_CONNECT);
}

void check_base64(std::string_view text) {
  using namespace gsync::cluster::etcd;
  std::string out, back;
  if (base64_decode(text, &out))
    FUZZ_CHECK(base64_encode(out) == text);
  else
    FUZZ_CHECK(out.empty());
  FUZZ_CHECK(base64_decode(base64_encode(text), &back) && back == text);
}

void check_prefix_end(std::string_view prefix) {
  using gsync::cluster::etcd::prefix_end;
  const std::string end = prefix_end(prefix);
  // Keys compare as unsigned bytes (etcd's bytes.Compare).
  auto less = [](std::string_view a, std::string_view b) {
    return std::basic_string_view<unsigned char>(reinterpret_cast<const unsigned char*>(a.data()),
                                                 a.size()) <
           std::basic_string_view<unsigned char>(reinterpret_cast<const unsigned char*>(b.data()),
                                                 b.size());
  };
  if (prefix.find_first_not_of('\xff') == std::string_view::npos) {
    FUZZ_CHECK(end == std::string(1, '\0'));  // no end: every key from the start on
    return;
  }
  FUZZ_CHECK(less(prefix, end));
  FUZZ_CHECK(less(std::string(prefix) + "\xff\xff\xff", end));
  FUZZ_CHECK(end.size() <= prefix.size());
}

}  // namespace

GSYNC_FUZZ_TARGET(etcd_response) {
  using namespace gsync::cluster::etcd;
  gsync::fuzz::Input in(data, size);
  const uint8_t which = in.byte();
  const std::string_view text = in.rest();
  Status st;
  switch (which % 8) {
    case 0: {
      WatchResponse w;
      st = parse_watch_response(text, &w);
      if (!st) FUZZ_CHECK(w.events.empty() && !w.created && !w.canceled && w.revision == 0);
      break;
    }
    case 1: {
      std::vector<KeyValue> kvs;
      int64_t rev = 0;
      st = parse_range_response(text, &kvs, &rev);
      if (!st) FUZZ_CHECK(kvs.empty() && rev == 0);
      break;
    }
    case 2: {
      int64_t ttl = -1;
      st = parse_keepalive_response(text, &ttl);
      FUZZ_CHECK(ttl >= 0);
      break;
    }
    case 3: {
      bool ok = true;
      int64_t rev = 0;
      st = parse_txn_response(text, &ok, &rev);
      if (!st) FUZZ_CHECK(!ok);
      break;
    }
    case 4: {
      int64_t id = -1, ttl = -1;
      st = parse_grant_response(text, &id, &ttl);
      FUZZ_CHECK(st ? id != 0 && ttl > 0 : id == 0 && ttl == 0);
      break;
    }
    case 5: {
      int64_t rev = -1;
      st = parse_header_response(text, &rev);
      if (!st) FUZZ_CHECK(rev == 0);
      FUZZ_CHECK(parse_error_response(text).code() == (st ? GSYNC_OK : st.code()) ||
                 st.code() == GSYNC_ERR_PROTOCOL);
      break;
    }
    case 6:
      check_base64(text);
      return 0;
    default:
      check_prefix_end(text);
      return 0;
  }
  if (!st) check_refusal(st);
  return 0;
}
