// SPDX-License-Identifier: Apache-2.0
//
// Notes from other threads to the event loop (a GPU driver's host
// functions saying which work ended): a queue no note can overflow, and an
// eventfd the loop watches. A pipe carried them before, and lost every note
// past its 64 KiB when the loop fell behind - 8192 notes, which one op of
// 1 GiB in 64 KiB chunks passes - and that op then waited out its timeout.
// An eventfd's counter wakes the loop however many notes came. Any thread
// pushes; the event thread takes.
#pragma once

#include <sys/eventfd.h>
#include <unistd.h>

#include <cstdint>
#include <mutex>
#include <vector>

namespace gsync {

class NoteQueue {
 public:
  NoteQueue() : fd_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {}
  ~NoteQueue() {
    if (fd_ >= 0) close(fd_);
  }
  NoteQueue(const NoteQueue&) = delete;
  NoteQueue& operator=(const NoteQueue&) = delete;

  // Readable once a note is in; < 0: no eventfd could be made (no note
  // then wakes anyone: the owner refuses to work without one).
  int fd() const { return fd_; }

  void push(uint64_t note) {
    bool first;
    {
      std::lock_guard lk(mu_);
      first = notes_.empty();
      notes_.push_back(note);
    }
    // One wake-up per batch the loop has not taken yet; the counter would
    // take 2^64 - 2 of them anyway.
    if (first && fd_ >= 0) {
      const uint64_t one = 1;
      [[maybe_unused]] ssize_t n = write(fd_, &one, sizeof one);
    }
  }

  // Every note pushed since the last take, in the order pushed.
  std::vector<uint64_t> take() {
    if (fd_ >= 0) {
      uint64_t count;
      [[maybe_unused]] ssize_t n = read(fd_, &count, sizeof count);
    }
    std::vector<uint64_t> out;
    std::lock_guard lk(mu_);
    out.swap(notes_);
    return out;
  }

 private:
  int fd_;
  std::mutex mu_;
  std::vector<uint64_t> notes_;
};

}  // namespace gsync
