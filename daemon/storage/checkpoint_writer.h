// SPDX-License-Identifier: Apache-2.0
//
// The thread that writes checkpoints (docs/fault-tolerance.md): it takes
// a snapshot's remaining blocks, hashes the payload, and writes the file
// with its own io_uring (never the transport's): a ".tmp-" file, written
// in pieces with several in flight, fsync'd, renamed into place, the
// folder fsync'd, then the shard's files that are no longer kept removed.
// One checkpoint at a time, in the order given. A failure (a full or
// read-only disk, a folder that cannot be made) removes the temporary
// file, leaves every earlier checkpoint as it was, and comes back with the
// error naming the file and the call. The thread is a Worker's
// (core/worker.h); results come back through its eventfd, which the event
// loop watches; the thread never touches daemon state.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "daemon/core/worker.h"
#include "daemon/storage/checkpoint_format.h"
#include "daemon/storage/snapshot.h"

namespace gsync::storage {

struct WriteJob {
  uint64_t tag = 0;     // the caller's, back in the result
  std::string folder;   // job_folder(); made if missing
  ShardId id;
  uint64_t clock = 0, steps = 0, updates = 0;
  CheckpointSet set;       // the set this file belongs to (its header says)
  // Once written, the shard's files beyond the newest `keep` and those of
  // clocks before keep_from are removed (checkpoint_files.h, prune).
  int keep = 3;
  uint64_t keep_from = 0;
  std::shared_ptr<Snapshot> snapshot;
};

struct WriteResult {
  uint64_t tag = 0;
  uint64_t clock = 0;
  bool ok = false;
  std::string error;  // when not ok
  std::string path;
  uint64_t bytes = 0;    // the file's
  double copy_s = 0;     // finishing the snapshot's copy
  double write_s = 0;    // hash, write, fsync, rename
};

class CheckpointWriter {
 public:
  CheckpointWriter();
  ~CheckpointWriter();
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  void submit(WriteJob job);
  // Readable when take() has results (-1: no eventfd could be made, and
  // submit() writes on the calling thread; gsyncd does not start then).
  int done_fd() const { return worker_.done_fd(); }
  std::vector<WriteResult> take();
  // Runs one job on the calling thread (tests, tools).
  static WriteResult write_now(const WriteJob& job);

 private:
  // The writing thread's io_uring (checkpoint_writer.cc), made at its
  // first job; gone after the thread (declared before the worker).
  struct Ring;
  WriteResult write_on_thread(const WriteJob& job);

  std::unique_ptr<Ring> ring_;  // the worker's thread only
  std::vector<WriteResult> done_;  // event thread
  Worker worker_{"gsync-ckpt"};
};

}  // namespace gsync::storage
