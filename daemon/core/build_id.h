// SPDX-License-Identifier: Apache-2.0
//
// The running executable's GNU build id (the linker's NT_GNU_BUILD_ID note,
// `readelf -n gsyncd`): the same for every copy of one build, different for
// any other build, even of the same version. Daemons tell each other theirs
// (cluster HostInfo) so that `gsyncctl doctor` can say when hosts run
// different builds of one version.
#pragma once

#include <string>

namespace gsync {

// Lower-case hex; "" when the executable carries no build-id note.
const std::string& build_id();

}  // namespace gsync
