// SPDX-License-Identifier: Apache-2.0
//
// gsyncctl report (docs/operations.md, "Report"): one static HTML page
// summarising one or more daemons from their admin replies (status, jobs,
// peers, ops): per daemon its jobs, each job with its straggler table and
// the timeline of its slowest recent op drawn as inline SVG (a row per
// rank's arrival, a row per pipeline stage), and its peers. Everything is
// inline (style, SVG, a small script that only sorts tables): no server, no
// external URL, and the page reads the same with scripts off. Every string
// that came from a daemon (job ids are the clients' own) is HTML-escaped.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "tools/gsyncctl/trace.h"

namespace gsync::cli {

struct ReportSource {
  std::string name;                         // its admin socket
  nlohmann::json status, jobs, peers, ops;  // its replies to those commands
};

// Text for HTML element content and quoted attribute values: & < > " '
// as entities, other control characters (but tab and newline) as '?'.
std::string html_escape(std::string_view text);

// The slowest of ops (first arrival to end); nullptr when there are none.
const OpTimeline* slowest_op(const std::vector<OpTimeline>& ops);

// One op as an inline <svg class="timeline">: on a time axis in ms from
// its first arrival to its end, a row (class "row arrival") per arrival
// in rank order and a row (class "row stage") per stage with its span.
std::string timeline_svg(const OpTimeline& op);

// The page. job: only that job's sections ("" for all); generated: when and
// where the page was made, printed under the title. *jobs_drawn: the job
// sections on the page, over all daemons.
std::string html_report(const std::vector<ReportSource>& sources, const std::string& job,
                        const std::string& generated, size_t* jobs_drawn);

}  // namespace gsync::cli
