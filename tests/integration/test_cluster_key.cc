// SPDX-License-Identifier: Apache-2.0
//
// The cluster key file end to end: `gsyncctl keygen` makes one (mode 0600,
// never over an existing file, the key never printed), and a real gsyncd
// with a cluster file starts with a good one and refuses to start without
// one, or with one that group or others may read, that is not a regular
// file or that is not a key - each time saying which file and what to do.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "daemon/cluster/cluster_key.h"
#include "tests/util/transport_harness.h"
#include "tools/common/procs.h"

namespace gsync::test {
namespace {

std::string gsyncctl() {
  const char* p = getenv("GSYNCCTL");
  return p ? p : "gsyncctl";
}

std::string text_of(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A scratch directory with a two-host cluster file on loopback; nothing
// listens on the second host, which this daemon does not need to start.
class KeyDir : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gsync-keys.XXXXXX";
    ASSERT_TRUE(mkdtemp(tmpl));
    dir_ = tmpl;
    auto ports = transport::testing::free_ports(2);
    cluster_ = dir_ + "/cluster.toml";
    std::ofstream(cluster_) << fmt::format(
        "name = \"keys\"\n"
        "[[hosts]]\nid = \"h1\"\naddress = \"127.0.0.1\"\nport = {}\nrack = \"r1\"\n"
        "[[hosts]]\nid = \"h2\"\naddress = \"127.0.0.1\"\nport = {}\nrack = \"r1\"\n",
        ports[0], ports[1]);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // `gsyncctl keygen -o path`: its exit status and everything it printed.
  int keygen(const std::string& path, std::string* out) {
    std::string cmd = fmt::format("'{}' keygen -o '{}' 2>&1; echo \"rc=$?\"", gsyncctl(), path);
    *out = tools::run_command(cmd);
    auto at = out->rfind("rc=");
    if (at == std::string::npos) return -1;
    int rc = std::atoi(out->c_str() + at + 3);
    out->erase(at);
    return rc;
  }

  std::vector<std::string> daemon_args(const std::string& key) const {
    std::vector<std::string> a = {"--cluster", cluster_, "--host-id", "h1"};
    if (!key.empty()) a.insert(a.end(), {"--cluster-key", key});
    return a;
  }

  // Starts gsyncd; its log when it refused to start, "" (and a failure)
  // when it came up.
  std::string refusal(const std::vector<std::string>& args, const std::string& toml = "") {
    try {
      tools::DaemonProcess d(args, toml, "info");
      ADD_FAILURE() << "gsyncd started; its log:\n" << d.log();
      return "";
    } catch (const std::runtime_error& e) {
      return e.what();
    }
  }

  std::string dir_, cluster_;
};

TEST_F(KeyDir, KeygenWritesAKeyOnlyItsOwnerCanReadAndNeverPrintsIt) {
  std::string path = dir_ + "/cluster.key", out;
  ASSERT_EQ(keygen(path, &out), 0) << out;
  struct stat st {};
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  std::string key = text_of(path);
  ASSERT_EQ(key.size(), 65u) << key;
  EXPECT_EQ(key.back(), '\n');
  for (char c : key.substr(0, 64)) EXPECT_TRUE(std::isxdigit(static_cast<unsigned char>(c))) << key;
  EXPECT_NE(out.find("wrote a new cluster key to " + path), std::string::npos) << out;
  EXPECT_EQ(out.find(key.substr(0, 64)), std::string::npos) << "the key was printed: " << out;
  EXPECT_EQ(out.find(key.substr(0, 16)), std::string::npos) << "part of the key was printed";
  // The daemon's reader takes what keygen wrote.
  std::string raw;
  Status loaded = load_cluster_key(path, &raw);
  EXPECT_TRUE(loaded) << loaded.message();
  EXPECT_EQ(raw.size(), kClusterKeySize);

  // Never over an existing file: the key there stays as it was.
  EXPECT_EQ(keygen(path, &out), 73) << out;
  EXPECT_NE(out.find(path + " exists"), std::string::npos) << out;
  EXPECT_NE(out.find("never overwritten"), std::string::npos) << out;
  EXPECT_EQ(text_of(path), key);
  // Another key is another key.
  std::string other = dir_ + "/other.key";
  ASSERT_EQ(keygen(other, &out), 0) << out;
  EXPECT_NE(text_of(other), key);
  // Nowhere to write: named.
  EXPECT_EQ(keygen(dir_ + "/no/such/dir/k", &out), 73) << out;
  EXPECT_NE(out.find(dir_ + "/no/such/dir/k"), std::string::npos) << out;
}

TEST_F(KeyDir, DaemonStartsWithAGoodKeyFromTheFlagOrTheConfig) {
  std::string key = dir_ + "/cluster.key";
  Status made = create_cluster_key(key);
  ASSERT_TRUE(made) << made.message();
  {
    tools::DaemonProcess d(daemon_args(key), "", "info");
    EXPECT_TRUE(d.alive());
  }
  tools::DaemonProcess d(daemon_args(""), fmt::format("[cluster]\nkey_file = \"{}\"\n", key),
                         "info");
  EXPECT_TRUE(d.alive());
}

TEST_F(KeyDir, DaemonWithAClusterAndNoKeyRefusesToStartSayingHowToMakeOne) {
  std::string log = refusal(daemon_args(""));
  EXPECT_NE(log.find("no cluster key"), std::string::npos) << log;
  EXPECT_NE(log.find("gsyncctl keygen -o"), std::string::npos) << log;
  EXPECT_NE(log.find("key_file"), std::string::npos) << log;
  EXPECT_NE(log.find(cluster_), std::string::npos) << log;
}

TEST_F(KeyDir, DaemonRefusesAKeyFileGroupOrOthersMayUse) {
  std::string key = dir_ + "/cluster.key";
  Status made = create_cluster_key(key);
  ASSERT_TRUE(made) << made.message();
  for (mode_t mode : {0640, 0604, 0620, 0700 | 0001}) {
    ASSERT_EQ(chmod(key.c_str(), mode), 0);
    std::string m = fmt::format("{:04o}", mode);
    std::string log = refusal(daemon_args(key));
    EXPECT_NE(log.find("cluster key file " + key + " has mode " + m), std::string::npos)
        << m << ": " << log;
    EXPECT_NE(log.find("chmod 600 " + key), std::string::npos) << log;
  }
  // The config's key_file is read as the flag is; the flag overrides it.
  ASSERT_EQ(chmod(key.c_str(), 0640), 0);
  std::string toml = fmt::format("[cluster]\nkey_file = \"{}\"\n", key);
  EXPECT_NE(refusal(daemon_args(""), toml).find("has mode 0640"), std::string::npos);
  std::string good = dir_ + "/good.key";
  ASSERT_TRUE(create_cluster_key(good));
  tools::DaemonProcess d(daemon_args(good), toml, "info");
  EXPECT_TRUE(d.alive());
}

TEST_F(KeyDir, DaemonRefusesWhatIsNotAKeyFile) {
  std::string subdir = dir_ + "/a-dir";
  ASSERT_EQ(mkdir(subdir.c_str(), 0700), 0);
  std::string log = refusal(daemon_args(subdir));
  EXPECT_NE(log.find("cluster key file " + subdir + " is a directory (mode 0700)"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("chmod 600"), std::string::npos) << log;

  std::string missing = dir_ + "/missing.key";
  log = refusal(daemon_args(missing));
  EXPECT_NE(log.find("cluster key file " + missing + ": No such file"), std::string::npos) << log;

  // 63 hex characters; 64 and garbage; 64 and two newlines; not hex.
  for (const std::string& text : {std::string(63, 'a') + "\n", std::string(64, 'a') + "x",
                                  std::string(64, 'a') + "\n\n", std::string(64, 'g')}) {
    std::string bad = dir_ + "/bad.key";
    std::filesystem::remove(bad);
    std::ofstream(bad) << text;
    ASSERT_EQ(chmod(bad.c_str(), 0600), 0);
    log = refusal(daemon_args(bad));
    EXPECT_NE(log.find("cluster key file " + bad + ": not a key"), std::string::npos)
        << text << ": " << log;
  }
  // Upper-case hex and no newline is a key.
  std::string upper = dir_ + "/upper.key";
  std::ofstream(upper) << std::string(64, 'A');
  ASSERT_EQ(chmod(upper.c_str(), 0600), 0);
  std::string raw;
  Status st = load_cluster_key(upper, &raw);
  EXPECT_TRUE(st) << st.message();
  EXPECT_EQ(raw, std::string(kClusterKeySize, '\xaa'));
}

}  // namespace
}  // namespace gsync::test
