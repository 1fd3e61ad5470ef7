// SPDX-License-Identifier: Apache-2.0
#include "daemon/transport/verbs/pair.h"

#include <cerrno>
#include <cstring>
#include <random>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "daemon/transport/verbs/context.h"

namespace gsync::transport::verbs {
Pair::Pair(VerbsLinks& links, int peer)
    : links_(links),
      peer_(peer),
      describe_(links.host().describe_host(peer)),
      self_(links.host().describe_host(links.host().options().self)),
      slots_(kRecvSlots + kSendDepth) {
  Status st = links_.device().register_memory(reinterpret_cast<uint8_t*>(slots_.data()),
                                            slots_.size() * sizeof(Descriptor), -1, &slots_mr_);
  if (!st) last_error_.set(st.message());  // create_qp() refuses to run and says so
}

Pair::~Pair() {
  destroy_qp();
  links_.device().deregister_memory(slots_mr_);
  for (auto& [id, w] : posted_) links_.mrs().release(w.mr);
  for (auto& w : queued_) links_.mrs().release(w.mr);
}

// ---------------------------------------------------------------- the QP

Status Pair::create_qp() {
  destroy_qp();
  Device& d = links_.device();
  if (slots_mr_.handle == nullptr)
    return Status(GSYNC_ERR_NOMEM, fmt::format("verbs link {} -> {}: {}", self_, describe_, last_error_.text));
  int cqe = static_cast<int>(kSendDepth + kRecvSlots + 8);
  cq_ = ibv_create_cq(d.context(), cqe, this, d.channel(), 0);
  if (cq_ == nullptr)
    return Status(GSYNC_ERR_NOMEM, fmt::format("verbs link {} -> {}: ibv_create_cq: {}", self_,
                                               describe_, strerror(errno)));
  ibv_req_notify_cq(cq_, 0);
  ibv_qp_init_attr ia{};
  ia.send_cq = ia.recv_cq = cq_;
  ia.qp_type = IBV_QPT_RC;
  ia.sq_sig_all = 0;
  ia.cap.max_send_wr = kSendDepth;
  ia.cap.max_recv_wr = kRecvSlots;
  ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
  ia.cap.max_inline_data = sizeof(Descriptor);
  qp_ = ibv_create_qp(d.pd(), &ia);
  if (qp_ == nullptr) {  // a device without inline sends: stage descriptors instead
    ia.cap.max_inline_data = 0;
    qp_ = ibv_create_qp(d.pd(), &ia);
  }
  if (qp_ == nullptr) {
    Status st(GSYNC_ERR_NOMEM, fmt::format("verbs link {} -> {}: ibv_create_qp: {}", self_,
                                           describe_, strerror(errno)));
    destroy_qp();
    return st;
  }
  max_inline_ = ia.cap.max_inline_data;
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = uint8_t(d.choice().port);
  a.pkey_index = 0;
  a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE;
  if (int e = ibv_modify_qp(qp_, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) {
    Status st(GSYNC_ERR_INTERNAL, fmt::format("verbs link {} -> {}: QP {} to INIT: {}", self_,
                                              describe_, qp_->qp_num, strerror(e)));
    destroy_qp();
    return st;
  }
  // Receives may be posted in INIT; all are there before the peer hears of
  // the QP, so it never meets an empty receive queue.
  for (uint32_t s = 0; s < kRecvSlots; s++) post_recv(s);
  static thread_local std::mt19937 rng{std::random_device{}()};
  psn_ = rng() & 0xffffff;
  connected_ = peer_ready_ = false;
  credits_ = owed_ = sq_used_ = 0;
  return Status::ok();
}

void Pair::destroy_qp() {
  // The QP before its CQ; its completions die with it (we fail the writes
  // ourselves, from posted_). Events of the CQ already read were acked at
  // once in poll(), so ibv_destroy_cq does not wait (ibv_get_cq_event(3)).
  if (qp_ != nullptr) ibv_destroy_qp(qp_);
  if (cq_ != nullptr) ibv_destroy_cq(cq_);
  qp_ = nullptr;
  cq_ = nullptr;
  connected_ = peer_ready_ = false;
}

Status Pair::connect_qp(const QpInfo& r) {
  Device& d = links_.device();
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = static_cast<ibv_mtu>(std::min<int>(d.port_attr().active_mtu, r.mtu));
  a.dest_qp_num = r.qpn;
  a.rq_psn = r.psn;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 12;
  a.ah_attr.port_num = uint8_t(d.choice().port);
  a.ah_attr.dlid = r.lid;
  if (d.port_attr().link_layer == IBV_LINK_LAYER_ETHERNET) {
    a.ah_attr.is_global = 1;
    std::memcpy(a.ah_attr.grh.dgid.raw, r.gid, 16);
    a.ah_attr.grh.sgid_index = uint8_t(d.choice().gid_index);
    a.ah_attr.grh.hop_limit = 64;
  }
  if (int e = ibv_modify_qp(qp_, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                         IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
                                         IBV_QP_MIN_RNR_TIMER))
    return Status(GSYNC_ERR_CONNECT, fmt::format("verbs link {} -> {}: QP {} to RTR (remote QPN {}): {}",
                                                 self_, describe_, qp_->qp_num, r.qpn, strerror(e)));
  a = {};
  a.qp_state = IBV_QPS_RTS;
  a.timeout = 14;   // 4.096 µs * 2^14 = 67 ms per try
  a.retry_cnt = 7;
  // An RNR NAK would mean the credit accounting is wrong: fail loudly.
  a.rnr_retry = 0;
  a.sq_psn = psn_;
  a.max_rd_atomic = 1;
  if (int e = ibv_modify_qp(qp_, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                         IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
    return Status(GSYNC_ERR_CONNECT, fmt::format("verbs link {} -> {}: QP {} to RTS: {}", self_,
                                                 describe_, qp_->qp_num, strerror(e)));
  return Status::ok();
}

void Pair::post_recv(uint32_t slot) {
  ibv_sge sge{reinterpret_cast<uint64_t>(&slots_[slot]), sizeof(Descriptor), slots_mr_.lkey};
  ibv_recv_wr wr{}, *bad = nullptr;
  wr.wr_id = slot;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  if (int e = ibv_post_recv(qp_, &wr, &bad))
    spdlog::error("verbs link {} -> {}: ibv_post_recv on QP {}: {}", self_, describe_,
                  qp_->qp_num, strerror(e));
}

void Pair::send_ctl(const std::string& msg) { links_.host().send_bootstrap(peer_, msg); }

// ---------------------------------------------------------------- bring-up

void Pair::on_link_up() {
  link_up_ = true;
  remote_regions_.clear();
  max_remote_region_ = 0;
  start_qp();
}

void Pair::start_qp() {
  if (Status st = create_qp(); !st) {
    last_error_.set(st.message());
    spdlog::error("{}", st.message());
    return;
  }
  QpInfo m;
  m.qpn = qp_->qp_num;
  m.psn = psn_;
  m.lid = links_.device().port_attr().lid;
  std::memcpy(m.gid, links_.device().gid().raw, 16);
  m.mtu = uint8_t(links_.device().port_attr().active_mtu);
  m.link_layer = links_.device().port_attr().link_layer;
  m.recv_slots = kCreditSlots;
  send_ctl(encode(m));
}

void Pair::on_link_down(const Status& why) {
  link_up_ = false;
  teardown(why);
  remote_regions_.clear();
  max_remote_region_ = 0;
}

void Pair::on_qp_info(const QpInfo& m) {
  if (!link_up_) return;
  if (qp_ != nullptr && connected_) {
    if (m.qpn == remote_.qpn) return;
    // The peer started over with a fresh QP (it saw an error we did not):
    // ours is connected to its old one, so it goes too.
    teardown(Status(GSYNC_ERR_HOST_LOST,
                    fmt::format("verbs link {} -> {}: the peer reset the queue pair (its QPN {} "
                                "replaces {}; ours was {})",
                                self_, describe_, m.qpn, remote_.qpn, qp_->qp_num)));
    start_qp();
  }
  if (qp_ == nullptr) return;
  remote_ = m;
  if (Status st = connect_qp(m); !st) {
    spdlog::error("{}", st.message());
    fail(st);
    return;
  }
  connected_ = true;
  credits_ = m.recv_slots;
  send_ctl(encode(Ready{qp_->qp_num, m.qpn}));
  maybe_up();
}

void Pair::on_ready(const Ready& m) {
  if (!connected_ || m.from_qpn != remote_.qpn || m.to_qpn != qp_->qp_num) return;  // stale
  peer_ready_ = true;
  maybe_up();
}

void Pair::maybe_up() {
  if (!connected_ || !peer_ready_ || user_up_) return;
  user_up_ = true;
  connects_++;
  spdlog::info("verbs link {} -> {} up: {} port {} GID[{}] {}, QPN {} <-> {}, MTU {}, inline {}",
               self_, describe_, links_.device().choice().device, links_.device().choice().port,
               links_.device().choice().gid_index, links_.device().choice().gid_text, qp_->qp_num,
               remote_.qpn, 128 << std::min<int>(links_.device().port_attr().active_mtu, remote_.mtu),
               max_inline_);
  links_.host().post_peer_up(peer_);
  flush();
}

// ---------------------------------------------------------------- regions

void Pair::on_region(const RegionInfo& m) {
  remote_regions_[m.id] = {m, 0, false};
  max_remote_region_ = std::max(max_remote_region_, m.id);
}

void Pair::on_retire(uint32_t id) {
  auto it = remote_regions_.find(id);
  if (it == remote_regions_.end() || it->second.inflight == 0) {
    if (it != remote_regions_.end()) remote_regions_.erase(it);
    links_.host().ack_retire(peer_, id);
    return;
  }
  it->second.retiring = true;  // acked when its last write completes
}

void Pair::finish_remote(uint32_t region) {
  auto it = remote_regions_.find(region);
  if (it == remote_regions_.end()) return;
  if (--it->second.inflight > 0 || !it->second.retiring) return;
  remote_regions_.erase(it);
  if (link_up_) links_.host().ack_retire(peer_, region);
}

// ---------------------------------------------------------------- writes

void Pair::write(const void* src, uint64_t len, uint32_t region, uint64_t offset, uint64_t imm,
                 uint64_t cookie) {
  if (!user_up_) {
    links_.host().post_write_done(peer_, cookie,
                         Status(GSYNC_ERR_HOST_LOST,
                                fmt::format("write to {}: the verbs link is not up{}{}", describe_,
                                            last_error_.empty() ? "" : " (last error: ",
                                            last_error_.empty() ? "" : last_error_.text + ")")));
    return;
  }
  auto it = remote_regions_.find(region);
  if (it == remote_regions_.end()) {
    if (region != 0 && region <= max_remote_region_) {
      // Retired by the peer: like TCP, a late write is dropped, not an error.
      links_.host().post_write_done(peer_, cookie, Status::ok());
      return;
    }
    links_.host().post_write_done(peer_, cookie,
                         Status(GSYNC_ERR_PROTOCOL,
                                fmt::format("write {} -> {}: region {} was never announced by the peer",
                                            self_, describe_, region)));
    return;
  }
  RemoteRegion& rr = it->second;
  if (rr.retiring) {
    links_.host().post_write_done(peer_, cookie, Status::ok());
    return;
  }
  if (!rr.info.error.empty()) {
    links_.host().post_write_done(peer_, cookie,
                         Status(GSYNC_ERR_NOMEM, fmt::format("write {} -> {}: region {} could not be "
                                                             "registered there: {}",
                                                             self_, describe_, region, rr.info.error)));
    return;
  }
  if (offset > rr.info.bytes || len > rr.info.bytes - offset) {
    links_.host().post_write_done(
        peer_, cookie,
        Status(GSYNC_ERR_INVALID,
               fmt::format("write {} -> {} on QPN {}: {} bytes at offset {} do not fit region {} "
                           "of {} bytes (rkey {:#x}); nothing was sent",
                           self_, describe_, qp_ ? qp_->qp_num : 0, len, offset, region,
                           rr.info.bytes, rr.info.rkey)));
    return;
  }
  Write w;
  w.cookie = cookie;
  w.src = static_cast<const uint8_t*>(src);
  w.len = len;
  w.region = region;
  w.offset = offset;
  w.imm = imm;
  w.rkey = rr.info.rkey;
  w.raddr = rr.info.addr + offset;
  if (len > 0) {
    Status err;
    w.mr = links_.mrs().acquire(src, len, &err);
    if (w.mr == nullptr) {
      links_.host().post_write_done(peer_, cookie,
                           Status(err.code(), fmt::format("write {} -> {}: source: {}", self_,
                                                          describe_, err.message())));
      return;
    }
  }
  rr.inflight++;
  queued_.push_back(w);
  flush();
}

void Pair::flush() {
  if (!connected_ || !user_up_) return;
  while (!queued_.empty() && credits_ > 0) {
    uint32_t need = uint32_t((queued_.front().len + kMaxPiece - 1) / kMaxPiece) + 1;
    if (sq_used_ + need > kSendDepth) break;
    Write w = queued_.front();
    queued_.pop_front();
    if (!post_write(w)) return;
  }
  if (owed_ >= kCreditSlots / 2 && sq_used_ < kSendDepth) post_credit();
}

bool Pair::post_write(Write& w) {
  uint64_t id = kSendBit | next_wr_++;
  const Registration& reg = w.mr ? MrCache::registration(w.mr) : Registration{};
  uint32_t rkey = w.rkey;
  if (corrupt_rkey_) {
    corrupt_rkey_ = false;
    rkey ^= 0x5a5a00;
  }
  // The data: RDMA WRITEs, unsignaled (the descriptor's completion retires
  // them, RC completes in order).
  std::vector<ibv_sge> sges;
  std::vector<ibv_send_wr> wrs;
  uint64_t pieces = (w.len + kMaxPiece - 1) / kMaxPiece;
  sges.resize(pieces + 1);
  wrs.resize(pieces + 1);
  for (uint64_t i = 0; i < pieces; i++) {
    uint64_t off = i * kMaxPiece;
    sges[i] = {reinterpret_cast<uint64_t>(w.src + off),
               uint32_t(std::min(kMaxPiece, w.len - off)), reg.lkey};
    ibv_send_wr& wr = wrs[i];
    wr.wr_id = id;
    wr.sg_list = &sges[i];
    wr.num_sge = 1;
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.wr.rdma.remote_addr = w.raddr + off;
    wr.wr.rdma.rkey = rkey;
    wr.next = &wrs[i + 1];
  }
  // The descriptor: a SEND on the same RC QP, so it is delivered after the
  // WRITEs' data is placed (RC ordering) and tells the receiver what landed
  // where with the whole 64-bit immediate. WRITE_WITH_IMM's 32 bits could
  // carry neither the region nor the offset.
  Descriptor d;
  d.kind = uint8_t(DescKind::kWrite);
  d.credits = owed_;
  d.region = w.region;
  d.offset = w.offset;
  d.len = w.len;
  d.imm = w.imm;
  ibv_send_wr& s = wrs[pieces];
  ibv_sge& ssge = sges[pieces];
  s.wr_id = id;
  s.opcode = IBV_WR_SEND;
  s.send_flags = IBV_SEND_SIGNALED;
  s.sg_list = &ssge;
  s.num_sge = 1;
  if (max_inline_ >= sizeof d) {
    ssge = {reinterpret_cast<uint64_t>(&d), sizeof d, 0};
    s.send_flags |= IBV_SEND_INLINE;
  } else {
    Descriptor& st = slots_[kRecvSlots + (stage_next_++ % kSendDepth)];
    st = d;
    ssge = {reinterpret_cast<uint64_t>(&st), sizeof d, slots_mr_.lkey};
  }
  ibv_send_wr* bad = nullptr;
  w.wrs = uint32_t(pieces + 1);
  if (int e = ibv_post_send(qp_, &wrs[0], &bad)) {
    posted_[id] = w;
    fail(Status(GSYNC_ERR_HOST_LOST,
                fmt::format("verbs link {} -> {}: ibv_post_send on QPN {}: {}", self_, describe_,
                            qp_->qp_num, strerror(e))));
    return false;
  }
  owed_ = 0;
  credits_--;
  sq_used_ += w.wrs;
  posted_[id] = w;
  return true;
}

bool Pair::post_credit() {
  Descriptor d;
  d.kind = uint8_t(DescKind::kCredit);
  d.credits = owed_;
  ibv_sge sge{};
  ibv_send_wr wr{}, *bad = nullptr;
  wr.wr_id = kSendBit;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  if (max_inline_ >= sizeof d) {
    sge = {reinterpret_cast<uint64_t>(&d), sizeof d, 0};
    wr.send_flags |= IBV_SEND_INLINE;
  } else {
    Descriptor& st = slots_[kRecvSlots + (stage_next_++ % kSendDepth)];
    st = d;
    sge = {reinterpret_cast<uint64_t>(&st), sizeof d, slots_mr_.lkey};
  }
  if (int e = ibv_post_send(qp_, &wr, &bad)) {
    fail(Status(GSYNC_ERR_HOST_LOST, fmt::format("verbs link {} -> {}: ibv_post_send (credits) on "
                                                 "QPN {}: {}",
                                                 self_, describe_, qp_->qp_num, strerror(e))));
    return false;
  }
  owed_ = 0;
  sq_used_++;
  return true;
}

// ---------------------------------------------------------------- completions

void Pair::on_cq_event(ibv_cq* cq) {
  if (cq == cq_) ibv_req_notify_cq(cq_, 0);
}

std::string Pair::wc_error(const ibv_wc& wc) const {
  // Of an error completion only status, wr_id, qp_num and vendor_err are
  // valid (ibv_poll_cq(3)): what it was is told by wr_id.
  std::string what = "receive";
  auto it = posted_.find(wc.wr_id);
  if (it != posted_.end())
    what = fmt::format("write of {} bytes into region {} at offset {} (rkey {:#x})", it->second.len,
                       it->second.region, it->second.offset, it->second.rkey);
  else if (wc.wr_id == kSendBit)
    what = "credit return";
  else if (wc.wr_id & kSendBit)
    what = "send";
  return fmt::format("verbs link {} -> {} failed: QPN {} (remote QPN {}): {}: {} (status {}, "
                     "vendor error {:#x})",
                     self_, describe_, wc.qp_num, remote_.qpn, what, ibv_wc_status_str(wc.status),
                     int(wc.status), wc.vendor_err);
}

bool Pair::poll_cq() {
  if (cq_ == nullptr) return false;
  ibv_wc wcs[32];
  int taken = 0;
  while (taken < kPollBudget) {
    ibv_cq* cq = cq_;
    int n = ibv_poll_cq(cq, 32, wcs);
    if (n <= 0) return false;
    taken += n;
    for (int i = 0; i < n; i++) {
      const ibv_wc& wc = wcs[i];
      if (wc.status != IBV_WC_SUCCESS) {
        completion_errors_++;
        fail(Status(GSYNC_ERR_HOST_LOST, wc_error(wc)));
        return false;  // the CQ is gone; the rest were flushes of that QP
      }
      if ((wc.wr_id & kSendBit) == 0)
        on_recv(wc);
      else
        on_send_done(wc.wr_id);
      if (cq_ != cq) return false;  // a handler took the link down
    }
  }
  return true;
}

void Pair::on_send_done(uint64_t wr_id) {
  if (wr_id == kSendBit) {
    sq_used_--;
    return;
  }
  auto it = posted_.find(wr_id);
  if (it == posted_.end()) return;
  Write w = it->second;
  posted_.erase(it);
  sq_used_ -= w.wrs;
  bytes_sent_ += w.len;
  writes_sent_++;
  links_.mrs().release(w.mr);
  finish_remote(w.region);
  links_.host().post_write_done(peer_, w.cookie, Status::ok());
}

void Pair::on_recv(const ibv_wc& wc) {
  uint32_t slot = uint32_t(wc.wr_id);
  Descriptor d = slots_[slot];
  post_recv(slot);
  if (wc.byte_len != sizeof d) {
    fail(Status(GSYNC_ERR_PROTOCOL, fmt::format("verbs link {} -> {}: a descriptor of {} bytes "
                                                "(expected {}) on QPN {}",
                                                self_, describe_, wc.byte_len, sizeof d, wc.qp_num)));
    return;
  }
  credits_ += d.credits;
  if (d.kind == uint8_t(DescKind::kCredit)) return;  // spent none of ours
  owed_++;
  const LocalRegion* r = links_.regions().find(d.region);
  if (r == nullptr) {
    if (links_.regions().retired(d.region)) return;  // a late write: dropped, as on TCP
    fail(Status(GSYNC_ERR_PROTOCOL,
                fmt::format("verbs link {} -> {}: a write into region {}, which this daemon "
                            "never registered (QPN {})",
                            self_, describe_, d.region, wc.qp_num)));
    return;
  }
  if (d.offset > r->region.bytes || d.len > r->region.bytes - d.offset) {
    fail(Status(GSYNC_ERR_PROTOCOL,
                fmt::format("verbs link {} -> {}: a write of {} bytes at offset {} past region "
                            "{} of {} bytes (QPN {})",
                            self_, describe_, d.len, d.offset, d.region, r->region.bytes, wc.qp_num)));
    return;
  }
  bytes_received_ += d.len;
  writes_received_++;
  const Handlers& h = links_.host().handlers();
  if (h.on_write) h.on_write(peer_, d.region, d.offset, d.len, d.imm);
}

// ---------------------------------------------------------------- failures

void Pair::fail_write(Write& w, const Status& st) {
  links_.mrs().release(w.mr);
  w.mr = nullptr;
  links_.host().post_write_done(peer_, w.cookie, st);
}

void Pair::teardown(const Status& why) {
  bool had = qp_ != nullptr;
  destroy_qp();
  if (!why.message().empty()) last_error_.set(why.message());
  if (user_up_) {
    user_up_ = false;
    spdlog::warn("{}", why.message());
    links_.host().post_peer_down(peer_, why);
  } else if (had && !why.message().empty()) {
    spdlog::info("{}", why.message());
  }
  Status st(why.code() == GSYNC_OK ? GSYNC_ERR_HOST_LOST : why.code(), why.message());
  for (auto& [id, w] : posted_) fail_write(w, st);
  for (auto& w : queued_) fail_write(w, st);
  posted_.clear();
  queued_.clear();
  // No write of ours is in flight any more: acknowledge retirements.
  for (auto it = remote_regions_.begin(); it != remote_regions_.end();) {
    it->second.inflight = 0;
    if (it->second.retiring) {
      if (link_up_) links_.host().ack_retire(peer_, it->first);
      it = remote_regions_.erase(it);
    } else {
      ++it;
    }
  }
  credits_ = owed_ = sq_used_ = 0;
}

void Pair::fail(const Status& why) {
  teardown(why);
  // The TCP link still stands: start over with a fresh QP. The peer sees its
  // QPN change and does the same (on_qp_info).
  if (link_up_) start_qp();
}

PeerStats Pair::stats() const {
  PeerStats s;
  s.state = user_up_ ? PeerState::kUp : (connects_ > 0 || !last_error_.empty()) ? PeerState::kDown
                                                                                 : PeerState::kConnecting;
  s.bytes_sent = bytes_sent_;
  s.bytes_received = bytes_received_;
  s.writes_sent = writes_sent_;
  s.writes_received = writes_received_;
  s.connects = connects_;
  s.last_error = last_error_.text;
  s.last_error_at = last_error_.at;
  s.transport = "verbs";
  s.verbs_device = links_.device().choice().device;
  s.verbs_port = links_.device().choice().port;
  s.verbs_gid_index = links_.device().choice().gid_index;
  s.verbs_qpn = qp_ ? qp_->qp_num : 0;
  s.verbs_remote_qpn = connected_ ? remote_.qpn : 0;
  s.verbs_completion_errors = completion_errors_;
  return s;
}

}  // namespace gsync::transport::verbs
