// SPDX-License-Identifier: Apache-2.0
//
// gsyncctl's text output: table layout, humanised numbers, and the rendering
// of the three admin replies (with the documents of docs/operations.md).

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tools/gsyncctl/render.h"
#include "tools/gsyncctl/table.h"

namespace gsync::cli {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(FormatTable, AlignsColumnsAndTrimsTrailingBlanks) {
  std::string out = format_table({{"NAME"}, {"COUNT", Align::kRight}, {"NOTE"}},
                                 {{"a", "1", ""}, {"longer-name", "12345", "x"}});
  EXPECT_EQ(out,
            "NAME         COUNT  NOTE\n"
            "a                1\n"
            "longer-name  12345  x\n");
}

TEST(FormatTable, ShortAndLongRows) {
  std::string out = format_table({{"A"}, {"B"}}, {{"1"}, {"2", "3", "dropped"}});
  EXPECT_EQ(out, "A  B\n1\n2  3\n");
}

TEST(FormatTable, HeaderOnlyWhenNoRows) {
  EXPECT_EQ(format_table({{"A", Align::kRight}, {"BB"}}, {}), "A  BB\n");
}

TEST(FormatTable, ControlCharactersAreNeutralised) {
  // Job names come from clients; an escape sequence must not reach the terminal.
  std::string out = format_table({{"JOB"}}, {{"evil\x1b[2Jjob\nx"}});
  EXPECT_EQ(out, "JOB\nevil?[2Jjob?x\n");
}

TEST(FormatTable, Utf8CountsCodePoints) {
  std::string out = format_table({{"N"}, {"X"}}, {{"\xc3\xa9t\xc3\xa9", "1"}, {"abcd", "2"}});
  EXPECT_EQ(out,
            "N     X\n"
            "\xc3\xa9t\xc3\xa9   1\n"
            "abcd  2\n");
}

TEST(FormatKeyValues, AlignsValues) {
  EXPECT_EQ(format_key_values({{"pid", "1"}, {"uptime", "3.0s"}, {"x", ""}}, 2),
            "  pid:    1\n"
            "  uptime: 3.0s\n"
            "  x:\n");
}

TEST(FormatBytes, Units) {
  EXPECT_EQ(format_bytes(0), "0 B");
  EXPECT_EQ(format_bytes(1023), "1023 B");
  EXPECT_EQ(format_bytes(1024), "1.0 KiB");
  EXPECT_EQ(format_bytes(123456), "120.6 KiB");
  EXPECT_EQ(format_bytes(1288490189), "1.2 GiB");
  EXPECT_EQ(format_bytes(1ull << 30), "1.0 GiB");
  EXPECT_EQ(format_bytes((1ull << 20) - 1), "1.0 MiB");  // not "1024.0 KiB"
  EXPECT_EQ(format_bytes(64ull << 30), "64.0 GiB");
  EXPECT_EQ(format_bytes(UINT64_MAX), "16.0 EiB");
}

TEST(FormatDuration, Ranges) {
  EXPECT_EQ(format_duration(0), "0.0s");
  EXPECT_EQ(format_duration(3.24), "3.2s");
  EXPECT_EQ(format_duration(59.97), "0m59s");
  EXPECT_EQ(format_duration(303), "5m03s");
  EXPECT_EQ(format_duration(7500), "2h05m");
  EXPECT_EQ(format_duration(273600), "3d04h");
  EXPECT_EQ(format_duration(-1), "-");
}

TEST(FormatGbps, TwoDecimals) {
  EXPECT_EQ(format_gbps(2.5), "2.50 GB/s");
  EXPECT_EQ(format_gbps(0), "0.00 GB/s");
}

const char* kStatus = R"json({"version":"0.1.0","protocol":1,"pid":123,"uptime_s":12.3,
  "isa":"avx512","reduce_threads":2,"config_source":"/etc/gsync/gsyncd.toml",
  "config":{"daemon":{"socket":"/run/gsync/gsyncd.sock","admin_socket":"/run/gsync/gsyncd-admin.sock",
     "socket_mode":"0666","log_level":"info","reduce_threads":0},
   "auth":{"allowed_uids":[0,1000],"allowed_gids":[]},
   "limits":{"default_arena":1073741824,"max_arena":68719476736,"max_clients":1024,
     "ring_entries":1024,"op_timeout_ms":60000,"inline_reduce_bytes":262144}},
  "clients":3,"jobs":1,"ops":{"completed":10,"failed":1,"in_flight":2},
  "bytes_reduced":123456,"throughput_gbps":1.23,"transport":"local (single host)"})json";

