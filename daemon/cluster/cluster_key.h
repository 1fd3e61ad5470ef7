// SPDX-License-Identifier: Apache-2.0
//
// The cluster key file ([cluster] key_file, gsyncd --cluster-key): 32 random
// bytes written as 64 hex characters (a trailing newline allowed), in a
// regular file that only its owner may read or write (mode 0600). Every
// daemon of a cluster holds the same key; the TCP handshake has each side
// prove it (docs/security.md). `gsyncctl keygen -o PATH` makes one.
#pragma once

#include <cstddef>
#include <string>

#include "daemon/core/status.h"

namespace gsync {

constexpr size_t kClusterKeySize = 32;

// Reads the key at path into *key (kClusterKeySize raw bytes). Refuses a
// file that is not regular, or that any group or other permission bit is
// set on, naming the file and its mode; refuses anything but 64 hex
// characters and an optional newline.
Status load_cluster_key(const std::string& path, std::string* key);

// Writes a new random key to path, created mode 0600; never replaces a file
// that is there (every daemon must hold the same key, and a replaced one
// would silently split the cluster).
Status create_cluster_key(const std::string& path);

}  // namespace gsync
