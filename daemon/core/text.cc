// SPDX-License-Identifier: Apache-2.0
#include "daemon/core/text.h"

#include <arpa/inet.h>

#include <algorithm>
#include <charconv>
#include <cstdint>

#include <fmt/format.h>

namespace gsync {

namespace {

constexpr std::string_view kEllipsis = "...";

// The length of the well-formed UTF-8 sequence at s[i] (RFC 3629, table 3-7
// of the Unicode standard) and its code point; 0 when there is none.
size_t sequence_at(std::string_view s, size_t i, uint32_t* cp) {
  auto byte = [&](size_t k) { return static_cast<uint8_t>(s[k]); };
  uint8_t b0 = byte(i);
  if (b0 < 0x80) {
    *cp = b0;
    return 1;
  }
  size_t len;
  uint8_t lo = 0x80, hi = 0xbf;  // the allowed range of the second byte
  if (b0 >= 0xc2 && b0 <= 0xdf) {
    len = 2;
  } else if (b0 >= 0xe0 && b0 <= 0xef) {
    len = 3;
    if (b0 == 0xe0) lo = 0xa0;  // overlong
    if (b0 == 0xed) hi = 0x9f;  // surrogates U+D800..U+DFFF
  } else if (b0 >= 0xf0 && b0 <= 0xf4) {
    len = 4;
    if (b0 == 0xf0) lo = 0x90;  // overlong
    if (b0 == 0xf4) hi = 0x8f;  // past U+10FFFF
  } else {
    return 0;
  }
  if (s.size() - i < len) return 0;
  uint8_t b1 = byte(i + 1);
  if (b1 < lo || b1 > hi) return 0;
  uint32_t v = b0 & (0xff >> (len + 1));
  for (size_t k = 1; k < len; k++) {
    uint8_t b = byte(i + k);
    if ((b & 0xc0) != 0x80) return 0;
    v = (v << 6) | (b & 0x3f);
  }
  *cp = v;
  return len;
}

bool is_control(uint32_t cp) { return cp < 0x20 || (cp >= 0x7f && cp <= 0x9f); }

// What printable() writes for the byte or character at s[i]; *used is how
// many input bytes it stands for. Empty when it passes unchanged.
std::string_view escape_at(std::string_view s, size_t i, size_t* used, char (&buf)[5]) {
  static constexpr char kHex[] = "0123456789abcdef";
  uint32_t cp = 0;
  size_t len = sequence_at(s, i, &cp);
  *used = len ? len : 1;
  if (len && !is_control(cp) && cp != '\\') return {};
  switch (len ? cp : 0x100) {
    case '\n':
      return "\\n";
    case '\r':
      return "\\r";
    case '\t':
      return "\\t";
    case '\\':
      return "\\\\";
    default:
      break;
  }
  // A control character or a byte of no valid sequence: each byte alone.
  *used = 1;
  auto b = static_cast<uint8_t>(s[i]);
  buf[0] = '\\';
  buf[1] = 'x';
  buf[2] = kHex[b >> 4];
  buf[3] = kHex[b & 0xf];
  buf[4] = 0;
  return {buf, 4};
}

}  // namespace

bool valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    uint32_t cp;
    size_t len = sequence_at(s, i, &cp);
    if (len == 0) return false;
    i += len;
  }
  return true;
}

bool is_printable(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    size_t used;
    char buf[5];
    if (!escape_at(s, i, &used, buf).empty()) return false;
    i += used;
  }
  return true;
}

std::string printable(std::string_view s, size_t max_bytes) {
  max_bytes = std::max(max_bytes, kEllipsis.size());
  std::string out;
  out.reserve(std::min(s.size(), max_bytes) + kEllipsis.size());
  size_t cut = 0;  // the last boundary that leaves room for the ellipsis
  for (size_t i = 0; i < s.size() && out.size() <= max_bytes;) {
    size_t used;
    char buf[5];
    std::string_view esc = escape_at(s, i, &used, buf);
    if (esc.empty()) {
      out.append(s.substr(i, used));
    } else {
      out.append(esc);
    }
    i += used;
    if (out.size() + kEllipsis.size() <= max_bytes) cut = out.size();
    if (i == s.size() && out.size() <= max_bytes) return out;
  }
  if (out.size() <= max_bytes) return out;
  out.resize(cut);
  out.append(kEllipsis);
  return out;
}

std::string parse_host_port(const std::string& text, std::string* host, uint16_t* port) {
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos)
    return fmt::format("\"{}\" is not HOST:PORT (e.g. 127.0.0.1:9464)", printable(text, 96));
  std::string h = text.substr(0, colon);
  const std::string p = text.substr(colon + 1);
  if (h == "localhost") h = "127.0.0.1";
  in_addr a{};
  if (inet_pton(AF_INET, h.c_str(), &a) != 1)
    return fmt::format("\"{}\": \"{}\" is not an IPv4 address", printable(text, 96),
                       printable(h, 64));
  unsigned v = 0;
  auto [end, ec] = std::from_chars(p.data(), p.data() + p.size(), v);
  if (p.empty() || ec != std::errc() || end != p.data() + p.size() || v > 65535)
    return fmt::format("\"{}\": \"{}\" is not a port (0-65535)", printable(text, 96),
                       printable(p, 32));
  *host = h;
  *port = static_cast<uint16_t>(v);
  return "";
}

}  // namespace gsync
