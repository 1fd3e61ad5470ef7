// SPDX-License-Identifier: Apache-2.0
#include "daemon/transport/tcp/connection.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace gsync::transport::tcp {

Connection::Connection(Device& device, int fd, bool outbound, std::string remote, uint8_t* discard,
                       uint64_t discard_bytes)
    : outbound(outbound),
      device_(device),
      fd_(fd),
      remote_(std::move(remote)),
      discard_(discard),
      discard_bytes_(discard_bytes) {}

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
  post_recv();
}

void Connection::expect_small(uint32_t len) {
  rx_stage_ = RxStage::kSmallPayload;
  rx_small_.resize(len);
  rx_dst_ = rx_small_.data();
  rx_len_ = len;
  rx_done_ = 0;
  rx_region_ = 0;
  post_recv();
}

void Connection::expect_region(uint8_t* dst, uint64_t len, uint32_t region) {
  rx_stage_ = RxStage::kRegionPayload;
  rx_dst_ = dst;
  rx_len_ = len;
  rx_done_ = 0;
  rx_region_ = region;
  post_recv();
}

void Connection::expect_discard(uint64_t len) {
  rx_stage_ = RxStage::kDiscardPayload;
  rx_dst_ = discard_;
  rx_len_ = len;
  rx_done_ = 0;
  post_recv();
}

void Connection::post_recv() {
  uint64_t chunk = std::min(rx_len_ - rx_done_, kMaxRecvChunk);
  uint8_t* dst = rx_dst_ + rx_done_;
  if (rx_stage_ == RxStage::kDiscardPayload) {
    chunk = std::min(chunk, discard_bytes_);
    dst = discard_;
  }
  io_uring_sqe* s = device_.sqe(tag(Op::kRecv));
  // MSG_WAITALL: io_uring keeps receiving into the rest of the buffer until
  // it is full (or the socket fails), so a header or a payload chunk
  // normally takes one completion however the bytes trickle in.
  io_uring_prep_recv(s, fd_, dst, chunk, MSG_WAITALL);
  ops_++;
  recv_posted_ = true;
}

Connection::RecvResult Connection::on_recv(int res, bool region_gone) {
  if (res == 0) return RecvResult::kEof;
  if (res < 0 && res != -EINTR && res != -EAGAIN) return RecvResult::kError;
  if (res > 0) rx_done_ += static_cast<uint64_t>(res);
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

void Connection::post_send() {
  if (send_posted_ || head_ == nullptr || phase == Phase::kConnecting || phase == Phase::kClosing)
    return;
  int n = 0;
  uint64_t skip = head_->sent;
  for (SendItem* it = head_; it != nullptr && n + 2 <= kMaxIov; it = it->next) {
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
