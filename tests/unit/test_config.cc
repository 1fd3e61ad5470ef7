// SPDX-License-Identifier: Apache-2.0
//
// daemon/config: defaults, the TOML loader's error messages (file:line: key),
// byte sizes, the rules, and the config_to_toml -> load round trip.

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>

#include "daemon/config/config.h"
#include "daemon/config/config_internal.h"
#include "daemon/config/config_json.h"

namespace gsync {
namespace {

using ::testing::HasSubstr;

// Every field except source, so a failing comparison names the field.
void ExpectSameValues(const DaemonConfig& a, const DaemonConfig& b) {
  // Field by field, for a readable failure...
  EXPECT_EQ(a.socket_path, b.socket_path);
  EXPECT_EQ(a.admin_socket_path, b.admin_socket_path);
  EXPECT_EQ(a.socket_mode, b.socket_mode);
  EXPECT_EQ(a.log_level, b.log_level);
  EXPECT_EQ(a.reduce_threads, b.reduce_threads);
  EXPECT_EQ(a.poll_us, b.poll_us);
  EXPECT_EQ(a.poll_mode, b.poll_mode);
  EXPECT_EQ(a.allowed_uids, b.allowed_uids);
  EXPECT_EQ(a.allowed_gids, b.allowed_gids);
  EXPECT_EQ(a.default_arena_bytes, b.default_arena_bytes);
  EXPECT_EQ(a.max_arena_bytes, b.max_arena_bytes);
  EXPECT_EQ(a.max_clients, b.max_clients);
  EXPECT_EQ(a.ring_entries, b.ring_entries);
  EXPECT_EQ(a.op_timeout_ms, b.op_timeout_ms);
  EXPECT_EQ(a.inline_reduce_bytes, b.inline_reduce_bytes);
  EXPECT_EQ(a.cluster_file, b.cluster_file);
  EXPECT_EQ(a.host_id, b.host_id);
  EXPECT_EQ(a.cluster_key_file, b.cluster_key_file);
  EXPECT_EQ(a.tcp_streams, b.tcp_streams);
  EXPECT_EQ(a.tcp_streams_cross_rack, b.tcp_streams_cross_rack);
  EXPECT_EQ(a.tcp_buffer_kib, b.tcp_buffer_kib);
  EXPECT_EQ(a.transport, b.transport);
  EXPECT_EQ(a.peer_timeout_ms, b.peer_timeout_ms);
  EXPECT_EQ(a.algorithm, b.algorithm);
  EXPECT_EQ(a.chunk_bytes, b.chunk_bytes);
  EXPECT_EQ(a.trace_ring_ops, b.trace_ring_ops);
  EXPECT_EQ(a.trace_record, b.trace_record);
  // ... and as a whole, so a key added later is compared too (where the
  // values came from is not a value).
  DaemonConfig x = a, y = b;
  x.source = y.source = "";
  EXPECT_TRUE(x == y) << "configs differ:\n" << config_to_toml(a) << "---\n" << config_to_toml(b);
}

class ConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (std::filesystem::temp_directory_path() / "gsync-config-XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Write(const std::string& text, const std::string& name = "gsyncd.toml") {
    std::string path = (dir_ / name).string();
    std::ofstream(path) << text;
    return path;
  }

  // Loads text over the defaults; returns the error message ("" when ok).
  std::string LoadError(const std::string& text, std::string* path_out = nullptr) {
    std::string path = Write(text);
    if (path_out) *path_out = path;
    DaemonConfig cfg;
    Status s = load_config_file(path, true, &cfg);
    if (!s) {
      EXPECT_EQ(s.code(), GSYNC_ERR_INVALID);
    }
    return s.message();
  }