TEST(RenderStatus, KeyValuesThenConfig) {
  std::string out = render_status(nlohmann::json::parse(kStatus));
  EXPECT_THAT(out, HasSubstr("version:        0.1.0\n"));
  EXPECT_THAT(out, HasSubstr("uptime:         12.3s\n"));
  EXPECT_THAT(out, HasSubstr("ops:            10 completed, 1 failed, 2 in flight\n"));
  EXPECT_THAT(out, HasSubstr("bytes reduced:  120.6 KiB\n"));
  EXPECT_THAT(out, HasSubstr("throughput:     1.23 GB/s\n"));
  EXPECT_THAT(out, HasSubstr("config (from /etc/gsync/gsyncd.toml):\n  [daemon]\n"));
  EXPECT_THAT(out, HasSubstr("    default_arena:       1.0 GiB\n"));
  EXPECT_THAT(out, HasSubstr("    allowed_uids: [0, 1000]\n"));
  EXPECT_THAT(out, HasSubstr("    socket_mode:    0666\n"));
  // Sections keep the file's order.
  EXPECT_LT(out.find("[daemon]"), out.find("[auth]"));
  EXPECT_LT(out.find("[auth]"), out.find("[limits]"));
  // ... and keys too, though JSON objects arrive sorted by name.
  EXPECT_LT(out.find("    socket:"), out.find("    admin_socket:"));
  EXPECT_LT(out.find("    max_clients:"), out.find("    inline_reduce_bytes:"));
}

TEST(RenderStatus, PlanCacheOfACluster) {
  auto reply = nlohmann::json::parse(kStatus);
  reply["plans"] = {{"idle", 3}, {"leased", 1}, {"hits", 120}, {"misses", 4}, {"evictions", 2},
                    {"retiring", 0}};
  std::string out = render_status(reply);
  EXPECT_THAT(out, HasSubstr("plans:          3 idle, 1 leased; 120 hits, 4 misses, 2 evicted\n"));
  // A daemon without a cluster has no plans.
  EXPECT_THAT(render_status(nlohmann::json::parse(kStatus)), HasSubstr("plans:          -\n"));
}

TEST(RenderStatus, MissingFieldsPrintDash) {
  std::string out = render_status(nlohmann::json::parse(R"json({"version":"9.9.9"})json"));
  EXPECT_THAT(out, HasSubstr("version:        9.9.9\n"));
  EXPECT_THAT(out, HasSubstr("pid:            -\n"));
  EXPECT_THAT(out, HasSubstr("bytes reduced:  -\n"));
  EXPECT_THAT(out, HasSubstr("config (from -):\n"));
}

TEST(RenderJobs, TableWithRanks) {
  auto reply = nlohmann::json::parse(R"json({"jobs":[
    {"job":"train-1","world_size":4,"local_size":4,
     "ranks":[{"rank":0,"local_rank":0,"pid":123,"uid":0,"state":"connected"},
              {"rank":1,"local_rank":1,"pid":124,"uid":0,"state":"connected"},
              {"rank":2,"local_rank":2,"pid":125,"uid":null,"state":"dead"}],
     "ops_completed":10,"ops_failed":0,"ops_in_flight":1,"bytes_reduced":1234,
     "throughput_gbps":2.5,"error_feedback_bytes":8388608,"pinned_bytes":67108864,
     "last_error":""},
    {"job":"b","world_size":16,"local_size":2,"ranks":[],"ops_completed":0,"ops_failed":3,
     "ops_in_flight":0,"bytes_reduced":0,"throughput_gbps":0,"last_error":"rank 3 timed out"}]})json");
  std::string out = render_jobs(reply);
  EXPECT_EQ(out,
            "JOB      WORLD  LOCAL UP  DEAD  OPS DONE  FAILED  IN FLIGHT  REDUCED  THROUGHPUT  "
            "EF HELD    PINNED  LAST ERROR\n"
            "train-1      4       2/4  2           10       0          1  1.2 KiB   2.50 GB/s  "
            "8.0 MiB  64.0 MiB  -\n"
            "b           16       0/2  -            0       3          0      0 B   0.00 GB/s  "
            "      -         -  rank 3 timed out\n");
}

