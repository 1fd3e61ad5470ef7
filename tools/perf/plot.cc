// SPDX-License-Identifier: Apache-2.0
//
// gsync-perf --plot (plot.h): gnuplot's script and its run.
#include "tools/perf/plot.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "tools/perf/perf.h"

namespace gsync::perf {

namespace {

// A gnuplot double-quoted string: its backslash escapes and quotes kept
// literal, so that host names and CPU models print as they are.
std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += static_cast<unsigned char>(c) < 0x20 ? '?' : c;
  }
  return out + "\"";
}

// 4096 -> "4K", 268435456 -> "256M"; other sizes in bytes.
std::string size_label(uint64_t b) {
  for (auto [shift, unit] : {std::pair{30, 'G'}, std::pair{20, 'M'}, std::pair{10, 'K'}})
    if (b >= (uint64_t{1} << shift) && b % (uint64_t{1} << shift) == 0)
      return fmt::format("{}{}", b >> shift, unit);
  return std::to_string(b);
}

std::string script_of(const std::string& png, const std::vector<PlotLine>& lines,
                      const std::string& title) {
  std::set<uint64_t> sizes;
  for (const auto& l : lines)
    for (const auto& [bytes, gbps] : l.points) sizes.insert(bytes);
  std::string tics;
  for (uint64_t b : sizes)
    tics += fmt::format("{}\"{}\" {}", tics.empty() ? "" : ", ", size_label(b), b);
  std::string s = fmt::format(
      "if (strstrt(GPVAL_TERMINALS, \"pngcairo\") > 0) {{\n"
      "  set terminal pngcairo size {0},{1} noenhanced font \"sans,10\"\n"
      "}} else {{\n  set terminal png size {0},{1} noenhanced\n}}\n"
      "set output {2}\nset title {3}\nset xlabel \"message size (bytes)\"\n"
      "set ylabel \"busbw (GB/s)\"\nset logscale x 2\nset logscale y 10\nset xtics ({4})\n"
      "set xrange [{5}:{6}]\nset grid\nset key top left\n",
      kPlotWidth, kPlotHeight, quoted(png), quoted(title), tics, double(*sizes.begin()) / 1.5,
      double(*sizes.rbegin()) * 1.5);
  std::string plot;
  for (size_t i = 0; i < lines.size(); i++) {
    s += fmt::format("$line{} << EOD\n", i);
    for (const auto& [bytes, gbps] : lines[i].points) s += fmt::format("{} {:.9g}\n", bytes, gbps);
    s += "EOD\n";
    plot += fmt::format("{}$line{} using 1:2 with linespoints linewidth 2 pointtype 7 title {}",
                        i ? ", \\\n  " : "plot ", i, quoted(lines[i].name));
  }
  return s + plot + "\n";
}

// gnuplot reading the script file: its exit status and what it printed.
int run_gnuplot(const std::string& gnuplot, const std::string& script_path, std::string* out) {
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) return -1;
  pid_t pid = tools::spawn([&] {
    dup2(p[1], 1);
    dup2(p[1], 2);
    execl(gnuplot.c_str(), gnuplot.c_str(), script_path.c_str(), static_cast<char*>(nullptr));
    std::fprintf(stderr, "exec %s: %s\n", gnuplot.c_str(), std::strerror(errno));
    return 127;
  });
  close(p[1]);
  char buf[4096];
  for (ssize_t n; (n = read(p[0], buf, sizeof buf)) > 0;) out->append(buf, size_t(n));
  close(p[0]);
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace

std::string gnuplot_path() {
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path ? path : "");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    const std::string p = (dir.empty() ? "." : dir) + "/gnuplot";
    if (access(p.c_str(), X_OK) == 0) return p;
  }
  return "";
}

