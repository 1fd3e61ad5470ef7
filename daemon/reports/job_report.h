// SPDX-License-Identifier: Apache-2.0
//
// The admin reports of jobs and ops (docs/operations.md): gsyncctl jobs -
// each job, its ranks, counters, parameters, leases, stragglers and
// elastic world - and gsyncctl ops - the ops in flight (who has not
// arrived, what they wait for) and the recent ones with their timelines.
// Read from the jobs layer and the layers under it; above them all but the
// wiring, which registers them (gsyncd.cc) and renders the metrics from
// the first (gsyncd_metrics.cc).
#pragma once

#include <nlohmann/json_fwd.hpp>

#include "daemon/cluster/control_plane.h"
#include "daemon/jobs/job_manager.h"
#include "daemon/pipeline/pipeline.h"

namespace gsync::reports {

// control: this daemon's cluster, or null on a single host.
nlohmann::json jobs(const JobManager& manager, const pipeline::Pipeline& pipeline,
                    const cluster::ControlPlane* control);
nlohmann::json ops(const JobManager& manager, const pipeline::Pipeline& pipeline,
                   const cluster::ControlPlane* control);

}  // namespace gsync::reports
