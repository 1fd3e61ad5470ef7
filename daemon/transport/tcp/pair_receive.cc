// SPDX-License-Identifier: Apache-2.0
//
// Pair's receive half: what a received frame means (HELLO_ACK, control,
// heartbeat, a WRITE header and its pieces landing straight in the target
// region), and delivering a write once all of it has landed.
#include <algorithm>
#include <cstring>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "daemon/transport/tcp/context.h"
#include "daemon/transport/tcp/pair.h"

namespace gsync::transport::tcp {

// --- Receiving --------------------------------------------------------------

void Pair::on_received(Connection* c) {
  switch (c->rx_stage()) {
    case Connection::RxStage::kHeader:
      on_header(c);
      return;
    case Connection::RxStage::kRegionPayload:
    case Connection::RxStage::kDiscardPayload:
      on_piece_landed(c);
      return;
    case Connection::RxStage::kSmallPayload:
      break;
  }
  switch (static_cast<FrameType>(c->header().type)) {
    case FrameType::kHelloAck:
      on_hello_ack(c);
      return;
    case FrameType::kRefuse:
      fail(fmt::format("{} refused the link: {}", describe_, c->small_payload()),
           GSYNC_ERR_REFUSED);
      return;
    case FrameType::kControl: {
      bytes_received_ += c->header().length;
      // The payload buffer stays untouched until the next CONTROL header has
      // been received, which cannot happen before this handler returns.
      c->expect_header();
      ctx_.handlers().on_control(peer_, c->small_payload());
      return;
    }
    default:
      return;  // on_header lets no other type have a payload
  }
}

void Pair::on_header(Connection* c) {
  const FrameHeader h = c->header();
  std::string_view name = frame_type_name(h.type);
  if (h.magic != kFrameMagic) {
    malformed(c, fmt::format("bad magic 0x{:08x} (expected 0x{:08x})", h.magic, kFrameMagic));
    return;
  }
  if (h.version != kFrameVersion) {
    malformed(c, fmt::format("frame version {} (this daemon speaks {})", h.version, kFrameVersion));
    return;
  }
  if (h.flags != 0) {
    malformed(c, fmt::format("{} frame with flags 0x{:02x}; none are defined", name, h.flags));
    return;
  }
  auto type = static_cast<FrameType>(h.type);
  if (c->outbound && type == FrameType::kRefuse && h.length <= kMaxRefuse) {
    // The acceptor may refuse after HELLO_ACK too: it adopts a stream only
    // once its AUTH is in, and may find the link's state against it then.
    if (h.length == 0)
      fail(fmt::format("{} refused the link (no reason given)", describe_), GSYNC_ERR_REFUSED);
    else
      c->expect_small(h.length);
    return;
  }
  if (c->outbound && !c->acked) {
    // Until its HELLO_ACK a connection we opened may only be answered.
    if (type == FrameType::kHelloAck && h.length > kProofBytes && h.length <= kMaxHelloAck) {
      c->expect_small(h.length);
    } else {
      malformed(c, fmt::format("a {} frame of {} bytes where HELLO_ACK or REFUSE was due", name,
                               h.length));
    }
    return;
  }
  if (c->phase != Connection::Phase::kOpen || phase_ != Phase::kUp) {
    malformed(c, fmt::format("a {} frame before the handshake completed", name));
    return;
  }
  switch (type) {
    case FrameType::kControl:
      if (c->stream != 0) {
        malformed(c, fmt::format("CONTROL frame on stream {} (control travels on stream 0 only, "
                                 "which keeps it in order)",
                                 c->stream));
      } else if (h.length > kMaxControl) {
        malformed(c, fmt::format("CONTROL frame of {} bytes (at most {})", h.length, kMaxControl));
      } else if (h.length == 0) {
        c->expect_header();
        ctx_.handlers().on_control(peer_, std::string_view());
      } else {
        c->expect_small(h.length);
      }
      return;
    case FrameType::kWrite:
      on_write_header(c, h);
      return;
    case FrameType::kHeartbeat:
      if (h.length != 0)
        malformed(c, fmt::format("HEARTBEAT frame with {} payload bytes", h.length));
      else
        c->expect_header();
      return;
    case FrameType::kHello:
    case FrameType::kHelloAck:
    case FrameType::kRefuse:
    case FrameType::kAuth:
      malformed(c, fmt::format("a {} frame on an established link", name));
      return;
  }
  malformed(c, fmt::format("unknown frame type {}", h.type));
}

void Pair::on_write_header(Connection* c, const FrameHeader& h) {
  std::string why;
  uint8_t* dst = ctx_.regions().locate(h.region, h.offset, h.length, &why);
  if (dst == nullptr && !ctx_.regions().retired(h.region)) {
    malformed(c, fmt::format("WRITE of {} bytes: {}", h.length, why));
    return;
  }
  // dst == nullptr now means a late write: its region was deregistered (the
  // op it belonged to ended here, say because it failed elsewhere). It is
  // read off the socket and dropped, and the link stays up.
  if (h.write_len < h.length) {
    malformed(c, fmt::format("WRITE piece of {} bytes says its whole write is {} bytes", h.length,
                             h.write_len));
    return;
  }
  if (h.write_len != h.length) {
    auto [it, fresh] = assembling_.try_emplace(
        h.write_id, Assembly{h.region, h.imm, h.write_len, 0, 0, h.offset, h.offset});
    Assembly& a = it->second;
    if (fresh && assembling_.size() > kMaxAssembling) {
      assembling_.erase(it);
      malformed(c, fmt::format("more than {} writes partly received at once", kMaxAssembling));
      return;
    }
    if (a.region != h.region || a.imm != h.imm || a.total != h.write_len) {
      malformed(c, fmt::format("a piece of write {} says region {}, imm {}, {} bytes; an earlier "
                               "piece said region {}, imm {}, {} bytes",
                               h.write_id, h.region, h.imm, h.write_len, a.region, a.imm, a.total));
      return;
    }
    if (h.length > a.total - a.claimed) {
      malformed(c, fmt::format("the pieces of write {} add up to more than its {} bytes",
                               h.write_id, a.total));
      return;
    }
    a.claimed += h.length;
  }
  if (h.length == 0) {
    on_piece_landed(c);
    return;
  }
  if (dst == nullptr) {
    c->expect_discard(h.length);
    return;
  }
  // Straight into the region: the bounds were checked above, against the
  // table as it is now; deregister_region() holds the region's memory until
  // this recv has completed, and the rest is discarded.
  c->expect_region(dst, h.length, h.region);
}

void Pair::on_piece_landed(Connection* c) {
  // Copied: the next header's recv reuses the buffer.
  const FrameHeader h = c->header();
  c->expect_header();
  bytes_received_ += h.length;
  if (h.write_len == h.length) {
    deliver(h.region, h.offset, h.length, h.imm);
    return;
  }
  auto it = assembling_.find(h.write_id);
  if (it == assembling_.end()) return;  // cannot happen: on_write_header made it
  Assembly& a = it->second;
  a.received += h.length;
  a.first = std::min(a.first, h.offset);
  a.end = std::max(a.end, h.offset + h.length);
  if (a.received < a.total) return;
  Assembly done = a;
  assembling_.erase(it);
  // Each piece was inside the region; if they also tile [first, end) the
  // reported range is exactly what landed.
  if (done.end - done.first != done.total) {
    malformed(c, fmt::format("the pieces of write {} ({} bytes) cover [{}, {}), not one range",
                             h.write_id, done.total, done.first, done.end));
    return;
  }
  deliver(done.region, done.first, done.total, done.imm);
}

void Pair::deliver(uint32_t region, uint64_t offset, uint64_t len, uint64_t imm) {
  if (!ctx_.regions().contains(region)) {
    spdlog::debug(
        "tcp transport: dropped a late write of {} bytes from {} into region {}, which "
        "was deregistered while it arrived",
        len, describe_, region);
    return;
  }
  writes_received_++;
  ctx_.handlers().on_write(peer_, region, offset, len, imm);
}

}  // namespace gsync::transport::tcp
