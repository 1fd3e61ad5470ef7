// SPDX-License-Identifier: Apache-2.0
#include "daemon/transport/tcp/auth.h"

#include <sodium.h>

namespace gsync::transport::tcp {

namespace {

// Distinct labels: a proof one side made never verifies as the other's, so
// a peer cannot answer our challenge by reflecting our own proof back.
constexpr std::string_view kAcceptorLabel = "gsync acceptor";
constexpr std::string_view kConnectorLabel = "gsync connector";

void absorb(crypto_auth_hmacsha256_state* st, std::string_view part) {
  // Length-prefixed, so no two different splits of the bytes hash alike.
  uint32_t len = static_cast<uint32_t>(part.size());
  crypto_auth_hmacsha256_update(st, reinterpret_cast<const unsigned char*>(&len), sizeof len);
  crypto_auth_hmacsha256_update(st, reinterpret_cast<const unsigned char*>(part.data()),
                                part.size());
}

}  // namespace

Status init_crypto() {
  if (sodium_init() < 0)
    return {GSYNC_ERR_INTERNAL, "tcp transport: libsodium failed to initialise (sodium_init)"};
  return Status::ok();
}

Nonce fresh_nonce() {
  Nonce n;
  randombytes_buf(n.data(), n.size());
  return n;
}

Proof prove(std::string_view key, Role role, std::string_view connector_hello,
            std::string_view acceptor_hello) {
  crypto_auth_hmacsha256_state st;
  crypto_auth_hmacsha256_init(&st, reinterpret_cast<const unsigned char*>(key.data()), key.size());
  absorb(&st, role == Role::kAcceptor ? kAcceptorLabel : kConnectorLabel);
  absorb(&st, connector_hello);
  absorb(&st, acceptor_hello);
  Proof out;
  static_assert(kProofBytes == crypto_auth_hmacsha256_BYTES);
  crypto_auth_hmacsha256_final(&st, out.data());
  sodium_memzero(&st, sizeof st);
  return out;
}

bool verify(std::string_view key, Role role, std::string_view connector_hello,
            std::string_view acceptor_hello, std::string_view proof) {
  if (proof.size() != kProofBytes) return false;
  Proof want = prove(key, role, connector_hello, acceptor_hello);
  return sodium_memcmp(want.data(), proof.data(), kProofBytes) == 0;
}

}  // namespace gsync::transport::tcp
