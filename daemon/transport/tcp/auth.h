// SPDX-License-Identifier: Apache-2.0
//
// The cluster key's part in the TCP handshake: a mutual challenge-response
// over each connection (docs/transport.md, "Authentication"). The connector
// sends a fresh nonce in HELLO; the acceptor answers in HELLO_ACK with its
// own nonce and HMAC-SHA-256(key, "gsync acceptor" || both hellos); the
// connector checks it and answers AUTH with HMAC-SHA-256(key, "gsync
// connector" || both hellos). The hellos carry the nonces and every identity
// each side claimed, so a proof is bound to one connection and one pair of
// claims, and the two labels keep one side's proof from passing as the
// other's. libsodium does the cryptography; nothing here is hand-written.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "daemon/core/status.h"
#include "daemon/transport/tcp/frame.h"

namespace gsync::transport::tcp {

enum class Role : uint8_t { kAcceptor, kConnector };

using Proof = std::array<uint8_t, kProofBytes>;

// libsodium initialised (sodium_init: idempotent, thread-safe).
Status init_crypto();
// kNonceBytes from the system's CSPRNG (randombytes_buf).
Nonce fresh_nonce();
// role's proof: connector_hello is the HELLO payload, acceptor_hello the
// hello part of HELLO_ACK, both as they went over the wire.
Proof prove(std::string_view key, Role role, std::string_view connector_hello,
            std::string_view acceptor_hello);
// Whether proof (kProofBytes) is role's proof under key; constant time.
bool verify(std::string_view key, Role role, std::string_view connector_hello,
            std::string_view acceptor_hello, std::string_view proof);

// One connection's handshake as far as it has got: what the proofs cover.
struct Handshake {
  std::string connector_hello;  // the HELLO payload, as sent or received
  std::string acceptor_hello;   // the hello part of HELLO_ACK
  // Acceptor: the connector's HELLO, adopted into its pair only once its
  // AUTH has checked out; awaiting_auth from HELLO_ACK sent until then.
  Hello claimed;
  bool awaiting_auth = false;
};

}  // namespace gsync::transport::tcp
