// SPDX-License-Identifier: Apache-2.0
//
// The control messages between daemons (daemon/cluster/messages.h) and
// what the daemon checks of them without a network: the rank map a
// JobAnnounce feeds (cluster/membership.h), and, for OpReady, OpData and
// OpAbort, the engine's checks against the op's plan and this host's
// schedule (collective/op_checks.h), the plan built as the engine builds it
// (build_plan) for a cluster the input describes.
//
// Input: a 6-byte scenario (hosts, this host, racks, algorithm, the peer
// the message is from, local world size), then one message, dispatched by
// its type byte as ControlPlane::on_control does. An op's plan comes from
// this host's own ranks, never from the peer; the fuzzer takes the shape
// the message claims (cut to at most 64 Ki elements, so a run stays fast)
// so that the engine's checks past the shape are reached too.
//
// Properties: a JobAnnounce makes a job ready exactly when the ranks of all
// hosts cover its world once, and then none is missing; an OpAbort's
// status carries an error code and who sent it; an OpData the checks let
// through lands inside the op's scratch or tensor, in a phase of the
// schedule that expects it. A Probe the checks let through fits its burst,
// and its answer (a ping's, a burst's last chunk's, no other) is a
// ProbeReply the asker's checks take, echoing the probe; the clock
// estimate of any reply is finite; HostInfo's strings stay in their fields.
// An ElasticJoin that decodes encodes back to itself; an ElasticWorld that
// decodes lists hosts in rank order, each with ranks, and once adopted
// numbers the ranks densely, the same world again being stale.
#include <algorithm>
#include <cmath>
#include <set>

#include "daemon/cluster/elastic.h"
#include "daemon/cluster/membership.h"
#include "daemon/cluster/messages.h"
#include "daemon/cluster/probe_messages.h"
#include "daemon/collective/op_checks.h"
#include "daemon/collective/plan.h"
#include "tests/fuzz/fuzz_target.h"

