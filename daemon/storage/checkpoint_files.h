// SPDX-License-Identifier: Apache-2.0
//
// Where checkpoints lie and how they are found again
// (docs/fault-tolerance.md): one folder per job under the daemon's
// checkpoint directory (the job id with every byte outside [A-Za-z0-9_.-]
// as %XX), one file per shard and clock:
//
//   k<key>-s<begin>-<end>-h<hosts>-c<clock, 12 digits>.ckpt
//
// written as ".tmp-<that name>" and renamed into place once it is whole
// and on disk. A reader lists the names of its shard, newest clock first,
// and takes a file only once its header is what it wants and its payload's
// hash matches; a ".tmp-" file is a write that never finished and is
// never read.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "daemon/core/status.h"
#include "daemon/storage/checkpoint_format.h"

namespace gsync::storage {

std::string job_folder(const std::string& root, const std::string& job);
std::string file_name(const ShardId& id, uint64_t clock);
constexpr const char* kTempPrefix = ".tmp-";

// The clocks of id's files in folder, newest first (names only: nothing
// is read).
std::vector<uint64_t> listed_clocks(const std::string& folder, const ShardId& id);

struct Loaded {
  CheckpointHeader header{};
  std::vector<float> payload;  // the arrays one after the other
};
// Reads folder's file of id at clock whole and checks it; the error names
// the file and what is wrong with it.
Status load(const std::string& folder, const ShardId& id, uint64_t clock, Loaded* out);

// The files in folder of any key and shard of a job on `hosts` hosts at
// `clock` (every host's, where hosts share the folder); names only.
struct ListedFile {
  uint64_t key = 0, begin = 0, end = 0;
  std::string name;
};
std::vector<ListedFile> files_at(const std::string& folder, uint32_t hosts, uint64_t clock);
// Reads folder/name whole and checks what needs no ShardId: the header's
// own checks, that it is of job, key, hosts and clock, and the payload's
// hash (a set's other keys, whose shapes this host may not know); *count:
// the header's tensor elements.
Status check_file(const std::string& folder, const std::string& name, const std::string& job,
                  uint64_t key, uint32_t hosts, uint64_t clock, uint64_t* count);
// The clocks of id's files that load, newest first, at most `most`; the
// ones that do not are logged (warn) with the reason. newest (optional):
// the newest one's contents, so that the usual resume (from the newest)
// does not read it twice.
// headers (optional): each valid clock's header, in the same order.
std::vector<uint64_t> valid_clocks(const std::string& folder, const ShardId& id, size_t most,
                                   Loaded* newest = nullptr,
                                   std::vector<CheckpointHeader>* headers = nullptr);

// Removes id's files beyond the newest `keep` and those of clocks before
// keep_from, and id's ".tmp-" files (writes that never finished); returns
// how many went.
int prune(const std::string& folder, const ShardId& id, int keep, uint64_t keep_from = 0);

}  // namespace gsync::storage