  std::filesystem::path dir_;
};

TEST_F(ConfigTest, DefaultsAreValid) {
  DaemonConfig cfg;
  Status s = validate_config(cfg);
  EXPECT_TRUE(s.is_ok()) << s.message();
  EXPECT_EQ(cfg.source, "defaults");
}

TEST_F(ConfigTest, FullGoodFile) {
  std::string path = Write(R"(# all keys
[daemon]
socket = "/run/g/d.sock"
admin_socket = "/run/g/a.sock"
socket_mode = 0o660
log_level = "debug"
reduce_threads = 3

[auth]
allowed_uids = [0, 1000]
allowed_gids = [27]

[limits]
default_arena = "512M"
max_arena = 8589934592
max_clients = 16
ring_entries = 4096
op_timeout_ms = 5000
inline_reduce_bytes = "64KiB"
)");
  DaemonConfig cfg;
  Status s = load_config_file(path, true, &cfg);
  ASSERT_TRUE(s.is_ok()) << s.message();
  EXPECT_EQ(cfg.source, path);
  EXPECT_EQ(cfg.socket_path, "/run/g/d.sock");
  EXPECT_EQ(cfg.admin_socket_path, "/run/g/a.sock");
  EXPECT_EQ(cfg.socket_mode, 0660u);
  EXPECT_EQ(cfg.log_level, "debug");
  EXPECT_EQ(cfg.reduce_threads, 3u);
  EXPECT_EQ(cfg.allowed_uids, (std::vector<uint32_t>{0, 1000}));
  EXPECT_EQ(cfg.allowed_gids, (std::vector<uint32_t>{27}));
  EXPECT_EQ(cfg.default_arena_bytes, 512ull << 20);
  EXPECT_EQ(cfg.max_arena_bytes, 8ull << 30);
  EXPECT_EQ(cfg.max_clients, 16u);
  EXPECT_EQ(cfg.ring_entries, 4096u);
  EXPECT_EQ(cfg.op_timeout_ms, 5000u);
  EXPECT_EQ(cfg.inline_reduce_bytes, 64ull << 10);
  EXPECT_TRUE(validate_config(cfg).is_ok());
}

TEST_F(ConfigTest, PartialFileKeepsOtherValues) {
  DaemonConfig cfg;
  cfg.max_clients = 7;  // as if set before the file (the caller's base)
  Status s = load_config_file(Write("[limits]\nring_entries = 256\n"), true, &cfg);
  ASSERT_TRUE(s.is_ok()) << s.message();
  EXPECT_EQ(cfg.ring_entries, 256u);
  EXPECT_EQ(cfg.max_clients, 7u);
  EXPECT_EQ(cfg.socket_path, DaemonConfig{}.socket_path);
}

TEST_F(ConfigTest, EmptyFileIsDefaults) {
  DaemonConfig cfg;
  std::string path = Write("");
  ASSERT_TRUE(load_config_file(path, true, &cfg).is_ok());
  ExpectSameValues(cfg, DaemonConfig{});
  EXPECT_EQ(cfg.source, path);
}

struct BadCase {
  const char* name;
  const char* text;
  const char* where;    // expected after "<path>:"
  const char* message;  // expected somewhere in the message
};

class ConfigErrorTest : public ConfigTest, public ::testing::WithParamInterface<BadCase> {};

TEST_P(ConfigErrorTest, NamesFileLineAndKey) {
  const BadCase& c = GetParam();
  std::string path;
  std::string message = LoadError(c.text, &path);
  EXPECT_THAT(message, HasSubstr(path + ":" + c.where)) << message;
  EXPECT_THAT(message, HasSubstr(c.message)) << message;
}

const BadCase kBadCases[] = {
    {"StringForInteger", "[daemon]\nlog_level = \"info\"\n\n[limits]\nring_entries = \"1024\"\n",
     "5: limits.ring_entries: ", "expected an integer, got string"},
    {"FloatForInteger", "[limits]\nmax_clients = 1.5\n",
     "2: limits.max_clients: ", "expected an integer, got float"},
    {"BoolForString", "[daemon]\n\nsocket = true\n",
     "3: daemon.socket: ", "expected a string, got boolean"},
    {"ArrayForString", "[daemon]\nlog_level = [\"info\"]\n",
     "2: daemon.log_level: ", "expected a string, got array"},
    {"UnknownKeySuggests", "[limits]\nmax_clients = 4\nring_entrys = 1024\n",
     "3: limits.ring_entrys: ", "unknown key (did you mean limits.ring_entries?)"},
    {"UnknownKeyFarFromAll", "[auth]\n\n\nbanana = 1\n", "4: auth.banana: ", "unknown key"},
    {"UnknownTableSuggests", "[daemon]\nlog_level = \"info\"\n[limit]\nmax_clients = 1\n",
     "3: limit: ", "unknown table (did you mean [limits]?)"},
    {"UnknownTableFar", "[network]\nhosts = 1\n", "1: network: ", "unknown table"},
    {"UnknownAlgorithm", "[cluster]\nalgorithm = \"butterfly\"\n", "2: cluster.algorithm: ",
     "is not one of auto, ring, hier, direct, tree, doubling"},
    {"TooManyStreams", "[cluster]\ntcp_streams = 64\n", "2: cluster.tcp_streams: ", "1 to 16"},
    {"TooManyCrossRackStreams", "[cluster]\ntcp_streams_cross_rack = 17\n",
     "2: cluster.tcp_streams_cross_rack: ", "must be 0 (as tcp_streams) to 16, got 17"},
    {"TcpBufferTooSmall", "[cluster]\ntcp_buffer_kib = 8\n", "2: cluster.tcp_buffer_kib: ",
     "must be 0 (kernel autotuning) or 16 to 65536, got 8"},
    {"PollTooLong", "[daemon]\npoll_us = 100001\n", "2: daemon.poll_us: ",
     "must be 0 (always sleep) to 100000, got 100001"},
    {"KeyOutsideSection", "ring_entries = 64\n", "1: ring_entries: ", "belongs under [limits]"},
    {"SectionNotTable", "\nlimits = 5\n", "2: limits: ", "expected a table"},
    {"Negative", "[limits]\nop_timeout_ms = -1\n",
     "2: limits.op_timeout_ms: ", "must not be negative, got -1"},
    {"OutOfRangeU32", "[limits]\nmax_clients = 4294967296\n",
     "2: limits.max_clients: ", "out of range"},
    {"NegativeSize", "[limits]\nmax_arena = -4096\n",
     "2: limits.max_arena: ", "must not be negative"},
    {"AmbiguousSize", "[limits]\ndefault_arena = \"1GB\"\n",
     "2: limits.default_arena: ", "is not a byte size"},
    {"FloatSize", "[limits]\ndefault_arena = 1.5\n",
     "2: limits.default_arena: ", "expected an integer or a size string"},
    {"OverflowSize", "[limits]\nmax_arena = \"99999999999T\"\n",
     "2: limits.max_arena: ", "is not a byte size"},
    {"DecimalMode", "[daemon]\nsocket_mode = 666\n", "2: daemon.socket_mode: ", "TOML octal"},
    {"HugeMode", "[daemon]\nsocket_mode = 0o17777\n",
     "2: daemon.socket_mode: ", "is not a file mode"},
    {"IdWrongType", "[auth]\nallowed_uids = [0,\n  \"alice\"]\n",
     "3: auth.allowed_uids[1]: ", "expected an integer, got string"},
    {"IdOutOfRange", "[auth]\nallowed_gids = [4294967295]\n",
     "2: auth.allowed_gids[0]: ", "out of range"},
    {"IdsNotArray", "[auth]\nallowed_uids = 0\n",
     "2: auth.allowed_uids: ", "expected an array of integers"},
    // Rules on values: the loader points at the line that set the value.
    {"RingNotPowerOfTwo", "[limits]\n\nring_entries = 1000\n",
     "3: limits.ring_entries: ", "power of two in [16, 65536], got 1000"},
    {"RingTooSmall", "[limits]\nring_entries = 8\n", "2: limits.ring_entries: ", "power of two"},
    {"BadLogLevel", "[daemon]\nlog_level = \"verbose\"\n",
     "2: daemon.log_level: ", "\"verbose\" is not one of"},
    {"BadPollMode", "[daemon]\npoll_mode = \"never\"\n",
     "2: daemon.poll_mode: ", "\"never\" is not one of auto, always"},
    {"EmptySocket", "[daemon]\nsocket = \"\"\n", "2: daemon.socket: ", "must not be empty"},
    {"ZeroTimeout", "[limits]\nop_timeout_ms = 0\n", "2: limits.op_timeout_ms: ", "must be > 0"},
    {"DefaultOverMaxPointsAtDefault", "[limits]\ndefault_arena = \"2G\"\nmax_arena = \"1G\"\n",
     "2: limits.default_arena: ", "must not exceed limits.max_arena"},
    {"DefaultOverMaxPointsAtMaxWhenOnlyMaxSet", "[limits]\n\nmax_arena = \"512M\"\n",
     "3: limits.max_arena: ", "limits.default_arena (1G) must not exceed"},
    // [trace]: the ring's size has a range; record is a boolean.
    {"TraceRingZero", "[trace]\nrecord = true\nring_ops = 0\n", "3: trace.ring_ops: ",
     "must be 1 to 1000000 (recent ops kept), got 0"},
    {"TraceRingHuge", "[trace]\nring_ops = 1000001\n", "2: trace.ring_ops: ",
     "must be 1 to 1000000 (recent ops kept), got 1000001"},
    {"TraceRingNegative", "[trace]\nring_ops = -5\n", "2: trace.ring_ops: ",
     "must not be negative, got -5"},
    {"TraceRecordString", "[trace]\nrecord = \"off\"\n", "2: trace.record: ",
     "expected a boolean (true or false), got string"},
    {"TraceRecordInteger", "[trace]\n\nrecord = 0\n", "3: trace.record: ",
     "expected a boolean (true or false), got integer"},
    {"TraceUnknownKey", "[trace]\nring_op = 8\n", "2: trace.ring_op: ",
     "unknown key (did you mean trace.ring_ops?)"},
};

INSTANTIATE_TEST_SUITE_P(Bad, ConfigErrorTest, ::testing::ValuesIn(kBadCases),
                         [](const auto& info) { return std::string(info.param.name); });

TEST_F(ConfigTest, SyntaxErrorNamesLineAndColumn) {
  std::string path;
  std::string message = LoadError("[daemon]\nlog_level = \"info\"\nsocket = \n", &path);
  EXPECT_THAT(message, HasSubstr(path + ":3:")) << message;
  EXPECT_THAT(message, HasSubstr("Error while parsing")) << message;

  message = LoadError("[limits]\nmax_clients = 1\nmax_clients = 2\n", &path);
  EXPECT_THAT(message, HasSubstr(path + ":3:")) << message;
  EXPECT_THAT(message, HasSubstr("max_clients")) << message;
}

TEST_F(ConfigTest, SocketPathLength) {
  std::string ok(107, 'a');
  EXPECT_EQ(LoadError("[daemon]\nsocket = \"" + ok + "\"\n"), "");
  std::string message = LoadError("[daemon]\nsocket = \"" + ok + "b\"\n");
  EXPECT_THAT(message, HasSubstr(":2: daemon.socket: is 108 bytes")) << message;
}

TEST_F(ConfigTest, BadFileLeavesConfigUntouched) {
  DaemonConfig cfg;
  std::string path = Write("[limits]\nmax_clients = 3\nring_entries = \"x\"\n");
  EXPECT_FALSE(load_config_file(path, true, &cfg).is_ok());
  ExpectSameValues(cfg, DaemonConfig{});
  EXPECT_EQ(cfg.source, "defaults");
}

TEST_F(ConfigTest, MissingFile) {
  std::string path = (dir_ / "absent.toml").string();
  DaemonConfig cfg;
  Status s = load_config_file(path, false, &cfg);
  EXPECT_TRUE(s.is_ok()) << s.message();
  EXPECT_EQ(cfg.source, "defaults");

  s = load_config_file(path, true, &cfg);
  EXPECT_EQ(s.code(), GSYNC_ERR_INVALID);
  EXPECT_THAT(s.message(), HasSubstr(path));
  EXPECT_THAT(s.message(), HasSubstr("No such file or directory"));
}

TEST_F(ConfigTest, UnreadableFileIsAnErrorEvenWhenOptional) {
  // A directory opens but does not read: only a missing file may be skipped.
  DaemonConfig cfg;
  Status s = load_config_file(dir_.string(), false, &cfg);
  EXPECT_FALSE(s.is_ok());
  EXPECT_THAT(s.message(), HasSubstr(dir_.string()));
}

TEST_F(ConfigTest, OctalMode) {
  DaemonConfig cfg;
  ASSERT_TRUE(load_config_file(Write("[daemon]\nsocket_mode = 0o600\n"), true, &cfg).is_ok());
  EXPECT_EQ(cfg.socket_mode, 0600u);
  ASSERT_TRUE(load_config_file(Write("[daemon]\nsocket_mode = 0\n"), true, &cfg).is_ok());
  EXPECT_EQ(cfg.socket_mode, 0u);
}

TEST_F(ConfigTest, SizeKeysAcceptIntegersAndSuffixes) {
  DaemonConfig cfg;
  Status s = load_config_file(
      Write("[limits]\ndefault_arena = \"2GiB\"\nmax_arena = \"1T\"\ninline_reduce_bytes = 100\n"),
      true, &cfg);
  ASSERT_TRUE(s.is_ok()) << s.message();
  EXPECT_EQ(cfg.default_arena_bytes, 2ull << 30);
  EXPECT_EQ(cfg.max_arena_bytes, 1ull << 40);
  EXPECT_EQ(cfg.inline_reduce_bytes, 100u);
}

TEST(ParseByteSize, Accepts) {
  const std::pair<const char*, uint64_t> cases[] = {
      {"0", 0},
      {"4096", 4096},
      {"4096B", 4096},
      {"1K", 1024},
      {"1k", 1024},
      {"2KiB", 2048},
      {"64M", 64ull << 20},
      {"64MiB", 64ull << 20},
      {"1G", 1ull << 30},
      {"1gib", 1ull << 30},
      {"3T", 3ull << 40},
      {" 16 M ", 16ull << 20},
      {"16777215T", 16777215ull << 40},
  };
  for (const auto& [text, bytes] : cases) {
    uint64_t out = 0;
    EXPECT_TRUE(parse_byte_size(text, &out)) << text;
    EXPECT_EQ(out, bytes) << text;
  }
}

TEST(ParseByteSize, Rejects) {
  for (const char* text : {"", "G", "-1", "-1K", "1.5G", "1GB", "1KB", "1 G B", "1X", "0x10",
                           "16777216T", "18446744073709551616", "1G1"}) {
    uint64_t out = 7;
    EXPECT_FALSE(parse_byte_size(text, &out)) << text;
  }
}

TEST_F(ConfigTest, RoundTripDefaults) {
  DaemonConfig defaults;
  std::string text = config_to_toml(defaults);
  DaemonConfig loaded;
  loaded.ring_entries = 32;  // must be overwritten: every key is written
  Status s = load_config_file(Write(text), true, &loaded);
  ASSERT_TRUE(s.is_ok()) << s.message() << "\n" << text;
  ExpectSameValues(loaded, defaults);
}

TEST_F(ConfigTest, RoundTripUnusualValues) {
  DaemonConfig cfg;
  cfg.socket_path = "/tmp/we\"ird\\dir/\tsock\xc3\xa9";  // quote, backslash, tab, UTF-8
  cfg.admin_socket_path = "rel/admin.sock";
  cfg.socket_mode = 0;
  cfg.log_level = "off";
  cfg.reduce_threads = 1024;
  cfg.allowed_uids = {0, 4294967294u};
  cfg.allowed_gids = {};
  cfg.default_arena_bytes = 1000000;  // not a multiple of 1024: written as digits
  cfg.max_arena_bytes = 3ull << 40;
  cfg.max_clients = 4294967295u;
  cfg.ring_entries = 65536;
  cfg.op_timeout_ms = 1;
  cfg.inline_reduce_bytes = 0;
  cfg.cluster_key_file = "/etc/gsync/a \"cluster\" key";
  cfg.source = "/etc/gsync/\"odd\".toml";
  ASSERT_TRUE(validate_config(cfg).is_ok()) << validate_config(cfg).message();

  std::string text = config_to_toml(cfg);
  DaemonConfig loaded;
  std::string path = Write(text);
  Status s = load_config_file(path, true, &loaded);
  ASSERT_TRUE(s.is_ok()) << s.message() << "\n" << text;
  ExpectSameValues(loaded, cfg);
  EXPECT_EQ(loaded.source, path);
  EXPECT_THAT(text, HasSubstr("socket_mode = 0o0"));
  EXPECT_THAT(text, HasSubstr("max_arena = \"3T\""));
  EXPECT_THAT(text, HasSubstr("default_arena = 1000000\n"));
}

TEST(ValidateConfig, Failures) {
  struct Case {
    void (*mutate)(DaemonConfig*);
    const char* message;
  };
  const Case cases[] = {
      {[](DaemonConfig* c) { c->ring_entries = 0; }, "limits.ring_entries: must be a power of two"},
      {[](DaemonConfig* c) { c->ring_entries = 48; }, "limits.ring_entries: must be a power"},
      {[](DaemonConfig* c) { c->ring_entries = 131072; }, "limits.ring_entries: must be a power"},
      {[](DaemonConfig* c) { c->default_arena_bytes = c->max_arena_bytes + 1; },
       "limits.default_arena: limits.default_arena (68719476737) must not exceed limits.max_arena "
       "(64G)"},
      {[](DaemonConfig* c) { c->default_arena_bytes = 0; }, "limits.default_arena: must be > 0"},
      {[](DaemonConfig* c) { c->op_timeout_ms = 0; }, "limits.op_timeout_ms: must be > 0"},
      {[](DaemonConfig* c) { c->max_clients = 0; }, "limits.max_clients: must be > 0"},
      {[](DaemonConfig* c) { c->log_level = "INFO"; }, "daemon.log_level: \"INFO\" is not one of"},
      {[](DaemonConfig* c) { c->log_level = ""; }, "daemon.log_level:"},
      {[](DaemonConfig* c) { c->socket_path = ""; }, "daemon.socket: must not be empty"},
      {[](DaemonConfig* c) { c->admin_socket_path = ""; }, "daemon.admin_socket: must not be"},
      {[](DaemonConfig* c) { c->admin_socket_path = std::string(108, 'x'); },
       "daemon.admin_socket: is 108 bytes"},
      {[](DaemonConfig* c) { c->admin_socket_path = c->socket_path; },
       "daemon.admin_socket: must differ from daemon.socket"},
      {[](DaemonConfig* c) { c->socket_mode = 010000; }, "daemon.socket_mode:"},
      {[](DaemonConfig* c) { c->reduce_threads = 1025; }, "daemon.reduce_threads:"},
      {[](DaemonConfig* c) { c->allowed_uids = {4294967295u}; }, "auth.allowed_uids:"},
      {[](DaemonConfig* c) { c->metrics_listen = "9464"; },
       "metrics.listen: \"9464\" is not HOST:PORT"},
      {[](DaemonConfig* c) { c->metrics_listen = "example.com:9464"; },
       "metrics.listen: \"example.com:9464\": \"example.com\" is not an IPv4 address"},
      {[](DaemonConfig* c) { c->metrics_listen = "127.0.0.1:65536"; },
       "metrics.listen: \"127.0.0.1:65536\": \"65536\" is not a port"},
      {[](DaemonConfig* c) { c->trace_ring_ops = 0; },
       "trace.ring_ops: must be 1 to 1000000 (recent ops kept), got 0"},
      {[](DaemonConfig* c) { c->dpdk_rx_lcore = "on"; },
       "dpdk.rx_lcore: must be \"off\", \"any\" or a CPU number, got \"on\""},
      {[](DaemonConfig* c) { c->dpdk_rx_lcore = "-1"; }, "dpdk.rx_lcore: must be"},
      {[](DaemonConfig* c) { c->dpdk_rx_lcore = "1024"; }, "dpdk.rx_lcore: must be"},
      {[](DaemonConfig* c) { c->dpdk_rx_lcore = ""; }, "dpdk.rx_lcore: must be"},
      {[](DaemonConfig* c) { c->trace_ring_ops = 4294967295u; },
       "trace.ring_ops: must be 1 to 1000000 (recent ops kept), got 4294967295"},
  };
  for (const Case& c : cases) {
    DaemonConfig cfg;
    c.mutate(&cfg);
    Status s = validate_config(cfg);
    EXPECT_EQ(s.code(), GSYNC_ERR_INVALID) << c.message;
    EXPECT_THAT(s.message(), HasSubstr(c.message));
  }
  DaemonConfig edge;
  edge.ring_entries = 16;
  edge.default_arena_bytes = edge.max_arena_bytes;
  edge.socket_path = std::string(107, 's');
  edge.trace_ring_ops = 1000000;
  EXPECT_TRUE(validate_config(edge).is_ok()) << validate_config(edge).message();
}

TEST(ConfigJson, MirrorsTomlLayout) {
  DaemonConfig cfg;
  cfg.allowed_uids = {0, 1000};
  nlohmann::json j = config_to_json(cfg);
  EXPECT_EQ(j["daemon"]["socket"], "/run/gsync/gsyncd.sock");
  EXPECT_EQ(j["daemon"]["admin_socket"], "/run/gsync/gsyncd-admin.sock");
  EXPECT_EQ(j["daemon"]["socket_mode"], "0666");
  EXPECT_EQ(j["daemon"]["admin_socket_mode"], "0660");
  EXPECT_EQ(j["daemon"]["admin_group"], "gsync");
  EXPECT_EQ(j["daemon"]["log_level"], "info");
  EXPECT_EQ(j["daemon"]["reduce_threads"], 0);
  EXPECT_EQ(j["auth"]["allowed_uids"], nlohmann::json::array({0, 1000}));
  EXPECT_EQ(j["auth"]["allowed_gids"], nlohmann::json::array());
  EXPECT_EQ(j["limits"]["default_arena"], 1ull << 30);
  EXPECT_EQ(j["limits"]["max_arena"], 64ull << 30);
  EXPECT_EQ(j["limits"]["max_clients"], 1024);
  EXPECT_EQ(j["limits"]["ring_entries"], 1024);
  EXPECT_EQ(j["limits"]["op_timeout_ms"], 60000);
  EXPECT_EQ(j["limits"]["inline_reduce_bytes"], 256 << 10);
  EXPECT_EQ(j["cluster"]["algorithm"], "auto");
  EXPECT_EQ(j["cluster"]["tcp_streams"], 2);
  EXPECT_EQ(j["cluster"]["tcp_streams_cross_rack"], 1);
  EXPECT_EQ(j["checkpoint"]["dir"], "");
  EXPECT_EQ(j["checkpoint"]["keep"], 3);
  EXPECT_EQ(j["metrics"]["listen"], "");
  EXPECT_EQ(j["trace"]["ring_ops"], 1024);
  EXPECT_EQ(j["trace"]["record"], true);
  // A section per table of the file, whichever tables it has now.
  std::set<std::string_view> sections;
  for (const ConfigField& f : config_fields()) sections.insert(f.section);
  EXPECT_EQ(j.size(), sections.size());
  EXPECT_EQ(j["cluster"]["key_file"], "");
  EXPECT_EQ(j["daemon"].size() + j["auth"].size() + j["limits"].size() + j["cluster"].size() +
                j["checkpoint"].size(),
            36u);
  EXPECT_EQ(j["cluster"]["etcd"], nlohmann::json::array());
}

// [daemon] admin_socket_mode and admin_group: who may connect to the
// admin socket (issue #15).
const BadCase kBadAdminCases[] = {
    {"AdminDecimalMode", "[daemon]\nadmin_socket_mode = 660\n", "2: daemon.admin_socket_mode: ",
     "TOML octal"},
    {"AdminHugeMode", "[daemon]\n\nadmin_socket_mode = 0o17777\n",
     "3: daemon.admin_socket_mode: ", "is not a file mode"},
    {"AdminModeString", "[daemon]\nadmin_socket_mode = \"0660\"\n",
     "2: daemon.admin_socket_mode: ", "expected an octal integer"},
    {"AdminGroupWrongType", "[daemon]\nadmin_group = 1000\n", "2: daemon.admin_group: ",
     "expected a string, got integer"},
    {"AdminGroupSpace", "[daemon]\nadmin_group = \"gsync users\"\n", "2: daemon.admin_group: ",
     "\"gsync users\" is not a group name"},
    {"AdminGroupDash", "[daemon]\nadmin_group = \"-g\"\n", "2: daemon.admin_group: ",
     "must not start with '-' or a digit"},
    {"AdminGroupControl", "[daemon]\nadmin_group = \"g\\u001b[2J\"\n", "2: daemon.admin_group: ",
     "\"g\\x1b[2J\" is not a group name"},
    {"AdminGroupTooLong", "[daemon]\nadmin_group = \"ggggggggggggggggggggggggggggggggg\"\n",
     "2: daemon.admin_group: ", "is 33 bytes; a group name has at most 32"},
};

INSTANTIATE_TEST_SUITE_P(BadAdmin, ConfigErrorTest, ::testing::ValuesIn(kBadAdminCases),
                         [](const auto& info) { return std::string(info.param.name); });

TEST_F(ConfigTest, AdminSocketModeAndGroup) {
  DaemonConfig defaults;
  EXPECT_EQ(defaults.admin_socket_mode, 0660u);
  EXPECT_EQ(defaults.admin_group, "gsync");
  DaemonConfig cfg;
  Status s = load_config_text("[daemon]\nadmin_socket_mode = 0o600\nadmin_group = \"ml-ops.team_1\"\n",
                              "text.toml", &cfg);
  ASSERT_TRUE(s) << s.message();
  EXPECT_EQ(cfg.admin_socket_mode, 0600u);
  EXPECT_EQ(cfg.admin_group, "ml-ops.team_1");
  EXPECT_EQ(cfg.source, "text.toml");
  // "" keeps the daemon's own group; the printed config reads back the same.
  s = load_config_text("[daemon]\nadmin_group = \"\"\n", "t", &cfg);
  ASSERT_TRUE(s) << s.message();
  EXPECT_EQ(cfg.admin_group, "");
  DaemonConfig back;
  ASSERT_TRUE(load_config_text(config_to_toml(cfg), "printed", &back));
  EXPECT_EQ(back.admin_socket_mode, 0600u);
  EXPECT_EQ(back.admin_group, "");
  EXPECT_EQ(config_to_json(cfg)["daemon"]["admin_socket_mode"], "0600");
}

// [trace]: the defaults keep today's 1024 ops and record them; both keys
// load, print and read back.
TEST_F(ConfigTest, TraceKeys) {
  DaemonConfig defaults;
  EXPECT_EQ(defaults.trace_ring_ops, 1024u);
  EXPECT_TRUE(defaults.trace_record);
  DaemonConfig cfg;
  Status s = load_config_text("[trace]\nring_ops = 1000000\nrecord = false\n", "t", &cfg);
  ASSERT_TRUE(s) << s.message();
  EXPECT_EQ(cfg.trace_ring_ops, 1000000u);
  EXPECT_FALSE(cfg.trace_record);
  const std::string text = config_to_toml(cfg);
  EXPECT_THAT(text, HasSubstr("[trace]\nring_ops = 1000000\nrecord = false\n"));
  DaemonConfig back;
  ASSERT_TRUE(load_config_text(text, "printed", &back));
  ExpectSameValues(back, cfg);
  EXPECT_EQ(config_to_json(cfg)["trace"]["record"], false);
}

TEST_F(ConfigTest, TextLoaderNamesItsSourceAndLeavesConfigOnError) {
  DaemonConfig cfg;
  cfg.admin_group = "before";
  Status s = load_config_text("[daemon]\nadmin_group = \"x y\"\n", "inline", &cfg);
  EXPECT_THAT(s.message(), HasSubstr("inline:2: daemon.admin_group: ")) << s.message();
  EXPECT_EQ(cfg.admin_group, "before");
  s = load_config_text(std::string((1 << 20) + 1, '#'), "huge", &cfg);
  EXPECT_THAT(s.message(), HasSubstr("larger than")) << s.message();
}

#ifdef GSYNC_EXAMPLE_CONFIG
// The example documents the admin keys with their defaults.
TEST(ExampleConfig, AdminKeysAreTheDefaults) {
  DaemonConfig cfg;
  cfg.admin_socket_mode = 0;
  cfg.admin_group = "unset";
  Status s = load_config_file(GSYNC_EXAMPLE_CONFIG, true, &cfg);
  ASSERT_TRUE(s) << s.message();
  EXPECT_EQ(cfg.admin_socket_mode, 0660u);
  EXPECT_EQ(cfg.admin_group, "gsync");
}
#endif

#ifdef GSYNC_EXAMPLE_CONFIG
// deploy/gsyncd.toml documents every key with its default value; if a default
// changes in config.h the example (and docs/operations.md) must follow.
TEST(ExampleConfig, LoadsAndMatchesDefaults) {
  DaemonConfig cfg;
  Status s = load_config_file(GSYNC_EXAMPLE_CONFIG, true, &cfg);
  ASSERT_TRUE(s.is_ok()) << s.message();
  ExpectSameValues(cfg, DaemonConfig{});
}

// ... and every key of the loader's table is in it, under its section (a
// section missing from the file would load as the defaults all the same).
TEST(ExampleConfig, DocumentsEveryKey) {
  std::ifstream in(GSYNC_EXAMPLE_CONFIG);
  std::map<std::string, std::set<std::string>> found;
  std::string section, line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    if (line[0] == '[') {
      section = line.substr(1, line.find(']') - 1);
      continue;
    }
    if (size_t eq = line.find(" = "); eq != std::string::npos)
      found[section].insert(line.substr(0, eq));
  }
  for (const ConfigField& f : config_fields())
    EXPECT_TRUE(found[std::string(f.section)].count(std::string(f.key)))
        << dotted_key(f) << " is not in " << GSYNC_EXAMPLE_CONFIG;
}
#endif

}  // namespace
}  // namespace gsync
