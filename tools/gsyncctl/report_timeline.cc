// SPDX-License-Identifier: Apache-2.0
//
// gsyncctl report's op timeline: one op as inline SVG (report.h).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "tools/gsyncctl/report.h"

namespace gsync::cli {

namespace {

// The drawing's geometry, in CSS pixels.
constexpr int kWidth = 860;
constexpr int kLabelWidth = 150;  // the rows' names, left of the plot
constexpr int kRightMargin = 70;  // room for the last row's "+x ms"
constexpr int kAxisHeight = 26;   // tick labels above the rows
constexpr int kRowHeight = 22;
constexpr int kPlotWidth = kWidth - kLabelWidth - kRightMargin;

double ms(int64_t ns) { return double(ns) / 1e6; }

// A tick step of 1, 2 or 5 times a power of ten giving at most 6 ticks.
double tick_step_ms(double span_ms) {
  if (!(span_ms > 0)) return 1;
  const double raw = span_ms / 6;
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * power >= raw) return m * power;
  return 10 * power;
}

// The op's clock to x: ns from the first arrival, clamped to the plot.
struct Scale {
  int64_t begin_ns = 0;
  double span_ns = 1;
  double x(int64_t ns) const {
    const double f = std::clamp(double(ns - begin_ns) / span_ns, 0.0, 1.0);
    return kLabelWidth + f * kPlotWidth;
  }
};

std::string axis(const Scale& s, int height) {
  std::string out = "<g class=\"axis\">";
  const double span_ms = s.span_ns / 1e6, step = tick_step_ms(span_ms);
  for (double t = 0; t <= span_ms * (1 + 1e-9); t += step) {
    const double x = s.x(s.begin_ns + int64_t(std::llround(t * 1e6)));
    out += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"{1}\" x2=\"{0:.1f}\" y2=\"{2}\"/>"
        "<text x=\"{0:.1f}\" y=\"{3}\" text-anchor=\"middle\">{4:g}</text>",
        x, kAxisHeight - 6, height, kAxisHeight - 10, t);
  }
  return out +
         fmt::format("<text x=\"{}\" y=\"{}\">ms</text></g>", kLabelWidth - 30, kAxisHeight - 10);
}

std::string row_label(int y, const std::string& text) {
  return fmt::format("<text class=\"label\" x=\"8\" y=\"{}\">{}</text>", y + 15, html_escape(text));
}

// A rank's row: a line from the first arrival to its own, and a dot there.
std::string arrival_row(const Scale& s, const OpTimeline::Arrival& a, int y) {
  const double x0 = s.x(s.begin_ns), x1 = s.x(a.ns);
  const double after = ms(a.ns - s.begin_ns);
  return fmt::format(
      "<g class=\"row arrival\" data-rank=\"{0}\"><title>rank {0} arrived {1:.3f} ms after the "
      "first</title>{2}<line class=\"lag\" x1=\"{3:.1f}\" y1=\"{5}\" x2=\"{4:.1f}\" y2=\"{5}\"/>"
      "<circle cx=\"{4:.1f}\" cy=\"{5}\" r=\"5\"/><text x=\"{6:.1f}\" y=\"{7}\">+{1:.3f}</text>"
      "</g>",
      a.rank, after, row_label(y, fmt::format("rank {}", a.rank)), x0, x1, y + 11, x1 + 8, y + 15);
}

std::string stage_row(const Scale& s, const OpTimeline::Stage& st, int y) {
  std::string out = fmt::format("<g class=\"row stage\" data-stage=\"{}\">", html_escape(st.stage));
  if (!st.valid())
    return out + fmt::format("<title>stage {}: no times</title>{}</g>", html_escape(st.stage),
                             row_label(y, "stage " + st.stage));
  const double x0 = s.x(st.begun_ns), x1 = s.x(st.finished_ns);
  return out + fmt::format(
                   "<title>stage {}: {:.3f} to {:.3f} ms ({:.3f} ms)</title>{}<rect x=\"{:.1f}\" "
                   "y=\"{}\" width=\"{:.1f}\" height=\"{}\"/></g>",
                   html_escape(st.stage), ms(st.begun_ns - s.begin_ns),
                   ms(st.finished_ns - s.begin_ns), ms(st.finished_ns - st.begun_ns),
                   row_label(y, "stage " + st.stage), x0, y + 4, std::max(1.0, x1 - x0),
                   kRowHeight - 8);
}

}  // namespace

const OpTimeline* slowest_op(const std::vector<OpTimeline>& ops) {
  const OpTimeline* worst = nullptr;
  for (const OpTimeline& op : ops)
    if (!worst || op.end_ns - op.begin_ns > worst->end_ns - worst->begin_ns) worst = &op;
  return worst;
}

std::string timeline_svg(const OpTimeline& op) {
  Scale s;
  s.begin_ns = op.begin_ns;
  s.span_ns = double(std::max<int64_t>(op.end_ns - op.begin_ns, 1000));
  std::vector<OpTimeline::Arrival> arrivals = op.arrivals;
  std::stable_sort(arrivals.begin(), arrivals.end(),
                   [](const auto& a, const auto& b) { return a.rank < b.rank; });
  const int rows = int(arrivals.size() + op.stages.size());
  const int height = kAxisHeight + rows * kRowHeight + 4;
  std::string out = fmt::format(
      "<svg class=\"timeline\" role=\"img\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\">"
      "<title>{2} of job {3}: {4:.3f} ms from the first arrival to the end</title>",
      kWidth, height, html_escape(op.what()), html_escape(op.job), ms(op.end_ns - op.begin_ns));
  out += axis(s, height);
  int y = kAxisHeight;
  for (const auto& a : arrivals) {
    out += arrival_row(s, a, y);
    y += kRowHeight;
  }
  for (const auto& st : op.stages) {
    out += stage_row(s, st, y);
    y += kRowHeight;
  }
  return out + "</svg>";
}

}  // namespace gsync::cli
