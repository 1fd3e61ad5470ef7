// SPDX-License-Identifier: Apache-2.0
#include "daemon/transport/tcp/connection.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace gsync::transport::tcp {

Connection::Connection(Device& device, int fd, bool outbound, std::string remote, uint8_t* discard,
                       uint64_t discard_bytes)
    : outbound(outbound),
      device_(device),
      fd_(fd),
      remote_(std::move(remote)),
      discard_(discard),
      discard_bytes_(discard_bytes),
      stage_(new uint8_t[kStageBytes]) {}

Connection::~Connection() {
  for (SendItem* list : {head_, free_}) {
    while (list != nullptr) {
      SendItem* next = list->next;
      delete list;
      list = next;
    }
  }
  if (fd_ >= 0) ::close(fd_);
}

void Connection::post_connect(const Endpoint& to, uint32_t timeout_ms) {
  phase = Phase::kConnecting;
  connect_to_ = to;
  connect_timeout_.tv_sec = timeout_ms / 1000;
  connect_timeout_.tv_nsec = static_cast<long long>(timeout_ms % 1000) * 1000000;
  // Without the linked timeout a connect to a host that drops SYNs would
  // wait for the kernel's SYN retries (minutes), not for our backoff.
  device_.reserve(2);
  io_uring_sqe* s = device_.sqe(tag(Op::kConnect));
  io_uring_prep_connect(s, fd_, reinterpret_cast<sockaddr*>(&connect_to_.addr), connect_to_.len);
  s->flags |= IOSQE_IO_LINK;
  io_uring_sqe* t = device_.sqe(tag(Op::kLinkTimeout));
  io_uring_prep_link_timeout(t, &connect_timeout_, 0);
  ops_ += 2;
}

void Connection::expect_header() {
  rx_stage_ = RxStage::kHeader;
  rx_dst_ = reinterpret_cast<uint8_t*>(&rx_header_);
  rx_len_ = sizeof rx_header_;
  rx_done_ = 0;
  rx_region_ = 0;
  take_staged_or_post();
}

void Connection::expect_small(uint32_t len) {
  rx_stage_ = RxStage::kSmallPayload;
  rx_small_.resize(len);
  rx_dst_ = rx_small_.data();
  rx_len_ = len;
  rx_done_ = 0;
  rx_region_ = 0;
  take_staged_or_post();
}

void Connection::expect_region(uint8_t* dst, uint64_t len, uint32_t region) {
  rx_stage_ = RxStage::kRegionPayload;
  rx_dst_ = dst;
  rx_len_ = len;
  rx_done_ = 0;
  rx_region_ = region;
  take_staged_or_post();
}

void Connection::expect_discard(uint64_t len) {
  rx_stage_ = RxStage::kDiscardPayload;
  rx_dst_ = discard_;
  rx_len_ = len;
  rx_done_ = 0;
  take_staged_or_post();
}

void Connection::take_staged() {
  uint64_t n = std::min<uint64_t>(stage_tail_ - stage_head_, rx_len_ - rx_done_);
  if (n > 0) {
    // A discarded payload's staged part is simply skipped.
    if (rx_stage_ != RxStage::kDiscardPayload)
      std::memcpy(rx_dst_ + rx_done_, stage_.get() + stage_head_, n);
    stage_head_ += static_cast<uint32_t>(n);
    rx_done_ += n;
  }
  if (stage_head_ == stage_tail_) stage_head_ = stage_tail_ = 0;
}

void Connection::take_staged_or_post() {
  take_staged();
  if (rx_done_ >= rx_len_) {
    ready_ = true;
    return;
  }
  post_recv();
}

void Connection::post_recv() {
  uint64_t need = rx_len_ - rx_done_;
  // Here the stage is empty (take_staged_or_post used it up first).
  stage_recv_ = (rx_stage_ == RxStage::kHeader || rx_stage_ == RxStage::kSmallPayload) &&
                need < kStageBytes;
  io_uring_sqe* s = device_.sqe(tag(Op::kRecv));
  if (stage_recv_) {
    // No MSG_WAITALL: whatever has arrived, up to the stage's size, which
    // is often the whole frame and the headers behind it.
    io_uring_prep_recv(s, fd_, stage_.get(), kStageBytes, 0);
  } else {
    uint64_t chunk = std::min(need, kMaxRecvChunk);
    uint8_t* dst = rx_dst_ + rx_done_;
    if (rx_stage_ == RxStage::kDiscardPayload) {
      chunk = std::min(chunk, discard_bytes_);
      dst = discard_;
    }
    // MSG_WAITALL: io_uring keeps receiving into the rest of the buffer
    // until it is full (or the socket fails), so a payload chunk normally
    // takes one completion however the bytes trickle in.
    io_uring_prep_recv(s, fd_, dst, chunk, MSG_WAITALL);
  }
  ops_++;
  recv_posted_ = true;
}

