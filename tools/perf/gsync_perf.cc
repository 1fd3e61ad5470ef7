// SPDX-License-Identifier: Apache-2.0
//
// gsync-perf: allreduce benchmark in the columns of nccl-tests'
// all_reduce_perf, run through a real gsyncd by real rank processes, with the
// machine's memory bandwidth measured in the same run as the reference.
//
// Without --socket it starts a private daemon and stops it at the end.
// --workload resnet50 replaces the size sweep with ResNet-50's gradients in
// DDP's 25 MiB buckets, averaged step after step.
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "daemon/cluster/cluster_file.h"
#include "daemon/collective/schedule.h"
#include "daemon/config/config.h"
#include "tools/perf/perf.h"
#include "tools/testbed/testbed.h"

// Ctrl-C, SIGTERM or SIGHUP while a test bed is up: tear it down (its
// daemons, namespaces and files) instead of leaving it behind. The signals
// are blocked in every thread and taken by a watcher thread; children
// unblock them (tools/common/procs.cc). g_bed_mu keeps the watcher and
// main's own teardown at the end from running at once: whichever takes it
// first tears down, and the process ends before the other gets it.
namespace {
std::mutex g_bed_mu;
gsync::testbed::Testbed* g_bed = nullptr;

void take_stop_signals() {
  static sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  std::thread([] {
    int sig = 0;
    sigwait(&stop, &sig);
    std::lock_guard<std::mutex> lock(g_bed_mu);
    std::fprintf(stderr, "\ngsync-perf: %s: tearing the test bed down\n", strsignal(sig));
    if (g_bed) g_bed->teardown();
    _exit(128 + sig);
  }).detach();
}

const std::string kAlgos = "auto ring hier direct tree doubling";

// Where the ranks run: a test bed built for this run, a running cluster,
// or this host.
void add_host_options(CLI::App& app, gsync::perf::Options* o, std::string* admin_socket) {
  app.add_option("--socket", o->socket, "daemon socket; none: start a private daemon");
  app.add_option("--admin-socket", *admin_socket, "admin socket of that daemon (for its ISA)");
  app.add_option("-n,--ranks,--ranks-per-host", o->ranks, "rank processes per host")
      ->check(CLI::Range(1, 256));
  app.add_option("--hosts", o->hosts, "hosts of a test bed built for this run")
      ->check(CLI::Range(1, 64));
  app.add_option("--racks", o->racks, "racks of that test bed")->check(CLI::Range(1, 64));
  app.add_flag("--loopback", o->loopback, "test bed on 127.0.0.1 instead of namespaces");
  app.add_option("--uplink-mbit", o->uplink_mbit, "shape each rack's uplink (tbf), Mbit/s");
  app.add_option("--transport", o->transport,
                 "the test bed daemons' transport: tcp, dpdk (inside a rack, on --dpdk-vdev)")
      ->check(CLI::IsMember({"tcp", "dpdk"}));
  app.add_option("--dpdk-vdev", o->dpdk_vdev,
                 "DPDK's virtual device: memif (two hosts per rack) or af_packet (namespaces)")
      ->check(CLI::IsMember({"af_packet", "memif"}));
  app.add_option("--dpdk-payload", o->dpdk_payload,
                 "DPDK bytes per frame (0: the port's MTU's; over memif up to 9000, jumbo frames)")
      ->check(CLI::Validator(
          [](std::string& v) {
            const unsigned long n = std::strtoul(v.c_str(), nullptr, 10);
            return n == 0 || (n >= 64 && n <= 9000) ? std::string()
                                                    : std::string("0, or 64 to 9000");
          },
          "0|64..9000"));
  app.add_flag("--pin", o->pin,
               "give each test bed host its own share of the CPUs (daemon, ranks, and the "
               "peers' ranks on that host)");
  app.add_option("--cluster", o->cluster, "drive a running cluster (with --sockets)");
  app.add_option("--sockets", o->sockets, "client sockets of the cluster's hosts, comma-separated");
  app.add_option("--algo", o->algo, kAlgos + " (test bed daemons)");
  app.add_option("--compare", o->compare, "also run peers in the same run: gloo,mpi");
  app.add_option("--daemon-arg", o->daemon_args, "extra gsyncd argument for test bed daemons")
      ->allow_extra_args(false);
}

// What each size runs, and how it is reported. (The options are added in
// the order --help lists them.)
void add_sweep_options(CLI::App& app, gsync::perf::Options* o, std::string* min_s,
                       std::string* max_s) {
  app.add_option("-b,--min-bytes", *min_s, "smallest size (K/M/G suffixes)");
  app.add_option("-e,--max-bytes", *max_s, "largest size (K/M/G suffixes)");
  app.add_option("-f,--factor", o->factor, "size multiplier")->check(CLI::Range(1, 1024));
  app.add_option("-d,--dtype", o->dtype, "float32 float16 bfloat16 float64 int32");
  app.add_option("-o,--op", o->op, "sum avg weighted_avg min max");
  app.add_option("--iters", o->iters, "timed ops per size (rounded up to whole samples)")
      ->check(CLI::Range(1, 100000));
  app.add_option("--warmup", o->warmup, "untimed iterations per size")
      ->check(CLI::Range(0, 100000));
  app.add_flag("--json", o->json_out, "one JSON object per line");
  app.add_flag("--cpu", o->cpu,
               "CPU seconds per GB reduced (ranks and daemons, timed ops only), and the ratio "
               "to each --compare peer's (its ranks)");
  app.add_option("--compress", o->compress,
                 "run each size with this codec too (none fp16 bf16 int8[:BLOCK] "
                 "topk[:FRACTION], @cross_rack|@cross_host|@all, ,noef); may be given "
                 "several times: one row each")
      ->allow_extra_args(false);
  app.add_flag("--reproducible", o->reproducible,
               "run each size as a reproducible allreduce too (docs/reproducibility.md), "
               "beside the default one: its time and wire bytes against it");
  app.add_flag("--ps", o->ps,
               "run each size as a parameter server's push_pull too (SGD, BSP), beside the "
               "allreduce: one row each");
}

void add_tune_options(CLI::App& app, gsync::perf::Options* o) {
  app.add_flag("--tune", o->tune,
               "measure every candidate plan (algorithm, chunk size) at every size, write the "
               "fastest per size as a tuning table (--tune-out) and load it into the daemons");
  app.add_flag("--autotune-check", o->autotune_check,
               "--tune, then run the sweep on the tuned daemons and print each size's time "
               "against the winners and the rule's picks, measured again (exit 3 if one is over 5% "
               "slower, 1 if an op of it was not planned by the table)");
  app.add_option("--tune-out", o->tune_out, "where --tune writes the table")->capture_default_str();
  app.add_option("--tune-rounds", o->tune_rounds,
                 "rounds of --tune: each candidate once per round, in turn; medians")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  app.add_option("--tune-seed", o->tune_seed, "seed of the rounds' shuffled order")
      ->capture_default_str();
}

// What comes after the sweep (a picture of it), or instead of it.
void add_plot_and_workload_options(CLI::App& app, gsync::perf::Options* o) {
  app.add_option("--plot", o->plot,
                 "draw busbw by message size, gsync's and the peers' (--compare), to this PNG "
                 "(needs gnuplot: Debian's gnuplot-nox)");
  app.add_option("--workload", o->workload, "resnet50: ResNet-50 gradients in DDP buckets");
  app.add_option("--steps", o->steps, "steps of the workload")->check(CLI::Range(1, 100000));
}

// The options' combinations checked, the names resolved (dtype, op,
// codecs): "" or what is wrong.
std::string check_options(const std::string& min_s, const std::string& max_s,
                          gsync::perf::Options* o) {
  using namespace gsync;
  using namespace gsync::perf;
  if (o->pin && (o->hosts < 2 || !o->cluster.empty()))
    return "--pin splits the CPUs among the hosts of a test bed built for this run (--hosts N, "
           "N > 1)";
  if (!parse_byte_size(min_s, &o->min_bytes) || !parse_byte_size(max_s, &o->max_bytes) ||
      o->min_bytes == 0 || o->min_bytes > o->max_bytes)
    return fmt::format("bad size range '{}'..'{}'", min_s, max_s);
  if (!kDtypes.count(o->dtype) || !kOps.count(o->op))
    return fmt::format("unknown dtype '{}' or op '{}'", o->dtype, o->op);
  if (!o->workload.empty() && o->workload != "resnet50")
    return fmt::format("unknown workload '{}' (known: resnet50)", o->workload);
  collective::Algo unused;
  if (o->algo != "auto" && !collective::parse_algo(o->algo, &unused))
    return fmt::format("unknown --algo '{}' ({})", o->algo, kAlgos);
  o->dtype_id = kDtypes.at(o->dtype);
  o->op_id = kOps.at(o->op);
  if (std::string e = parse_codecs(o->compress, &o->codecs); !e.empty()) return e;
  if (std::string e = codecs_allowed(o->codecs, o->dtype_id, o->op_id); !e.empty()) return e;
  if (!o->compress.empty() && !o->workload.empty())
    return "--compress is for the size sweep, not --workload";
  if (o->reproducible && (o->ps || !o->workload.empty() ||
                          (o->dtype_id != GSYNC_FLOAT32 && o->dtype_id != GSYNC_FLOAT16 &&
                           o->dtype_id != GSYNC_BFLOAT16) ||
                          o->op_id == GSYNC_MIN || o->op_id == GSYNC_MAX))
    return "--reproducible is for the size sweep of a float sum, avg or weighted_avg "
           "(not --ps or --workload)";
  if (o->reproducible && std::none_of(o->codecs.begin(), o->codecs.end(),
                                      [](const CodecRun& c) { return c.none; }))
    return "--reproducible compares with the uncompressed run: add --compress none";
  if (o->ps && (!o->compress.empty() || !o->workload.empty()))
    return "--ps is for the size sweep without --compress";
  if (o->ps && o->dtype_id != GSYNC_FLOAT32 && o->dtype_id != GSYNC_FLOAT16 &&
      o->dtype_id != GSYNC_BFLOAT16)
    return "--ps takes float32, float16 or bfloat16 (the parameter server's dtypes)";
  if ((o->tune || o->autotune_check) && (!o->compress.empty() || o->ps || !o->workload.empty() ||
                                         !o->compare.empty() || o->algo != "auto"))
    return "--tune measures plain allreduces on daemons that choose per job: not with "
           "--compress, --ps, --workload, --compare or --algo";
  if (!o->plot.empty())
    return o->workload.empty() ? plot_preflight(o->plot)
                               : "--plot is for the size sweep, not --workload";
  return "";
}

// A running cluster: ranks on every host, through the sockets given. 0 or
// the exit status.
int use_cluster(gsync::perf::Options* o) {
  using namespace gsync;
  std::vector<std::string> socks;
  std::stringstream ss(o->sockets);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) socks.push_back(item);
  if (socks.empty()) {
    std::fprintf(stderr, "gsync-perf: --cluster needs --sockets S1,S2,... (one per host)\n");
    return 2;
  }
  o->hosts = static_cast<int>(socks.size());
  ClusterFile cf;
  std::string first_id;
  if (Status st = load_cluster_file(o->cluster, "", &cf); !st) {
    // Not this machine's cluster (or several of its hosts are here, as on
    // a test bed): any host id will do to read the racks.
    ClusterFile probe;
    std::ifstream in(o->cluster);
    std::string line;
    while (std::getline(in, line) && first_id.empty())
      if (auto p = line.find("id = \""); p != std::string::npos)
        first_id = line.substr(p + 6, line.find('"', p + 6) - p - 6);
    if (Status st2 = load_cluster_file(o->cluster, first_id, &cf); !st2) {
      std::fprintf(stderr, "gsync-perf: %s\n", st2.message().c_str());
      return 2;
    }
  }
  if (cf.hosts.size() != socks.size()) {
    std::fprintf(stderr, "gsync-perf: %zu sockets for %zu hosts in %s\n", socks.size(),
                 cf.hosts.size(), o->cluster.c_str());
    return 2;
  }
  for (int h = 0; h < o->hosts; h++) {
    o->racks_of.push_back(cf.hosts[size_t(h)].rack);
    o->host_ids.push_back(cf.hosts[size_t(h)].id);
    for (int k = 0; k < o->ranks; k++)
      o->places.push_back({socks[size_t(h)], h, h * o->ranks + k, k, o->ranks, {}, {}});
  }
  return 0;
}

