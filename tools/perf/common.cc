// SPDX-License-Identifier: Apache-2.0
//
// gsync-perf: what every part's ranks do (connect, allreduce, fill and
// check their data) and how their reports come back.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "tools/common/reference.h"
#include "tools/perf/perf.h"

namespace gsync::perf {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int connect(const Options& o, int rank, uint64_t arena, gsync_comm_t** comm) {
  const Place& p = o.places[size_t(rank)];
  if (!tools::pin_to(p.cpus)) {
    tools::report(fmt::format("error rank {}: pin to CPUs {}: {}\n", rank, tools::cpu_list(p.cpus),
                              strerror(errno)));
    return -1;
  }
  gsync_config_t cfg;
  gsync_config_init(&cfg);
  cfg.socket_path = p.socket.c_str();
  std::string job = fmt::format("gsync-perf-{}{}", getppid(), o.job_tag);
  cfg.job_id = job.c_str();
  cfg.algorithm = o.plan_algo.empty() ? nullptr : o.plan_algo.c_str();
  cfg.chunk_bytes = o.plan_chunk;
  cfg.world_size = o.world();
  cfg.rank = rank;
  cfg.local_rank = p.local_rank;
  cfg.local_size = p.local_size;
  cfg.arena_bytes = arena;
  return gsync_connect(&cfg, comm);
}

bool allreduce(gsync_comm_t* comm, uint64_t key, uint64_t step, void* buf, size_t count,
               const Options& o, int rank, const gsync_compression_t* codec,
               int reproducible) {
  gsync_request_t* req = nullptr;
  gsync_allreduce_opts_t opts;
  gsync_allreduce_opts_init(&opts);
  opts.weight = rank + 1.0;
  if (codec) opts.compression = *codec;
  opts.reproducible = reproducible;
  int rc = gsync_allreduce_ex(comm, key, step, buf, count, o.dtype_id, o.op_id, &opts, &req);
  if (rc == 0) rc = gsync_wait(req, -1);
  if (rc != 0) tools::report(fmt::format("error rank {}: {}\n", rank, gsync_last_error()));
  if (req) gsync_request_free(req);
  return rc == 0;
}

bool ps_declare(gsync_comm_t* comm, uint64_t key, void* buf, size_t count, const Options& o,
                int rank) {
  gsync_request_t* req = nullptr;
  gsync_ps_opts_t opts;
  gsync_ps_opts_init(&opts);
  opts.lr = 1;  // a step's parameters are then minus the mean gradient
  int rc = gsync_ps_declare(comm, key, buf, count, o.dtype_id, &opts, &req);
  if (rc == 0) rc = gsync_wait(req, -1);
  if (rc != 0) tools::report(fmt::format("error rank {}: {}\n", rank, gsync_last_error()));
  if (req) gsync_request_free(req);
  return rc == 0;
}

bool push_pull(gsync_comm_t* comm, uint64_t key, uint64_t clock, void* buf, size_t count,
               const Options& o, int rank) {
  gsync_request_t* req = nullptr;
  int rc = gsync_ps_push_pull(comm, key, clock, buf, count, o.dtype_id, nullptr, &req);
  if (rc == 0) rc = gsync_wait(req, -1);
  if (rc != 0) tools::report(fmt::format("error rank {}: {}\n", rank, gsync_last_error()));
  if (req) gsync_request_free(req);
  return rc == 0;
}

// Sums of small integers are exact in any order; a weighted average across
// hosts is folded in another order than the reference, so it may differ in
// the last bits.
bool same(double got, double want, const Options& o) {
  if (o.op_id != GSYNC_WEIGHTED_AVG || o.places.back().host == 0) return got == want;
  return std::abs(got - want) <= 1e-2 * std::max(1.0, std::abs(want));
}

size_t fill_and_count_wrong(void* buf, size_t count, const Options& o, int rank, bool check) {
  size_t wrong = 0;
  for (size_t i = 0; i < count; i++) {
    if (!check)
      tools::store(buf, o.dtype_id, i, tools::test_value(rank, i));
    else if (!same(tools::load(buf, o.dtype_id, i), tools::expected(o.dtype_id, o.op_id, o.world(), i), o))
      wrong++;
  }
  return wrong;
}

bool barrier(gsync_comm_t* comm, uint64_t* step, int rank) {
  if (gsync_barrier(comm, (*step)++, kBarrierTimeoutMs) == 0) return true;
  tools::report(fmt::format("error rank {}: {}\n", rank, gsync_last_error()));
  return false;
}

bool collect(const std::vector<tools::ChildResult>& res, const std::string& kind,
             std::vector<std::vector<std::vector<double>>>* rows) {
  bool ok = true;
  rows->assign(res.size(), {});
  for (size_t r = 0; r < res.size(); r++) {
    std::istringstream in(res[r].output);
    std::string line;
    while (std::getline(in, line)) {
      std::istringstream ls(line);
      std::string k;
      ls >> k;
      if (k == "error") {
        std::fprintf(stderr, "gsync-perf: %s\n", line.c_str());
        ok = false;
      } else if (k == kind) {
        std::vector<double> v;
        double x;
        while (ls >> x) v.push_back(x);
        (*rows)[r].push_back(v);
      }
    }
    if (res[r].code != 0) {
      std::fprintf(stderr, "gsync-perf: rank %zu exited with %d\n", r, res[r].code);
      ok = false;
    }
  }
  return ok;
}

std::vector<std::string> rank_errors(const std::vector<tools::ChildResult>& res) {
  std::vector<std::string> out(res.size());
  for (size_t r = 0; r < res.size(); r++) {
    std::istringstream in(res[r].output);
    std::string line;
    while (out[r].empty() && std::getline(in, line))
      if (line.rfind("error ", 0) == 0) out[r] = line.substr(6);
    if (out[r].empty() && res[r].code != 0)
      out[r] = fmt::format("rank {} exited with {}", r, res[r].code);
  }
  return out;
}

double bus_factor(int n) { return n > 1 ? 2.0 * (n - 1) / n : 0.0; }

double daemon_cpu_s(const std::string& admin_socket) {
  auto j = nlohmann::json::parse(tools::admin_query(admin_socket, "cpu"), nullptr, false);
  return j.is_object() && j.contains("cpu_s") && j["cpu_s"].is_number() ? j["cpu_s"].get<double>()
                                                                         : -1;
}

std::string daemon_isa(const std::string& admin_socket) {
  std::string reply = tools::admin_query(admin_socket, "status");
  auto j = nlohmann::json::parse(reply, nullptr, false);
  return j.is_object() && j.contains("isa") ? j["isa"].get<std::string>() : "unknown";
}

}  // namespace gsync::perf
