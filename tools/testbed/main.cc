// SPDX-License-Identifier: Apache-2.0
//
// gsync-testbed: a multi-host gsync cluster on this machine, for people.
//   gsync-testbed up --hosts 4 --racks 2 --uplink-mbit 1000 [-- extra gsyncd args]
//   gsync-testbed up --etcd --hosts 3 --racks 1   (membership on a real etcd)
//   gsync-testbed add-host --rack 1 | remove-host h2 [--kill]
//   gsync-testbed cleanup
// `up` prints where every host's daemon is and stays in the foreground until
// Ctrl-C (or SIGTERM/SIGHUP), then tears everything down.
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <ctime>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "tools/common/procs.h"
#include "tools/testbed/control.h"
#include "tools/testbed/testbed.h"

namespace {

using gsync::testbed::Options;
using gsync::testbed::Testbed;

void print_table(const Testbed& bed) {
  std::vector<std::vector<std::string>> rows = {
      {"host", "rack", "address:port", "netns", "cpus", "client socket", "admin socket"}};
  for (int h = 0; h < bed.hosts(); h++)
    rows.push_back({bed.host_id(h), bed.rack(h), bed.address(h) + ":" + std::to_string(bed.port(h)),
                    bed.namespaces() ? bed.netns(h) : "-",
                    bed.cpus(h).empty() ? "all" : gsync::tools::cpu_list(bed.cpus(h)),
                    bed.socket(h), bed.admin_socket(h)});
  std::vector<size_t> width(rows[0].size(), 0);
  for (const auto& r : rows)
    for (size_t c = 0; c < r.size(); c++) width[c] = std::max(width[c], r[c].size());
  for (const auto& r : rows) {
    std::string line;
    for (size_t c = 0; c < r.size(); c++)
      line += fmt::format("{:<{}}", r[c], c + 1 < r.size() ? width[c] + 2 : 0);
    fmt::print("{}\n", line);
  }
}

int run_up(const Options& options) {
  // Signals are taken with sigwait below: blocked now, before create() forks
  // anything (children unblock them before exec).
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);

  std::unique_ptr<Testbed> bed;
  gsync::Status st = Testbed::create(options, &bed);
  if (!st) {
    fmt::print(stderr, "gsync-testbed: {}\n", st.message());
    return 1;
  }
  fmt::print("testbed {}: {} hosts in {} racks, ", bed->name(), bed->hosts(), bed->racks());
  if (bed->namespaces())
    fmt::print("network namespaces (fabric {}), uplinks {}\n", bed->fabric_netns(),
               bed->uplink_mbit() ? std::to_string(bed->uplink_mbit()) + " Mbit/s" : "unshaped");
  else
    fmt::print("loopback ({})\n", bed->loopback_reason());
  if (options.etcd)
    fmt::print("membership:   etcd {} ({} member{}, leases of {} s)\n", bed->etcd_endpoint(),
               bed->etcd_members(), bed->etcd_members() == 1 ? "" : "s",
               options.etcd_lease_ttl_s);
  else
    fmt::print("cluster file: {}\n", bed->cluster_file());
  fmt::print("cluster key:  {}\n", bed->key_file());
  if (options.start_daemons)
    fmt::print("daemon logs:  {}/<host>/gsyncd.log\n", bed->dir());
  else
    fmt::print("no daemons started (--no-daemons)\n");
  fmt::print("\n");
  print_table(*bed);
  if (bed->namespaces())
    fmt::print("\nrun a command on a host:  ip netns exec {} <command>\n", bed->netns(0));
  fmt::print("\nCtrl-C tears the testbed down.\n");
  std::fflush(stdout);

  std::vector<bool> reported(static_cast<size_t>(bed->hosts()), false);
  int control = -1;
  if (options.etcd) {
    std::string err;
    control = gsync::testbed::open_control(*bed, &err);
    if (control < 0)
      fmt::print(stderr, "gsync-testbed: {}; add-host and remove-host will not reach this bed\n", err);
    else
      fmt::print("\netcd {}; change the cluster with\n  gsync-testbed add-host --rack N\n"
                 "  gsync-testbed remove-host HOST [--kill]\n",
                 bed->etcd_endpoint());
  }
  for (;;) {
    // A fifth of a second: requests from add-host/remove-host are looked at as often.
    timespec tick{0, 200 * 1000 * 1000};
    int sig = sigtimedwait(&stop, nullptr, &tick);
    if (control >= 0) gsync::testbed::serve_control(*bed, control);
    if (sig > 0) {
      fmt::print("\n{}: tearing down {}\n", strsignal(sig), bed->name());
      break;
    }
    if (!options.start_daemons) continue;
    for (int h = 0; h < bed->hosts(); h++) {
      if (reported[static_cast<size_t>(h)] || bed->daemon_alive(h)) continue;
      reported[static_cast<size_t>(h)] = true;
      fmt::print(stderr, "gsync-testbed: gsyncd of {} exited; log {}\n", bed->host_id(h),
                 bed->daemon_log_path(h));
    }
  }
  if (control >= 0) close(control);
  bed.reset();
  fmt::print("done\n");
  return 0;
}