std::string plot_preflight(const std::string& png) {
  if (gnuplot_path().empty())
    return "--plot draws with gnuplot, which is not on $PATH: install Debian's gnuplot-nox "
           "(tools/setup-deps.sh does)";
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(png).has_parent_path() ? fs::path(png).parent_path() : ".";
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    return fmt::format("cannot write the plot {}: {} is not a folder", png, dir.string());
  if (access(dir.c_str(), W_OK) != 0 || (fs::exists(png, ec) && access(png.c_str(), W_OK) != 0))
    return fmt::format("cannot write the plot {}: {}", png, std::strerror(errno));
  return "";
}

std::string machine_label() {
  char host[256] = "?";
  if (gethostname(host, sizeof host - 1) != 0) std::strcpy(host, "?");
  std::string model = "CPU model unknown";
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0 && line.find(':') != std::string::npos) {
      model = line.substr(line.find(':') + 1);
      model.erase(0, model.find_first_not_of(" \t"));
      break;
    }
  const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  return fmt::format("{}, {} CPU{}, {}", host, cpus, cpus == 1 ? "" : "s", model);
}

std::string plot_busbw(const std::string& png, const std::vector<PlotLine>& given,
                       const std::string& title) {
  std::vector<PlotLine> lines;
  for (const PlotLine& l : given) {
    PlotLine kept{l.name, {}};
    for (const auto& pt : l.points)
      if (pt.first > 0 && pt.second > 0) kept.points.push_back(pt);
    if (!kept.points.empty()) lines.push_back(std::move(kept));
  }
  if (lines.empty())
    return "nothing to plot: no busbw above 0 (one rank alone moves nothing between ranks: "
           "run two or more)";
  const std::string gnuplot = gnuplot_path();
  if (gnuplot.empty()) return "gnuplot is not on $PATH (Debian's gnuplot-nox)";
  char script[] = "/tmp/gsync-perf-plot-XXXXXX";
  const int fd = mkstemp(script);
  if (fd < 0) return fmt::format("cannot make a temporary file: {}", std::strerror(errno));
  const std::string text = script_of(png, lines, title);
  const bool written = write(fd, text.data(), text.size()) == ssize_t(text.size());
  close(fd);
  std::string said;
  const int rc = written ? run_gnuplot(gnuplot, script, &said) : -1;
  unlink(script);
  if (rc != 0)
    return fmt::format("gnuplot ({}) failed (status {}) drawing {}: {}", gnuplot, rc, png, said);
  std::error_code ec;
  if (!std::filesystem::exists(png, ec) || std::filesystem::file_size(png, ec) == 0)
    return fmt::format("gnuplot ({}) left no picture at {}: {}", gnuplot, png, said);
  return "";
}

bool plot_sweep(const Options& o, std::vector<PlotLine> lines, const Peers& peer) {
  auto add_peer = [&](const peers::Result& r, const std::string& name) {
    if (r.rows.empty()) return;
    PlotLine l{name, {}};
    for (const auto& [bytes, row] : r.rows) l.points.emplace_back(bytes, row.busbw_gbps);
    lines.push_back(std::move(l));
  };
  add_peer(peer.gloo, peer.gloo.algo.empty() ? "Gloo" : "Gloo (" + peer.gloo.algo + ")");
  add_peer(peer.mpi, "Open MPI (TCP)");
  char date[64] = "?";
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  if (localtime_r(&now, &local)) std::strftime(date, sizeof date, "%Y-%m-%d %H:%M %Z", &local);
  const std::string title = fmt::format(
      "gsync-perf: allreduce busbw by message size\n{} - {}\n{} host{} x {} rank{}, {} {}",
      machine_label(), date, o.hosts, o.hosts == 1 ? "" : "s", o.ranks, o.ranks == 1 ? "" : "s",
      o.dtype, o.op);
  const std::string error = plot_busbw(o.plot, lines, title);
  FILE* to = o.json_out ? stderr : stdout;
  if (!error.empty()) {
    std::fprintf(stderr, "gsync-perf: %s\n", error.c_str());
    return false;
  }
  std::fprintf(to, "# plot: busbw by size drawn to %s (%dx%d)\n", o.plot.c_str(), kPlotWidth,
               kPlotHeight);
  return true;
}

}  // namespace gsync::perf
