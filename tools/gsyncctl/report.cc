// SPDX-License-Identifier: Apache-2.0
//
// gsyncctl report: the page (report.h). The op timelines are
// report_timeline.cc's; the ops are read by trace.h's recent_ops().
#include "tools/gsyncctl/report.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>

#include "protocol/admin_jobs.h"
#include "tools/gsyncctl/table.h"

namespace gsync::cli {

namespace {
using nlohmann::json;
namespace k = admin::jobs;

// Style and the one script, inline: the page must open from a mail or an
// archive with nothing else around it.
constexpr std::string_view kStyle = R"(
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#1b1b1b;background:#fff}
h1{margin:0 0 .2em}h2{margin-top:1.6em;border-bottom:2px solid #ccc}
.meta,.note{color:#555}code{background:#f3f3f3;padding:0 .25em}
table{border-collapse:collapse;margin:.4em 0 1em}th,td{border:1px solid #ccc;padding:.2em .5em}
th{background:#f0f0f0;text-align:left}td.n{text-align:right;font-variant-numeric:tabular-nums}
section.job{margin:1em 0 1.5em 1em;padding-left:1em;border-left:3px solid #89b}
tr.straggler td{background:#fde2dc;font-weight:600}.verdict.bad{color:#a21}
svg.timeline{font:12px sans-serif;background:#fafafa;border:1px solid #ddd}
svg .axis line{stroke:#ddd}svg .axis text{fill:#666}svg .label{fill:#222}
svg .arrival circle{fill:#c44}svg .arrival .lag{stroke:#c44;stroke-width:2;opacity:.45}
svg .stage rect{fill:#4a7ab5}svg g.row:hover{opacity:.7}
)";

// Click a column's header to sort its table (numbers by value); the page
// reads the same without it.
constexpr std::string_view kScript = R"(
document.querySelectorAll('table.sortable th').forEach(function (th, i) {
  th.style.cursor = 'pointer';
  th.addEventListener('click', function () {
    var body = th.closest('table').tBodies[0];
    var key = function (tr) {
      var td = tr.cells[th.cellIndex];
      var v = td ? (td.dataset.sort || td.textContent) : '';
      return isNaN(parseFloat(v)) ? v : parseFloat(v);
    };
    var up = th.dataset.dir !== 'up';
    th.dataset.dir = up ? 'up' : 'down';
    Array.from(body.rows).sort(function (a, b) {
      var x = key(a), y = key(b);
      return (x < y ? -1 : x > y ? 1 : 0) * (up ? 1 : -1);
    }).forEach(function (tr) { body.appendChild(tr); });
  });
});
document.documentElement.dataset.script = 'ready';
)";

const json& at(const json& j, const char* key) {
  static const json kNull;
  if (!j.is_object()) return kNull;
  auto it = j.find(key);
  return it == j.end() ? kNull : *it;
}

std::optional<double> number(const json& j, const char* key) {
  const json& v = at(j, key);
  if (!v.is_number()) return std::nullopt;
  return v.get<double>();
}

// Any scalar as text ("-" when missing), escaped.
std::string html(const json& v) {
  if (v.is_string()) return html_escape(v.get<std::string>());
  if (v.is_number() || v.is_boolean()) return v.dump();
  return "-";
}

std::string td(const std::string& escaped) { return "<td>" + escaped + "</td>"; }

// A number's cell: right-aligned, sorted by its value.
std::string td_num(const std::string& escaped, std::optional<double> value) {
  if (!value) return "<td class=\"n\">" + escaped + "</td>";
  return fmt::format("<td class=\"n\" data-sort=\"{}\">{}</td>", *value, escaped);
}

std::string td_bytes(const json& j, const char* key) {
  auto v = number(j, key);
  return td_num(v && *v >= 0 ? format_bytes(uint64_t(*v)) : "-", v);
}

std::string td_gbps(const json& j, const char* key) {
  auto v = number(j, key);
  return td_num(v ? format_gbps(*v) : "-", v);
}

std::string td_ms(std::optional<double> seconds) {
  return td_num(seconds ? fmt::format("{:.2f}", 1e3 * *seconds) : "-", seconds);
}

std::string header(std::initializer_list<std::string_view> titles) {
  std::string out = "<thead><tr>";
  for (auto t : titles) out += fmt::format("<th>{}</th>", t);
  return out + "</tr></thead>";
}

std::string status_line(const json& st) {
  if (!st.is_object()) return "";
  const json& ops = at(st, "ops");
  auto uptime = number(st, "uptime_s");
  return fmt::format(
      "<p class=\"status\">gsyncd {}, pid {}, up {}, kernels {}, transport {}; ops {} completed, "
      "{} failed, {} in flight; {} reduced</p>\n",
      html(at(st, "version")), html(at(st, "pid")),
      uptime ? html_escape(format_duration(*uptime)) : "-", html(at(st, "isa")),
      html(at(st, "transport")), html(at(ops, "completed")), html(at(ops, "failed")),
      html(at(ops, "in_flight")),
      number(st, "bytes_reduced") ? format_bytes(uint64_t(*number(st, "bytes_reduced"))) : "-");
}

// A job of one daemon: its row of the jobs report (null when its ranks have
// all left and only its recent ops remain) and those ops.
struct JobView {
  std::string id, anchor;
  json row;
  std::vector<OpTimeline> ops;
};

std::vector<JobView> jobs_of(const ReportSource& src, const std::string& only, size_t daemon) {
  std::vector<JobView> out;
  auto find = [&](const std::string& id) -> JobView* {
    for (auto& v : out)
      if (v.id == id) return &v;
    if (!only.empty() && id != only) return nullptr;
    out.push_back({id, fmt::format("d{}-job{}", daemon, out.size()), nullptr, {}});
    return &out.back();
  };
  const json& jobs = at(src.jobs, k::kJobs);
  if (jobs.is_array())
    for (const json& row : jobs)
      if (at(row, k::kJob).is_string())
        if (JobView* v = find(row[k::kJob].get<std::string>())) v->row = row;
  for (OpTimeline& op : recent_ops(src.ops, only, 0))
    if (JobView* v = find(op.job)) v->ops.push_back(std::move(op));
  return out;
}

std::string straggler_of(const json& row) {
  const json& who = at(at(row, k::kStragglers), k::kStraggler);
  return who.is_number() ? "rank " + who.dump() : "-";
}

std::string jobs_table(const std::vector<JobView>& jobs) {
  if (jobs.empty()) return "<p class=\"note\">no jobs</p>\n";
  std::string out = "<table class=\"jobs sortable\">" +
                    header({"job", "world", "local ranks", "ops done", "failed", "in flight",
                            "reduced", "throughput", "straggler", "last error"}) +
                    "<tbody>\n";
  for (const JobView& v : jobs) {
    const json& r = v.row;
    std::string error = at(r, k::kLastError).is_string() ? html(at(r, k::kLastError)) : "";
    out += fmt::format("<tr><td><a href=\"#{}\">{}</a></td>", v.anchor, html_escape(v.id)) +
           td_num(html(at(r, k::kWorldSize)), number(r, k::kWorldSize)) +
           td_num(html(at(r, k::kLocalSize)), number(r, k::kLocalSize)) +
           td_num(html(at(r, k::kOpsCompleted)), number(r, k::kOpsCompleted)) +
           td_num(html(at(r, k::kOpsFailed)), number(r, k::kOpsFailed)) +
           td_num(html(at(r, k::kOpsInFlight)), number(r, k::kOpsInFlight)) +
           td_bytes(r, k::kBytesReduced) + td_gbps(r, k::kThroughputGbps) + td(straggler_of(r)) +
           td(error.empty() ? "-" : error) + "</tr>\n";
  }
  return out + "</tbody></table>\n";
}

std::string straggler_verdict(const json& s) {
  const json& who = at(s, k::kStraggler);
  if (!who.is_number())
    return fmt::format("<p class=\"verdict\">no straggler over the last {} ops</p>\n",
                       html(at(s, k::kOps)));
  for (const json& r : at(s, k::kRanks)) {
    if (at(r, k::kRank) != who) continue;
    return fmt::format(
        "<p class=\"verdict bad\">rank {} (pid {}) is the straggler: last in {:.0f}% of {} ops, "
        "{:.1f} ms after the first (median; p99 {:.1f} ms)</p>\n",
        html(who), html(at(r, k::kPid)), 100 * number(r, k::kLastShare).value_or(0),
        html(at(s, k::kOps)), 1e3 * number(r, k::kMedianLagS).value_or(0),
        1e3 * number(r, k::kP99LagS).value_or(0));
  }
  return "";
}

std::string stragglers_table(const json& row) {
  const json& s = at(row, k::kStragglers);
  const json& ranks = at(s, k::kRanks);
  if (!ranks.is_array() || ranks.empty())
    return "<p class=\"note\">no straggler report (a job needs two local ranks)</p>\n";
  std::string out =
      straggler_verdict(s) + "<table class=\"stragglers sortable\">" +
      header({"rank", "local rank", "pid", "lag, median (ms)", "lag, p99 (ms)", "last in"}) +
      "<tbody>\n";
  for (const json& r : ranks) {
    const bool slow = at(r, k::kRank).is_number() && at(r, k::kRank) == at(s, k::kStraggler);
    auto share = number(r, k::kLastShare);
    out += fmt::format("<tr class=\"{}\" data-rank=\"{}\">", slow ? "rank straggler" : "rank",
                       html(at(r, k::kRank))) +
           td_num(html(at(r, k::kRank)), number(r, k::kRank)) +
           td_num(html(at(r, k::kLocalRank)), number(r, k::kLocalRank)) + td(html(at(r, k::kPid))) +
           td_ms(number(r, k::kMedianLagS)) + td_ms(number(r, k::kP99LagS)) +
           td_num(share ? fmt::format("{:.0f}%", 100 * *share) : "-", share) + "</tr>\n";
  }
  return out + "</tbody></table>\n";
}

std::string slowest_section(const std::vector<OpTimeline>& ops) {
  const OpTimeline* op = slowest_op(ops);
  if (!op) return "<p class=\"note\">no recent ops</p>\n";
  const std::string result = op->code == 0 ? "ok" : html_escape(op->error);
  return fmt::format(
             "<p class=\"op\">{}, {}: {:.3f} ms from the first arrival to the end ({}); the "
             "slowest of its {} recent ops here</p>\n",
             html_escape(op->what()), html_escape(format_bytes(op->bytes)),
             double(op->end_ns - op->begin_ns) / 1e6, result, ops.size()) +
         timeline_svg(*op) + "\n";
}

std::string job_section(const JobView& v) {
  std::string out = fmt::format(
      "<section class=\"job\" id=\"{}\" data-job=\"{}\">\n<h3>job <code>{}</code></h3>\n", v.anchor,
      html_escape(v.id), html_escape(v.id));
  if (v.row.is_null())
    out +=
        "<p class=\"note\">none of its ranks is connected here now; its recent ops "
        "remain</p>\n";
  else
    out += "<h4>Stragglers</h4>\n" + stragglers_table(v.row);
  return out + "<h4>Slowest recent op</h4>\n" + slowest_section(v.ops) + "</section>\n";
}

std::string peers_section(const json& reply) {
  const json& self = at(reply, "self");
  if (!self.is_object()) return "<p class=\"note\">no cluster configured: a single host</p>\n";
  std::string out =
      fmt::format("<p>cluster {}, this host {} ({}, rack {}), epoch {}</p>\n",
                  html(at(reply, "cluster")), html(at(self, "host")), html(at(self, "address")),
                  html(at(self, "rack")), html(at(reply, "epoch")));
  const json& peers = at(reply, "peers");
  if (!peers.is_array() || peers.empty()) return out + "<p class=\"note\">no peers</p>\n";
  out += "<table class=\"peers sortable\">" +
         header({"peer", "address", "rack", "state", "transport", "sent", "received", "send",
                 "recv", "connects", "last error"}) +
         "<tbody>\n";
  for (const json& p : peers) {
    std::string error = at(p, "last_error").is_string() ? html(at(p, "last_error")) : "";
    out += "<tr>" + td(html(at(p, "host"))) + td(html(at(p, "address"))) + td(html(at(p, "rack"))) +
           td(html(at(p, "state"))) + td(html(at(p, "transport"))) + td_bytes(p, "bytes_sent") +
           td_bytes(p, "bytes_received") + td_gbps(p, "send_gbps") + td_gbps(p, "recv_gbps") +
           td_num(html(at(p, "connects")), number(p, "connects")) +
           td(error.empty() ? "-" : error) + "</tr>\n";
  }
  return out + "</tbody></table>\n";
}

std::string daemon_section(const ReportSource& src, size_t d, const std::string& only,
                           size_t* jobs_drawn) {
  const std::vector<JobView> jobs = jobs_of(src, only, d);
  *jobs_drawn += jobs.size();
  std::string out = fmt::format(
                        "<section class=\"daemon\" data-socket=\"{0}\">\n"
                        "<h2>gsyncd at <code>{0}</code></h2>\n",
                        html_escape(src.name)) +
                    status_line(src.status) + "<h3>Jobs</h3>\n" + jobs_table(jobs);
  for (const JobView& v : jobs) out += job_section(v);
  return out + "<h3>Peers</h3>\n" + peers_section(src.peers) + "</section>\n";
}

}  // namespace

std::string html_escape(std::string_view in) {
  std::string out;
  out.reserve(in.size());
  for (char c : in) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        // Control characters are not text (and NUL ends some readers' strings).
        out +=
            (static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\n') || c == 0x7f ? '?' : c;
    }
  }
  return out;
}

std::string html_report(const std::vector<ReportSource>& sources, const std::string& job,
                        const std::string& generated, size_t* jobs_drawn) {
  *jobs_drawn = 0;
  std::string body;
  for (size_t d = 0; d < sources.size(); d++)
    body += daemon_section(sources[d], d, job, jobs_drawn);
  std::string filter = job.empty() ? "" : " Only job <code>" + html_escape(job) + "</code>.";
  if (!job.empty() && *jobs_drawn == 0)
    filter += " None of these daemons has it (or any recent op of it).";
  return fmt::format(
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
      "<title>gsync report</title>\n<style>{}</style>\n</head>\n<body>\n<h1>gsync report</h1>\n"
      "<p class=\"meta\">{} daemon{}, {}.{} Timelines are in ms from the op's first rank's "
      "arrival, on its daemon's clock.</p>\n{}<script>{}</script>\n</body>\n</html>\n",
      kStyle, sources.size(), sources.size() == 1 ? "" : "s", html_escape(generated), filter, body,
      kScript);
}

}  // namespace gsync::cli