TEST(RenderJobs, ParameterServerKeysGetALineEach) {
  auto reply = nlohmann::json::parse(R"json({"jobs":[
    {"job":"ps","world_size":2,"local_size":1,"ranks":[],"ops_completed":4,"ops_failed":0,
     "ops_in_flight":0,"bytes_reduced":0,"throughput_gbps":0,"last_error":"",
     "sync_mode":"ssp:2",
     "parameters":[{"key":3,"count":1024,"dtype":"float32","optimizer":"sgd (lr 0.1)",
                    "sync":"ssp:2","shard":[0,512],"updates":46,
                    "worker_clocks":{"h1":12,"h2":11},"slowest_worker":"h2",
                    "shard_bytes":{"h1":2048,"h2":2048},"pulls_waiting":1,
                    "pull_wait_s":{"h1":0.84,"h2":0},"updates_per_s":23}]}]})json");
  EXPECT_THAT(render_jobs(reply),
              HasSubstr("job ps key 3 (sgd (lr 0.1), ssp:2): serves [0, 512) of 1024 float32; "
                        "clocks h1 12, h2 11 (slowest h2); pulls waited h1 0.8 s, h2 0.0 s; "
                        "46 updates (23.0/s), 1 pulls waiting\n"));
}

TEST(RenderJobs, LeasesGetALineWithTheKeepersEpochs) {
  auto reply = nlohmann::json::parse(R"json({"jobs":[
    {"job":"lj","world_size":4,"local_size":2,"ranks":[],"ops_completed":4,"ops_failed":0,
     "ops_in_flight":0,"bytes_reduced":0,"throughput_gbps":0,"last_error":"","departures":1,
     "leases":{"keeper":"h1","leased":24,"waits":1,"ends":2,"settled_clocks":24,"outstanding":0,
               "epochs":[{"epoch":3,"batches":48,"leased":49,"outstanding":0,"settled":48,
                          "reassigned":1,"free":0}]}},
    {"job":"plain","world_size":1,"local_size":1,"ranks":[],"ops_completed":0,"ops_failed":0,
     "ops_in_flight":0,"bytes_reduced":0,"throughput_gbps":0,"last_error":"","leases":{}}]})json");
  const std::string out = render_jobs(reply);
  EXPECT_THAT(out, HasSubstr("job lj leases (keeper h1): 24 leased here, 1 departed; epoch 3: 48 "
                             "batches, 48 settled, 0 outstanding, 1 reassigned, 0 free\n"));
  EXPECT_THAT(out, Not(HasSubstr("job plain leases")));
}

TEST(RenderJobs, Empty) {
  EXPECT_EQ(render_jobs(nlohmann::json::parse(R"json({"jobs":[]})json")), "no jobs\n");
}

TEST(RenderClients, Table) {
  auto reply = nlohmann::json::parse(R"json({"clients":[{"session":1,"pid":123,"uid":0,"gid":0,
    "job":"train-1","rank":0,"local_rank":0,"arena_bytes":1073741824,"device_allocations":2,
    "device_bytes":4194304,"ops_submitted":5,"ops_completed":5,"ops_failed":0,"bytes":1234,
    "connected_s":3.2}]})json");
  EXPECT_EQ(render_clients(reply),
            "SESSION  PID  UID  GID  JOB      RANK  LOCAL    ARENA  GPU MEM  SUBMITTED  DONE  "
            "FAILED    BYTES  CONNECTED\n"
            "      1  123    0    0  train-1     0      0  1.0 GiB  4.0 MiB          5     5  "
            "     0  1.2 KiB       3.2s\n");
  EXPECT_EQ(render_clients(nlohmann::json::parse(R"json({"clients":[]})json")),
            "no clients connected\n");
  EXPECT_THAT(render_clients(nlohmann::json::parse(R"json({"clients":[{"session":"x"}]})json")),
              Not(HasSubstr("null")));
}