// A test bed of o->hosts hosts, built for this run and torn down by a stop
// signal; *slots: each host's place for the peers' ranks. 0 or the exit
// status.
int build_bed(gsync::perf::Options* o, std::unique_ptr<gsync::testbed::Testbed>* bed,
              std::vector<gsync::peers::HostSlot>* slots, std::string* admin_socket) {
  using namespace gsync;
  take_stop_signals();
  testbed::Options t;
  t.hosts = o->hosts;
  t.racks = std::min(o->racks, o->hosts);
  t.loopback = o->loopback;
  t.uplink_mbit = o->uplink_mbit;
  t.pin = o->pin;
  if (o->transport == "dpdk") {
    t.dpdk = o->dpdk_vdev;
    t.dpdk_payload = o->dpdk_payload;
  }
  if (o->transport == "tcp") t.daemon_args = {"--transport", "tcp"};
  t.log_level = "warn";
  if (o->algo != "auto") t.daemon_args.insert(t.daemon_args.end(), {"--algo", o->algo});
  t.daemon_args.insert(t.daemon_args.end(), o->daemon_args.begin(), o->daemon_args.end());
  if (Status st = testbed::Testbed::create(t, bed); !st) {
    std::fprintf(stderr, "gsync-perf: cannot build the test bed: %s\n", st.message().c_str());
    return 1;
  }
  {
    std::lock_guard<std::mutex> lock(g_bed_mu);
    g_bed = bed->get();
  }
  const testbed::Testbed& b = **bed;
  if (!o->json_out)
    std::printf(
        "# test bed: %d hosts in %d racks, %s%s%s\n", o->hosts, t.racks,
        b.namespaces() ? "network namespaces" : "loopback",
        o->uplink_mbit ? fmt::format(", uplinks {} Mbit/s", o->uplink_mbit).c_str() : "",
        t.dpdk.empty() ? "" : fmt::format(", links in a rack over dpdk ({})", t.dpdk).c_str());
  std::string pins;
  for (int h = 0; h < o->hosts; h++) {
    o->racks_of.push_back(b.rack(h));
    o->host_ids.push_back(b.host_id(h));
    slots->push_back({b.netns(h), b.address(h), b.cpus(h)});
    for (int k = 0; k < o->ranks; k++)
      o->places.push_back(
          {b.socket(h), h, h * o->ranks + k, k, o->ranks, b.cpus(h), b.admin_socket(h)});
    pins += fmt::format("{}{} {}", h ? ", " : "", b.host_id(h), tools::cpu_list(b.cpus(h)));
  }
  if (o->pin && !o->json_out) std::printf("# hosts pinned to CPUs: %s\n", pins.c_str());
  *admin_socket = b.admin_socket(0);
  return 0;
}