// gsync-testbed cleanup: what beds of processes that are gone left behind.
int run_cleanup() {
  std::string report;
  gsync::Status st = Testbed::cleanup_stale(&report);
  fmt::print("{}", report.empty() ? "nothing to clean up\n" : report);
  if (!st) {
    fmt::print(stderr, "gsync-testbed: {}\n", st.message());
    return 1;
  }
  return 0;
}

// --rack-sizes 3,1 into options->rack_sizes; false (the error printed) for
// a size that is not a number, or hosts or racks given that disagree.
bool parse_rack_sizes(const std::string& rack_sizes, bool hosts_given, bool racks_given,
                      Options* options) {
  std::string item;
  for (char c : rack_sizes + ",") {
    if (c != ',') {
      item += c;
      continue;
    }
    try {
      options->rack_sizes.push_back(std::stoi(item));
    } catch (const std::exception&) {
      fmt::print(stderr, "gsync-testbed: --rack-sizes: '{}' is not a number\n", item);
      return false;
    }
    item.clear();
  }
  int total = 0;
  for (int s : options->rack_sizes) total += s;
  int racks = static_cast<int>(options->rack_sizes.size());
  if ((hosts_given && options->hosts != total) || (racks_given && options->racks != racks)) {
    fmt::print(
        stderr,
        "gsync-testbed: --rack-sizes {} means {} hosts in {} racks, not --hosts {} --racks {}\n",
        rack_sizes, total, racks, options->hosts, options->racks);
    return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "gsync-testbed: a multi-host gsync cluster on one machine (namespaces, bridges, tbf)"};
  app.require_subcommand(1);

  Options options;
  std::string rack_sizes;
  bool no_daemons = false;
  CLI::App* up =
      app.add_subcommand("up", "build the network, start one gsyncd per host, wait for Ctrl-C");
  auto* hosts_opt =
      up->add_option("--hosts", options.hosts, "hosts in all")->check(CLI::Range(1, 254));
  auto* racks_opt = up->add_option("--racks", options.racks, "racks (hosts spread evenly)")
                        ->check(CLI::Range(1, 254));
  up->add_option("--rack-sizes", rack_sizes,
                 "hosts of each rack, e.g. 3,1 (instead of --hosts/--racks)");
  up->add_option("--uplink-mbit", options.uplink_mbit,
                 "rate of every rack uplink, each direction (tbf); 0 = unshaped");
  up->add_flag("--loopback", options.loopback,
               "all hosts on 127.0.0.1 with distinct ports, no namespaces");
  up->add_option("--gsyncd", options.gsyncd,
                 "gsyncd binary (default: $GSYNCD, beside this program, or on PATH)");
  up->add_option("--log-level", options.log_level, "gsyncd --log-level")->capture_default_str();
  up->add_option("--port", options.port, "TCP port of every host in namespace mode")
      ->capture_default_str();
  up->add_flag("--no-daemons", no_daemons, "build the network and cluster file only");
  up->add_option("--dpdk", options.dpdk,
                 "links inside a rack over DPDK: af_packet (namespaces) or memif (two hosts "
                 "per rack)");
  up->add_flag("--pin", options.pin,
               "give each host its own share of the CPUs (its daemon and what runs in it)");
  up->add_flag("--etcd", options.etcd,
               "membership on a real etcd the bed starts (loopback); hosts join and leave with "
               "add-host / remove-host");
  up->add_option("--etcd-lease-ttl-s", options.etcd_lease_ttl_s, "the daemons' lease ttl, s")
      ->capture_default_str();
  up->add_option("--etcd-members", options.etcd_members,
                 "etcd's members: 1, or a cluster of 3 or 5 (each on its own ports)")
      ->check(CLI::IsMember({1, 3, 5}))
      ->capture_default_str();
  up->add_option("daemon_args", options.daemon_args, "extra gsyncd arguments, after --");
  std::string bed_dir, remove_id;
  int add_rack = 1;
  bool remove_kill = false;
  CLI::App* add = app.add_subcommand("add-host", "a new host joins a running etcd bed");
  add->add_option("--rack", add_rack, "its rack (1-based; one past the last: a new rack)")
      ->capture_default_str();
  add->add_option("--bed", bed_dir, "the bed's folder (default: the one under /tmp)");
  CLI::App* rm = app.add_subcommand("remove-host", "a host of a running etcd bed leaves");
  rm->add_option("host", remove_id, "its id (h3)")->required();
  rm->add_flag("--kill", remove_kill, "SIGKILL (peers see it go when its lease expires), not a "
                                      "clean stop");
  rm->add_option("--bed", bed_dir, "the bed's folder (default: the one under /tmp)");

  app.add_subcommand("cleanup",
                     "delete namespaces and temp dirs of testbeds whose process is gone");

  CLI11_PARSE(app, argc, argv);

  if (app.got_subcommand("add-host"))
    return gsync::testbed::ask_bed(bed_dir, fmt::format("add-host {}", add_rack));
  if (app.got_subcommand("remove-host"))
    return gsync::testbed::ask_bed(
        bed_dir, fmt::format("remove-host {} {}", remove_id, remove_kill ? "kill" : "term"));
  if (app.got_subcommand("cleanup")) return run_cleanup();

  if (!rack_sizes.empty() &&
      !parse_rack_sizes(rack_sizes, hosts_opt->count() > 0, racks_opt->count() > 0, &options))
    return 2;
  options.start_daemons = !no_daemons;
  return run_up(options);
}
