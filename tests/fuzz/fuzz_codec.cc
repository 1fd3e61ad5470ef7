// SPDX-License-Identifier: Apache-2.0
//
// The compression codecs' decoders (daemon/reduce/codec.h): what a peer's
// encoded chunk goes through before a byte of it is added to a tensor.
// Input: a mode byte, a count (u16), then
//   mode 0: an encoding, given to decode and decode_add;
//   mode 1: codec, block and top-k bytes, then fp32 values to encode;
//   mode 2: k (2..4) and a split point per input, then k encodings for
//           int8_sum.
// Properties, for any input: a decoder that refuses says why and leaves
// the tensor as it was; one that accepts agrees with the other decoder
// (decode_add onto zeros gives decode's values); int8_sum leaves the tensor
// as it was when it refuses; whatever the encoders emit is at most
// max_encoded_bytes, decodes, and decodes to what write_back left in x; the
// exact sparse encoding gives back every value's bits.
#include <cmath>
#include <cstring>
#include <vector>

#include "daemon/reduce/codec.h"
#include "tests/fuzz/fuzz_target.h"

namespace {

using namespace gsync::reduce;

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// decode's and decode_add's values agree, but for +0 + -0 = +0 and a NaN's
// payload, which an addition may change.
bool agree(float decoded, float added) {
  if (std::isnan(decoded)) return std::isnan(added);
  if (decoded == 0.0f) return added == 0.0f;
  return same_bits(decoded, added);
}

void check_decoders(const uint8_t* in, size_t len, size_t count) {
  const float kBefore = 3.25f;
  std::vector<float> a(count, kBefore), b(count, kBefore);
  std::string why = decode(in, len, count, a.data());
  std::string why_add = decode_add(in, len, count, b.data());
  FUZZ_CHECK(why.empty() == why_add.empty());
  if (!why.empty()) {
    for (size_t i = 0; i < count; i++) FUZZ_CHECK(same_bits(a[i], kBefore) && same_bits(b[i], kBefore));
    return;
  }
  std::vector<float> zeros(count, 0.0f);
  FUZZ_CHECK(decode_add(in, len, count, zeros.data()).empty());
  for (size_t i = 0; i < count; i++) FUZZ_CHECK(agree(a[i], zeros[i]));
}

void check_encoders(gsync::fuzz::Input& in, size_t count) {
  CodecParams p;
  p.codec = static_cast<Codec>(in.byte() % 5);
  p.block = 64u * (1u + in.byte() % 32);
  p.topk_fraction = (1 + in.byte()) / 256.0;
  FUZZ_CHECK(check_params(p).empty());
  std::vector<float> x(count, 0.0f), residual(count, 0.0f);
  for (size_t i = 0; i < count && in.left() >= 4; i++) x[i] = in.take<float>();
  const std::vector<float> original = x;
  std::vector<uint8_t> out(max_encoded_bytes(p, count));
  const size_t len = encode(p, x.data(), residual.data(), count, nullptr, true, out.data());
  FUZZ_CHECK(len <= out.size());
  std::vector<float> decoded(count, 1.0f);
  FUZZ_CHECK(decode(out.data(), len, count, decoded.data()).empty());
  for (size_t i = 0; i < count; i++) {
    FUZZ_CHECK(same_bits(decoded[i], x[i]) || (std::isnan(decoded[i]) && std::isnan(x[i])));
    FUZZ_CHECK(std::isfinite(residual[i]) || !std::isfinite(original[i]));
  }
  std::vector<uint8_t> exact(max_encoded_bytes({}, count));
  const size_t elen = encode_exact_sparse(original.data(), count, exact.data());
  FUZZ_CHECK(elen <= exact.size());
  FUZZ_CHECK(decode(exact.data(), elen, count, decoded.data()).empty());
  for (size_t i = 0; i < count; i++)
    FUZZ_CHECK(same_bits(decoded[i], original[i]) || (original[i] == 0.0f && decoded[i] == 0.0f));
}

void check_int8_sum(gsync::fuzz::Input& in, size_t count) {
  const size_t k = 2 + in.byte() % 3;
  std::vector<size_t> cut(k);
  for (size_t j = 0; j < k; j++) cut[j] = in.take<uint16_t>();
  std::string_view rest = in.rest();
  std::vector<const uint8_t*> parts(k);
  std::vector<size_t> lens(k);
  size_t at = 0;
  for (size_t j = 0; j < k; j++) {
    const size_t n = j + 1 == k ? rest.size() - at : std::min(cut[j], rest.size() - at);
    parts[j] = reinterpret_cast<const uint8_t*>(rest.data()) + at;
    lens[j] = n;
    at += n;
  }
  const float kBefore = -1.5f;
  std::vector<float> dst(count, kBefore);
  if (!int8_sum(parts.data(), lens.data(), k, count, dst.data()).empty())
    for (float v : dst) FUZZ_CHECK(same_bits(v, kBefore));
}

}  // namespace

GSYNC_FUZZ_TARGET(codec) {
  gsync::fuzz::Input in(data, size);
  const uint8_t mode = in.byte() % 3;
  const size_t count = in.take<uint16_t>() % 4097;
  switch (mode) {
    case 0: {
      std::string_view rest = in.rest();
      check_decoders(reinterpret_cast<const uint8_t*>(rest.data()), rest.size(), count);
      break;
    }
    case 1:
      check_encoders(in, count);
      break;
    default:
      check_int8_sum(in, count);
  }
  return 0;
}