Connection::RecvResult Connection::on_recv(int res, bool region_gone) {
  if (res == 0) return RecvResult::kEof;
  if (res < 0 && res != -EINTR && res != -EAGAIN) return RecvResult::kError;
  received_any_ |= res > 0;
  if (stage_recv_) {
    if (res > 0) stage_tail_ += static_cast<uint32_t>(res);
    take_staged();
  } else if (res > 0) {
    rx_done_ += static_cast<uint64_t>(res);
  }
  if (rx_done_ >= rx_len_) return RecvResult::kDone;
  if (region_gone && rx_stage_ == RxStage::kRegionPayload) {
    // The region's memory may be given back once this recv has completed:
    // the rest of the payload goes nowhere.
    uint64_t rest = rx_len_ - rx_done_;
    expect_discard(rest);
    return RecvResult::kMore;
  }
  post_recv();
  return RecvResult::kMore;
}

SendItem* Connection::item() {
  SendItem* it = free_;
  if (it != nullptr) {
    free_ = it->next;
  } else {
    it = new SendItem();
  }
  it->header = FrameHeader{};
  it->data = nullptr;
  it->use_owned = false;
  it->sent = 0;
  it->write_slot = -1;
  it->next = nullptr;
  return it;
}

void Connection::recycle(SendItem* it) {
  it->next = free_;
  free_ = it;
}

void Connection::push(SendItem* it) {
  it->next = nullptr;
  if (tail_ != nullptr)
    tail_->next = it;
  else
    head_ = it;
  tail_ = it;
  queued_bytes_ += it->wire_bytes();
  last_queued_ = Clock::now();
}

void Connection::push_frame(FrameType type, std::string_view payload) {
  SendItem* it = item();
  it->header.type = static_cast<uint8_t>(type);
  it->header.length = static_cast<uint32_t>(payload.size());
  if (!payload.empty()) {
    it->owned.assign(payload);
    it->use_owned = true;
  }
  push(it);
}

void Connection::post_send() {
  if (send_posted_ || head_ == nullptr || phase == Phase::kConnecting || phase == Phase::kClosing)
    return;
  int n = 0;
  uint64_t skip = head_->sent;
  bool control_only = true;  // no WRITE piece, whose sender waits for its completion
  for (SendItem* it = head_; it != nullptr && n + 2 <= kMaxIov; it = it->next) {
    if (it->write_slot >= 0) control_only = false;
    if (skip < sizeof(FrameHeader)) {
      iov_[n].iov_base = reinterpret_cast<uint8_t*>(&it->header) + skip;
      iov_[n].iov_len = sizeof(FrameHeader) - skip;
      n++;
      skip = 0;
    } else {
      skip -= sizeof(FrameHeader);
    }
    if (it->header.length > skip) {
      iov_[n].iov_base = const_cast<uint8_t*>(it->payload()) + skip;
      iov_[n].iov_len = it->header.length - skip;
      n++;
    }
    skip = 0;
  }
  msg_ = msghdr{};
  msg_.msg_iov = iov_;
  msg_.msg_iovlen = static_cast<size_t>(n);
  if (control_only && queued_bytes_ <= kDirectSendMax) {
    // Small frames nobody waits on (control, heartbeats, handshake) go out
    // with a plain non-blocking sendmsg: the socket nearly always has room,
    // and then there is no completion to wake the event loop for. What does
    // not fit goes through the ring as usual.
    ssize_t r = ::sendmsg(fd_, &msg_, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (r > 0) {
      on_sent(static_cast<int>(r), [](SendItem*) {});
      if (head_ == nullptr) return;
      post_send();
      return;
    }
  }
  io_uring_sqe* s = device_.sqe(tag(Op::kSend));
  // MSG_WAITALL makes io_uring retry a short send itself; MSG_NOSIGNAL
  // because a peer that reset the connection must not SIGPIPE the daemon.
  io_uring_prep_sendmsg(s, fd_, &msg_, MSG_NOSIGNAL | MSG_WAITALL);
  ops_++;
  send_posted_ = true;
}

void Connection::op_done(Op op) {
  ops_--;
  if (op == Op::kRecv) recv_posted_ = false;
  if (op == Op::kSend) send_posted_ = false;
}

void Connection::close() {
  if (phase == Phase::kClosing) return;
  phase = Phase::kClosing;
  // shutdown() ends a recv waiting for data and fails a send at once;
  // the cancel takes care of a connect still in flight.
  ::shutdown(fd_, SHUT_RDWR);
  if (ops_ > 0) {
    io_uring_sqe* s = device_.sqe(tag(Op::kCancel));
    io_uring_prep_cancel_fd(s, fd_, IORING_ASYNC_CANCEL_ALL);
    ops_++;
  }
}

}  // namespace gsync::transport::tcp