namespace {

using namespace gsync;
using namespace gsync::cluster;
using collective::OpAbort;
using collective::OpReady;
using collective::kOpAbort;
using collective::kOpData;
using collective::kOpReady;

struct Scenario {
  int hosts, self, peer, local_world;
  bool two_racks;
  uint8_t algo;
};

void check_announce(const Scenario& sc, std::string_view msg) {
  JobAnnounce a;
  std::vector<int> ranks;
  if (!decode_announce(msg, &a, &ranks)) return;
  FUZZ_CHECK(ranks.size() == static_cast<size_t>(a.nranks) && ranks.size() <= kMaxRanksPerHost);
  std::string job = field(a.job, sizeof a.job);
  FUZZ_CHECK(job.size() <= kJobMax);  // a full field has no NUL: field() stops at its end
  Membership m(sc.self);
  int world = sc.local_world;
  m.set_local(job, world, {0});
  m.set_remote(job, sc.peer, a.world_size, ranks);
  // Ready exactly when {0} and the peer's ranks are [0, world) once each.
  std::vector<int> all = ranks;
  all.push_back(0);
  std::sort(all.begin(), all.end());
  bool cover = a.world_size == world && all.size() == static_cast<size_t>(world);
  for (size_t i = 0; cover && i < all.size(); i++) cover = all[i] == static_cast<int>(i);
  FUZZ_CHECK(m.ready(job, world) == cover);
  std::vector<int> hosts;
  std::string missing = m.missing(job, world, {}, &hosts);
  if (cover) FUZZ_CHECK(missing.empty());
  auto parts = m.participants(job);
  FUZZ_CHECK(std::is_sorted(parts.begin(), parts.end()));
  for (int r : ranks) FUZZ_CHECK(m.host_of(job, r) == (r == 0 ? sc.self : sc.peer));
  for (auto& j : m.remove_host(sc.peer)) FUZZ_CHECK(j == job);
}

void check_leave(std::string_view msg) {
  JobLeave m;
  std::vector<proto::OpId> open;
  if (!decode_leave(msg, &m, &open)) return;
  FUZZ_CHECK(open.size() == m.nopen && open.size() <= kMaxLeaveOps);
  // A peer may fill a field to its end with no NUL; field() stops there.
  FUZZ_CHECK(field(m.reason, sizeof m.reason).size() <= sizeof m.reason);
  FUZZ_CHECK(field(m.job, sizeof m.job).size() <= kJobMax);
  FUZZ_CHECK(encode_leave(m, open) == msg);
}

void check_elastic_join(std::string_view msg) {
  ElasticJoin m;
  if (!decode_elastic_join(msg, &m)) return;
  FUZZ_CHECK(m.min_hosts > 0 && (m.max_hosts == 0 || m.max_hosts >= m.min_hosts));
  FUZZ_CHECK(m.local_size >= 0 && size_t(m.local_size) <= kMaxRanksPerHost);
  std::string job = field(m.job, sizeof m.job);
  FUZZ_CHECK(job.size() <= kJobMax);  // a full field has no NUL: field() stops at its end
  // The padding is the only thing a re-encoding may change, and a name
  // that fills its field (set_field keeps kJobMax - 1 bytes and the NUL;
  // found by the fuzzer).
  ElasticJoin again;
  FUZZ_CHECK(decode_elastic_join(encode_elastic_join(job, m.local_size, m.min_hosts, m.max_hosts),
                                 &again));
  FUZZ_CHECK(again.local_size == m.local_size && again.min_hosts == m.min_hosts &&
             again.max_hosts == m.max_hosts &&
             field(again.job, sizeof again.job) == job.substr(0, kJobMax - 1));
}

void check_elastic_world(std::string_view msg) {
  ElasticWorld m;
  std::vector<ElasticMember> hosts;
  if (!decode_elastic_world(msg, &m, &hosts)) return;
  FUZZ_CHECK(hosts.size() == m.nhosts && hosts.size() <= kMaxElasticWorldHosts);
  FUZZ_CHECK((m.failed != 0) == hosts.empty());
  ElasticWorldView w;
  w.epoch = m.epoch;
  w.hosts = hosts;
  w.failed = m.failed != 0;
  int64_t total = 0;
  for (size_t i = 0; i < hosts.size(); i++) {
    FUZZ_CHECK(hosts[i].local_size >= 1);
    if (i > 0) FUZZ_CHECK(hosts[i].host > hosts[i - 1].host);
    FUZZ_CHECK(w.offset_of(hosts[i].host) == total);
    total += hosts[i].local_size;
  }
  FUZZ_CHECK(w.world_size() == total);
  ElasticBook book(0);
  const std::string job = field(m.job, sizeof m.job);
  FUZZ_CHECK(book.adopt(job, w));
  FUZZ_CHECK(!book.adopt(job, w));  // the same epoch again is stale
  FUZZ_CHECK(book.find(job)->counter == epoch_counter(m.epoch));
}

void check_abort(std::string_view msg) {
  OpAbort m;
  if (!decode(msg, &m)) return;
  Status st = collective::abort_status(m, "h2");
  FUZZ_CHECK(gsync::proto::is_error_code(st.code()));
  FUZZ_CHECK(st.message().find("(reported by host h2)") != std::string::npos);
}

// The plan this host builds for the op the message names.
std::unique_ptr<collective::Plan> plan_for(const Scenario& sc, const OpReady& m) {
  collective::PlanInputs in;
  if (!proto::opcode_from_wire(m.opcode, &in.shape.opcode) ||
      !proto::dtype_from_wire(m.dtype, &in.shape.dtype) ||
      !proto::redop_from_wire(m.redop, &in.shape.redop))
    return nullptr;
  in.shape.count = in.shape.opcode == proto::Opcode::kBarrier ? 0 : m.count % (1 << 16);
  for (int h = 0; h < sc.hosts; h++)
    in.parts.push_back({h, sc.two_racks && h >= sc.hosts / 2 ? "r2" : "r1"});
  in.self = sc.self;
  if (in.shape.opcode == proto::Opcode::kBroadcast) {
    in.root_participant = static_cast<int>(m.slot % sc.hosts);
    in.shape.root = in.root_participant;
  }
  collective::Algo algo;
  in.algorithm = collective::algo_from_wire(sc.algo, &algo) ? collective::algo_name(algo) : "auto";
  in.chunk_bytes = m.chunk_bytes >= 4096 && m.chunk_bytes <= (256u << 20) ? m.chunk_bytes : 0;
  return collective::build_plan(in);
}

void check_op(const Scenario& sc, std::string_view msg) {
  OpReady m;
  if (!decode(msg, &m)) return;
  auto plan = plan_for(sc, m);
  if (!plan) return;
  const collective::Schedule& sched = plan->schedule(m.key, m.step);
  std::string op = "job fuzz op", from = "h2", self = "h1";
  collective::OpParty who{op, from, self};
  if (m.type == kOpReady) {
    Status st = collective::check_same_shape(*plan, m, who);
    if (st) st = collective::check_rendezvous(*plan, msg.size(), who);
    if (st) FUZZ_CHECK(!plan->eager && msg.size() == sizeof m);
    return;
  }
  collective::EagerLanding at;
  Status st = collective::check_op_data(*plan, sched, sc.peer, m, msg.size() - sizeof m, who, &at);
  if (!st) {
    FUZZ_CHECK(st.code() == GSYNC_ERR_PROTOCOL || st.code() == GSYNC_ERR_MISMATCH);
    return;
  }
  uint64_t bytes = plan->shape.bytes();
  FUZZ_CHECK(plan->eager && plan->nchunks == 1 && msg.size() - sizeof m == bytes);
  FUZZ_CHECK(!sched.chunks.empty() && at.phase < sched.chunks[0].size());
  bool expected = false;
  for (const auto& r : sched.chunks[0][at.phase].recvs)
    expected |= r.peer == sc.peer && r.kind == at.kind && (at.kind == collective::Xfer::kCopy ||
                                                           r.slot == at.slot);
  FUZZ_CHECK(expected);
  // Where on_eager_data copies it: slot at.slot of slots x bytes of scratch.
  if (at.kind == collective::Xfer::kReduce)
    FUZZ_CHECK(at.slot < plan->slots && (at.slot + uint64_t{1}) * bytes <=
                                            static_cast<uint64_t>(plan->slots) * bytes);
}

void check_probe(std::string_view msg) {
  Probe p;
  size_t payload = 0;
  std::string why;
  if (!decode_probe(msg, &p, &payload, &why)) {
    FUZZ_CHECK(!why.empty());
    return;
  }
  FUZZ_CHECK(payload == msg.size() - sizeof p && payload <= kProbeChunkBytes);
  if (p.kind == kProbePing)
    FUZZ_CHECK(payload == 0 && p.offset == 0 && p.total == 0);
  else
    FUZZ_CHECK(p.kind == kProbeData && payload > 0 && p.total <= kMaxProbeBytes &&
               p.offset + payload <= p.total);
  auto r = answer_probe(p, payload, 11, 12);
  FUZZ_CHECK(r.has_value() == (p.kind == kProbePing || p.offset + payload == p.total));
  if (!r) return;
  ProbeReply back;
  FUZZ_CHECK(decode_probe_reply(as_bytes(*r), &back, &why));
  FUZZ_CHECK(back.id == p.id && back.seq == p.seq && back.sent_ns == p.sent_ns &&
             back.kind == p.kind && back.received_ns == 11 && back.replied_ns == 12);
}

void check_probe_reply(std::string_view msg) {
  ProbeReply r;
  std::string why;
  if (!decode_probe_reply(msg, &r, &why)) {
    FUZZ_CHECK(!why.empty());
    return;
  }
  FUZZ_CHECK(msg.size() == sizeof r && r.bytes <= kMaxProbeBytes);
  FUZZ_CHECK((r.kind == kProbeData) == (r.bytes > 0));
  // Any timestamps a peer sends: the estimate is defined and finite.
  ClockSample s = midpoint(r.sent_ns, r.received_ns, r.replied_ns, r.sent_ns ^ r.replied_ns);
  FUZZ_CHECK(std::isfinite(s.offset_ns) && std::isfinite(s.rtt_ns));
}

void check_host_info(std::string_view msg) {
  HostInfo m;
  if (!decode_exact(msg, &m)) {
    FUZZ_CHECK(msg.size() != sizeof m);
    return;
  }
  FUZZ_CHECK(field(m.version, sizeof m.version).size() <= sizeof m.version);
  FUZZ_CHECK(field(m.build_id, sizeof m.build_id).size() <= sizeof m.build_id);
}

}  // namespace

GSYNC_FUZZ_TARGET(control_messages) {
  fuzz::Input in(data, size);
  Scenario sc;
  sc.hosts = 2 + in.byte() % 8;
  sc.self = in.byte() % sc.hosts;
  sc.two_racks = in.byte() & 1;
  sc.algo = in.byte() % 7;  // 0 and 6: auto
  sc.peer = in.byte() % sc.hosts;
  sc.local_world = 1 + in.byte() % 16;
  std::string_view msg = in.rest();
  if (msg.empty()) return 0;
  switch (static_cast<uint8_t>(msg[0])) {
    case kJobAnnounce:
      check_announce(sc, msg);
      break;
    case kJobLeave:
      check_leave(msg);
      break;
    case kOpAbort:
      check_abort(msg);
      break;
    case kOpReady:
    case kOpData:
      check_op(sc, msg);
      break;
    case kProbe:
      check_probe(msg);
      break;
    case kProbeReply:
      check_probe_reply(msg);
      break;
    case kHostInfo:
      check_host_info(msg);
      break;
    case kElasticJoin:
      check_elastic_join(msg);
      break;
    case kElasticWorld:
      check_elastic_world(msg);
      break;
    default:
      break;
  }
  return 0;
}