TEST(RenderPeers, LastErrorWithItsAge) {
  auto reply = nlohmann::json::parse(R"json({"cluster":"c1","epoch":2,
    "self":{"host":"h1","address":"10.0.0.1:7700","rack":"r1"},
    "peers":[{"host":"h2","address":"10.0.0.2:7700","rack":"r1","state":"up","transport":"tcp","streams":2,
              "bytes_sent":1024,"bytes_received":2048,"send_gbps":1.5,"recv_gbps":0.25,
              "connects":2,"last_error":"connect to 10.0.0.2:7700: Connection refused",
              "last_error_age_s":185.2},
             {"host":"h3","address":"10.0.0.3:7700","rack":"r2","state":"up","transport":"tcp",
              "bytes_sent":0,"bytes_received":0,"send_gbps":0,"recv_gbps":0,
              "connects":1,"last_error":"","last_error_age_s":null}]})json");
  std::string out = render_peers(reply);
  EXPECT_THAT(out, HasSubstr("cluster c1, this host h1 (10.0.0.1:7700, rack r1), epoch 2\n"));
  EXPECT_THAT(out, HasSubstr("connect to 10.0.0.2:7700: Connection refused (3m05s ago)"));
  EXPECT_THAT(out, HasSubstr(" up     tcp x2 "));  // two streams; h3 sends no count
  EXPECT_THAT(out, HasSubstr(" up     tcp    "));
  // A peer with no error shows the placeholder, not an age.
  std::string h3 = out.substr(out.find("h3 "));
  EXPECT_EQ(h3.substr(h3.size() - 2), "-\n") << out;
  EXPECT_THAT(out, Not(HasSubstr("null")));
  // An older daemon sends no age: the error is shown as it is.
  reply["peers"][0].erase("last_error_age_s");
  EXPECT_THAT(render_peers(reply), HasSubstr("Connection refused\n"));
}

TEST(RenderOps, InFlightThenRecentTimelines) {
  auto reply = nlohmann::json::parse(R"json({
    "in_flight": [{"job": "train", "key": 3, "step": 7, "op": "allreduce", "bytes": 4096,
                   "arrived": 1, "local_size": 2, "not_arrived": [{"local_rank": 1, "rank": 5}],
                   "age_s": 2.5, "stage": null, "waiting_for": null}],
    "recent": [{"job": "train", "key": 1, "step": 0, "bytes": 1048576, "code": 0, "error": "",
                "arrivals": [{"rank": 0, "ns": 1000000}, {"rank": 1, "ns": 3500000}],
                "stages": [{"stage": "fold", "begun_ns": 3500000, "first_input_ns": 3500000,
                            "finished_ns": 4000000}],
                "finished_ns": 6000000}]})json");
  std::string out = render_ops(reply);
  EXPECT_THAT(out, HasSubstr("NOT ARRIVED"));
  EXPECT_THAT(out, HasSubstr("1/2"));
  EXPECT_THAT(out, HasSubstr("  5  "));        // the rank that has not arrived
  EXPECT_THAT(out, HasSubstr("2.500"));        // arrival spread, ms
  EXPECT_THAT(out, HasSubstr("fold 0.500"));   // the stage's span, ms
  EXPECT_THAT(out, HasSubstr("ok"));
  EXPECT_THAT(render_ops(nlohmann::json::object()), HasSubstr("no ops in flight"));
  // A daemon that records no ops says so, not "no recent ops".
  reply["recording"] = {{"on", false}, {"ring_ops", 1024}};
  reply["recent"] = nlohmann::json::array();
  out = render_ops(reply);
  EXPECT_THAT(out, HasSubstr("1/2"));
  EXPECT_THAT(out, HasSubstr("recording is off ([trace] record = false): only the ops in flight "
                             "are shown\n"));
  EXPECT_THAT(out, Not(HasSubstr("no recent ops")));
  reply["recording"]["on"] = true;
  EXPECT_THAT(render_ops(reply), HasSubstr("no recent ops\n"));
  // A reproducible op's inner ops are named by their user's key and part.
  reply["in_flight"][0]["key"] = (uint64_t{2} << 62) | 12;
  EXPECT_THAT(render_ops(reply), HasSubstr("12 repro-exponents/0"));
  reply["in_flight"][0]["key"] = (uint64_t{3} << 62) | (uint64_t{5} << 48) | 12;
  EXPECT_THAT(render_ops(reply), HasSubstr("12 repro-sums/5"));
}

}  // namespace
}  // namespace gsync::cli
