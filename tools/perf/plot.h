// SPDX-License-Identifier: Apache-2.0
//
// gsync-perf --plot FILE.png: busbw against message size, both axes
// logarithmic, a line for gsync (one per codec or collective of the run)
// and one for each peer measured in the same run (--compare), titled with
// the machine (host name, CPUs, CPU model) and the date. gnuplot draws it
// (Debian's gnuplot-nox; its pngcairo terminal, else png): this file only
// writes gnuplot's script, the data inline as datablocks.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace gsync::perf {

struct Options;
struct Peers;

// The picture's size in pixels.
constexpr int kPlotWidth = 1000, kPlotHeight = 600;

struct PlotLine {
  std::string name;  // the legend: "gsync", "gsync int8", "Gloo (ring)"
  std::vector<std::pair<uint64_t, double>> points;  // bytes, busbw GB/s
};

// gnuplot on $PATH, or "".
std::string gnuplot_path();

// Before any measuring: "" when --plot png can be drawn at the end, else
// why not (no gnuplot, naming its package; a folder that is not there or
// not writable).
std::string plot_preflight(const std::string& png);

// "h1, 16 CPUs, AMD EPYC 7763 64-Core Processor" (from /proc/cpuinfo).
std::string machine_label();

// Draws the lines (points with busbw > 0; a log axis has no 0) into png.
// "" on success, else why not (gnuplot's own words included).
std::string plot_busbw(const std::string& png, const std::vector<PlotLine>& lines,
                       const std::string& title);

// The sweep's end: gsync's lines and the peers' (peer.gloo, peer.mpi) drawn
// to o.plot with the machine, the date and the run in the title; says where
// (or why not) on stdout, or stderr with --json. False when it failed.
bool plot_sweep(const Options& o, std::vector<PlotLine> gsync, const Peers& peer);

}  // namespace gsync::perf