// One host: the daemon at o->socket, or a private one started here. 0 or
// the exit status.
int use_this_host(gsync::perf::Options* o, std::unique_ptr<gsync::tools::DaemonProcess>* daemon,
                  std::string* admin_socket) {
  using namespace gsync;
  if (o->socket.empty()) {
    try {
      *daemon = std::make_unique<tools::DaemonProcess>(std::vector<std::string>{}, "", "warn");
    } catch (const std::exception& e) {
      std::fprintf(stderr, "gsync-perf: cannot start a private gsyncd: %s\n", e.what());
      return 1;
    }
    o->socket = (*daemon)->socket();
    *admin_socket = (*daemon)->admin_socket();
  }
  o->racks_of = {"r1"};
  for (int k = 0; k < o->ranks; k++)
    o->places.push_back({o->socket, 0, k, k, o->ranks, {}, *admin_socket});
  return 0;
}

// The peers (--compare) and the plain TCP streams, before gsync, each alone
// on the machine, over the same hosts.
gsync::perf::Peers run_peers(const gsync::perf::Options& o,
                             const std::vector<gsync::peers::HostSlot>& slots) {
  using namespace gsync;
  perf::Peers peer;
  int timeout = 600;
  // The peers' ranks where gsync's are: rank i on the host of place i.
  std::vector<peers::HostSlot> rank_slots;
  for (const auto& p : o.places)
    rank_slots.push_back(slots.empty() ? peers::HostSlot{} : slots[size_t(p.host)]);
  if (o.compare.find("gloo") != std::string::npos)
    peer.gloo = peers::run_gloo(rank_slots, o.min_bytes, o.max_bytes, o.iters, timeout);
  if (o.compare.find("mpi") != std::string::npos)
    peer.mpi = peers::run_mpi_tcp(rank_slots, o.min_bytes, o.max_bytes, o.iters, timeout);
  if (slots.size() >= 2) peer.tcp_gbps = peers::tcp_stream_gbps(slots[0], slots[1], 2.0);
  if (int far = perf::first_host_elsewhere(o);
      o.uplink_mbit > 0 && far > 0 && size_t(far) < slots.size())
    peer.uplink_gbps = peers::tcp_stream_gbps(slots[0], slots[size_t(far)], 3.0);
  return peer;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace gsync;
  using namespace gsync::perf;
  Options o;
  std::string min_s = "4K", max_s = "256M", admin_socket;
  CLI::App app{"gsync-perf: allreduce benchmark through gsyncd (nccl-tests columns)"};
  add_host_options(app, &o, &admin_socket);
  add_sweep_options(app, &o, &min_s, &max_s);
  add_tune_options(app, &o);
  add_plot_and_workload_options(app, &o);
  CLI11_PARSE(app, argc, argv);
  if (std::string e = check_options(min_s, max_s, &o); !e.empty()) {
    std::fprintf(stderr, "gsync-perf: %s\n", e.c_str());
    return 2;
  }

  // The reference is measured before any rank or daemon runs, on the
  // largest buffers of the sweep.
  MemoryReference ref;
  if (o.workload.empty()) ref = measure_memory(o.max_bytes, 5);

  std::unique_ptr<tools::DaemonProcess> daemon;
  std::unique_ptr<testbed::Testbed> bed;
  std::vector<peers::HostSlot> slots;  // per host, for peer drivers
  const int setup = !o.cluster.empty() ? use_cluster(&o)
                    : o.hosts > 1      ? build_bed(&o, &bed, &slots, &admin_socket)
                                       : use_this_host(&o, &daemon, &admin_socket);
  if (setup != 0) return setup;
  std::string isa = admin_socket.empty() ? "unknown" : daemon_isa(admin_socket);

  Peers peer;
  if (o.workload.empty()) peer = run_peers(o, slots);
  if (o.autotune_check) o.tune = true;
  int rc = o.tune               ? run_tune(o)
           : o.workload.empty() ? run_sweep(o, ref, isa, peer)
                                : run_workload(o);
  if (daemon) {
    int st = daemon->stop();
    if (st != 0) std::fprintf(stderr, "gsync-perf: private gsyncd exited with %d\n", st);
  }
  std::lock_guard<std::mutex> lock(g_bed_mu);
  std::fflush(stdout);
  bed.reset();
  g_bed = nullptr;
  return rc;
}
