// SPDX-License-Identifier: Apache-2.0
//
// The etcd client (daemon/cluster/etcd/client.h) against a real etcd
// (tools/testbed/etcd.h), and its parsers on the gateway's answers as etcd
// 3.4 writes them and on broken ones. One etcd for the suite; each test
// works under its own key prefix.
#include <gtest/gtest.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "daemon/cluster/etcd/client.h"
#include "tools/common/procs.h"
#include "tools/testbed/etcd.h"

namespace gsync::cluster::etcd {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using tools::wait_until;

// A loopback port nothing listens on (bound, then closed).
uint16_t closed_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

std::string url(uint16_t port) { return "http://127.0.0.1:" + std::to_string(port); }

// A watch on its own thread; the test stops it, and never waits on it
// without a deadline.
class WatchThread {
 public:
  // on_response: what the watch's callback answers (true: go on).
  WatchThread(Client* c, std::string prefix, int64_t from,
              std::function<bool(const WatchResponse&)> on_response = nullptr)
      : thread_([this, c, prefix, from, on_response] {
          Status st = c->watch_prefix(
              prefix, from,
              [&](const WatchResponse& r) {
                std::lock_guard lock(mu_);
                responses_.push_back(r);
                last_at_ = Clock::now();
                return on_response ? on_response(r) : true;
              },
              stop_);
          std::lock_guard lock(mu_);
          result_ = st;
          returned_at_ = Clock::now();
          done_ = true;
        }) {}
  ~WatchThread() {
    stop_ = true;
    thread_.join();
  }

  std::vector<WatchResponse> responses() const {
    std::lock_guard lock(mu_);
    return responses_;
  }
  std::vector<WatchEvent> events() const {
    std::vector<WatchEvent> out;
    for (const auto& r : responses()) out.insert(out.end(), r.events.begin(), r.events.end());
    return out;
  }
  bool done() const { return done_; }
  // When the last response came (the start before the first).
  Clock::time_point last_at() const {
    std::lock_guard lock(mu_);
    return last_at_;
  }
  bool wait_done(int ms) const {
    return wait_until([this] { return done_.load(); }, ms);
  }
  Status result() const {
    std::lock_guard lock(mu_);
    return result_;
  }
  // Sets stop and joins: how long after stop the watch returned.
  std::chrono::milliseconds stop_and_join() {
    auto asked = Clock::now();
    stop_ = true;
    thread_.join();
    thread_ = std::thread([] {});  // the destructor joins something
    std::lock_guard lock(mu_);
    return std::chrono::duration_cast<std::chrono::milliseconds>(returned_at_ - asked);
  }

 private:
  mutable std::mutex mu_;
  std::vector<WatchResponse> responses_;
  Status result_;
  Clock::time_point returned_at_, last_at_ = Clock::now();
  std::atomic<bool> stop_{false}, done_{false};
  std::thread thread_;
};

class Etcd : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    char tmpl[] = "/tmp/gsync-etcd-test.XXXXXX";
    dir_ = mkdtemp(tmpl) ? tmpl : "";
    server_ = new testbed::EtcdServer;
    started_ = dir_.empty() ? Status(GSYNC_ERR_INTERNAL, "mkdtemp failed") : server_->start(dir_);
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
    if (!dir_.empty()) std::system(("rm -rf '" + dir_ + "'").c_str());
  }
  void SetUp() override {
    ASSERT_TRUE(started_) << started_.message();
    prefix_ = std::string("/gsync-test/") +
              ::testing::UnitTest::GetInstance()->current_test_info()->name() + "/";
  }
  static std::unique_ptr<Client> client(std::chrono::milliseconds timeout = 3s) {
    return std::make_unique<Client>(std::vector<std::string>{server_->endpoint()}, timeout);
  }
  // The store's revision now.
  int64_t revision_now(Client& c) {
    std::vector<KeyValue> kvs;
    int64_t rev = 0;
    Status st = c.range_prefix("/none/", &kvs, &rev);
    EXPECT_TRUE(st) << st.message();
    return rev;
  }

  static inline std::string dir_;
  static inline testbed::EtcdServer* server_ = nullptr;
  static inline Status started_;
  std::string prefix_;
};

TEST_F(Etcd, GrantPutRangeKeepalive) {
  auto c = client();
  int64_t lease = 0;
  ASSERT_TRUE(c->grant(30, &lease));
  EXPECT_NE(lease, 0);
  const std::string binary("v\0\xff\x01", 4);
  ASSERT_TRUE(c->put(prefix_ + "a", binary, lease));
  ASSERT_TRUE(c->put(prefix_ + "b", "two"));
  // The key just past the prefix ('/' + 1 is '0') is not in it.
  ASSERT_TRUE(c->put(prefix_.substr(0, prefix_.size() - 1) + "0", "outside"));
  std::vector<KeyValue> kvs;
  int64_t rev = 0;
  Status st = c->range_prefix(prefix_, &kvs, &rev);
  ASSERT_TRUE(st) << st.message();
  ASSERT_EQ(kvs.size(), 2u);
  EXPECT_EQ(kvs[0].key, prefix_ + "a");
  EXPECT_EQ(kvs[0].value, binary);
  EXPECT_EQ(kvs[0].lease, lease);
  EXPECT_EQ(kvs[0].version, 1);
  EXPECT_EQ(kvs[1].key, prefix_ + "b");
  EXPECT_EQ(kvs[1].value, "two");
  EXPECT_EQ(kvs[1].lease, 0);
  EXPECT_GT(kvs[1].mod_revision, kvs[0].mod_revision);
  EXPECT_GE(rev, kvs[1].mod_revision + 1);  // the "outside" put came after
  int64_t left = 0;
  ASSERT_TRUE(c->keepalive(lease, &left));
  EXPECT_GT(left, 20);
  EXPECT_LE(left, 30);
  ASSERT_TRUE(c->del(prefix_ + "b"));
  ASSERT_TRUE(c->range_prefix(prefix_, &kvs, &rev));
  EXPECT_EQ(kvs.size(), 1u);
}

TEST_F(Etcd, LeaseNotKeptAliveExpiresWithItsKey) {
  auto c = client();
  int64_t lease = 0;
  ASSERT_TRUE(c->grant(2, &lease));  // etcd's shortest
  ASSERT_TRUE(c->put(prefix_ + "k", "v", lease));
  std::vector<KeyValue> kvs;
  int64_t rev = 0;
  ASSERT_TRUE(c->range_prefix(prefix_, &kvs, &rev));
  ASSERT_EQ(kvs.size(), 1u);
  EXPECT_TRUE(
      wait_until([&] { return c->range_prefix(prefix_, &kvs, &rev) && kvs.empty(); }, 20000, 100));
  int64_t left = -1;
  Status st = c->keepalive(lease, &left);
  ASSERT_TRUE(st) << st.message();
  EXPECT_EQ(left, 0);
  st = c->put(prefix_ + "k", "v", lease);
  EXPECT_EQ(st.code(), GSYNC_ERR_REFUSED);
  EXPECT_NE(st.message().find("lease not found"), std::string::npos) << st.message();
  EXPECT_TRUE(c->revoke(lease));  // gone already: no error
}

TEST_F(Etcd, RevokeDropsTheKeysAtOnce) {
  auto c = client();
  int64_t lease = 0, left = -1, rev = 0;
  ASSERT_TRUE(c->grant(60, &lease));
  ASSERT_TRUE(c->put(prefix_ + "k", "v", lease));
  ASSERT_TRUE(c->revoke(lease));
  std::vector<KeyValue> kvs;
  ASSERT_TRUE(c->range_prefix(prefix_, &kvs, &rev));
  EXPECT_TRUE(kvs.empty());
  ASSERT_TRUE(c->keepalive(lease, &left));
  EXPECT_EQ(left, 0);
}

TEST_F(Etcd, CreateAllCreatesOnceThenNot) {
  auto c = client();
  bool created = false;
  Status st = c->create_all({{prefix_ + "x", "1"}, {prefix_ + "y", "2"}}, &created);
  ASSERT_TRUE(st) << st.message();
  EXPECT_TRUE(created);
  ASSERT_TRUE(c->create_all({{prefix_ + "x", "3"}, {prefix_ + "y", "4"}}, &created));
  EXPECT_FALSE(created);
  // One of them exists: nothing is written, z included.
  ASSERT_TRUE(c->create_all({{prefix_ + "y", "5"}, {prefix_ + "z", "6"}}, &created));
  EXPECT_FALSE(created);
  std::vector<KeyValue> kvs;
  int64_t rev = 0;
  ASSERT_TRUE(c->range_prefix(prefix_, &kvs, &rev));
  ASSERT_EQ(kvs.size(), 2u);
  EXPECT_EQ(kvs[0].value, "1");
  EXPECT_EQ(kvs[1].value, "2");
  EXPECT_EQ(c->create_all({}, &created).code(), GSYNC_ERR_INVALID);
}

TEST_F(Etcd, WatchSeesPutThenDeleteInOrderAndStopsFast) {
  auto watcher = client(), writer = client();
  const int64_t from = revision_now(*watcher) + 1;
  WatchThread w(watcher.get(), prefix_, from);
  ASSERT_TRUE(writer->put(prefix_ + "k", "v1"));
  ASSERT_TRUE(writer->del(prefix_ + "k"));
  ASSERT_TRUE(writer->put("/elsewhere/k", "not watched"));
  ASSERT_TRUE(wait_until([&] { return w.events().size() >= 2; }, 10000)) << w.result().message();
  auto events = w.events();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].kind, WatchEvent::Kind::kPut);
  EXPECT_EQ(events[0].kv.key, prefix_ + "k");
  EXPECT_EQ(events[0].kv.value, "v1");
  EXPECT_EQ(events[0].kv.mod_revision, from);
  EXPECT_EQ(events[1].kind, WatchEvent::Kind::kDelete);
  EXPECT_EQ(events[1].kv.key, prefix_ + "k");
  EXPECT_EQ(events[1].kv.mod_revision, from + 1);
  auto responses = w.responses();
  EXPECT_FALSE(responses.front().created);  // the "created" line is not handed over
  // A response's header has the store's revision when it was sent, which
  // may count the put outside the prefix already.
  EXPECT_GE(responses.back().revision, from + 1);
  EXPECT_FALSE(w.done());
  auto took = w.stop_and_join();
  EXPECT_LT(took, 200ms);
  EXPECT_TRUE(w.result()) << w.result().message();
  EXPECT_EQ(watcher->endpoint(), server_->endpoint());
}

TEST_F(Etcd, WatchReturnsWithin200msOfStopOnAQuietConnection) {
  auto writer = client();
  // curl's poll also wakes for curl's own timers (the connect timeout's
  // among them), so a stop right after traffic says little; each round
  // stops a watch after the connection has been quiet for a different
  // while, at a different point of any poll period.
  for (auto quiet : {600ms, 1600ms, 3300ms}) {
    auto watcher = client();
    WatchThread w(watcher.get(), prefix_, revision_now(*writer) + 1);
    ASSERT_TRUE(writer->put(prefix_ + "k", "v"));
    ASSERT_TRUE(wait_until([&] { return w.events().size() == 1; }, 10000));
    // The quiet time itself is what is tested: a condition on the watch's
    // last response, with a deadline.
    ASSERT_TRUE(wait_until([&] { return Clock::now() - w.last_at() >= quiet; }, 10000));
    ASSERT_EQ(w.events().size(), 1u);
    auto took = w.stop_and_join();
    EXPECT_LT(took, 200ms) << "after " << quiet.count() << " ms quiet";
    EXPECT_TRUE(w.result()) << w.result().message();
  }
}

TEST_F(Etcd, WatchEndsWhenTheCallbackSaysSo) {
  auto watcher = client(), writer = client();
  WatchThread w(watcher.get(), prefix_, revision_now(*watcher) + 1,
                [](const WatchResponse&) { return false; });
  ASSERT_TRUE(writer->put(prefix_ + "k", "v"));
  ASSERT_TRUE(w.wait_done(10000));
  EXPECT_TRUE(w.result()) << w.result().message();
  EXPECT_EQ(w.responses().size(), 1u);
}

TEST_F(Etcd, WatchFromACompactedRevisionReportsIt) {
  auto c = client();
  const int64_t first = revision_now(*c) + 1;
  for (int i = 0; i < 3; i++) ASSERT_TRUE(c->put(prefix_ + "k", std::to_string(i)));
  const int64_t now = revision_now(*c);
  Status st = c->compact(now);
  ASSERT_TRUE(st) << st.message();
  WatchThread w(c.get(), prefix_, first);
  ASSERT_TRUE(w.wait_done(10000));
  auto responses = w.responses();
  ASSERT_EQ(responses.size(), 1u);
  EXPECT_TRUE(responses[0].canceled);
  EXPECT_EQ(responses[0].compact_revision, now);
  EXPECT_EQ(w.result().code(), GSYNC_ERR_CLOSED);
  EXPECT_NE(w.result().message().find("compacted up to revision " + std::to_string(now)),
            std::string::npos)
      << w.result().message();
}

TEST_F(Etcd, UnreachableFirstEndpointFailsOverToTheLiveOne) {
  const std::string dead = url(closed_port());
  Client c({dead, server_->endpoint()}, 2s);
  EXPECT_EQ(c.endpoint(), dead);
  Status st = c.put(prefix_ + "k", "v");
  ASSERT_TRUE(st) << st.message();
  EXPECT_EQ(c.endpoint(), server_->endpoint());
  // A watch fails over too.
  Client w_client({dead, server_->endpoint()}, 2s);
  WatchThread w(&w_client, prefix_, revision_now(c) + 1);
  ASSERT_TRUE(c.put(prefix_ + "k", "v2"));
  EXPECT_TRUE(wait_until([&] { return w.events().size() == 1; }, 10000)) << w.result().message();
}

TEST_F(Etcd, AllEndpointsDownIsAConnectErrorNamingThem) {
  const std::string a = url(closed_port()), b = url(closed_port());
  Client c({a, b}, 1s);
  Status st = c.put(prefix_ + "k", "v");
  EXPECT_EQ(st.code(), GSYNC_ERR_CONNECT);
  EXPECT_NE(st.message().find(a), std::string::npos) << st.message();
  EXPECT_NE(st.message().find(b), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("/v3/kv/put"), std::string::npos) << st.message();
  // On a thread with a deadline: a watch that wrongly got through would
  // otherwise never return.
  WatchThread w(&c, prefix_, 0);
  ASSERT_TRUE(w.wait_done(5000));
  EXPECT_EQ(w.result().code(), GSYNC_ERR_CONNECT);
  EXPECT_NE(w.result().message().find(b), std::string::npos) << w.result().message();
}

TEST_F(Etcd, AnEndpointThatNeverAnswersTimesOut) {
  // Listening, never accepting: the kernel completes the connection, no
  // one reads the request.
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(listen(fd, 16), 0);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  const std::string silent = url(ntohs(a.sin_port));
  Client c({silent, server_->endpoint()}, 300ms);
  auto t0 = Clock::now();
  Status st = c.put(prefix_ + "k", "v");
  auto took = Clock::now() - t0;
  EXPECT_EQ(st.code(), GSYNC_ERR_TIMEOUT) << st.message();
  EXPECT_NE(st.message().find(silent), std::string::npos) << st.message();
  EXPECT_LT(took, 2s);
  Client silent_only({silent}, 300ms);
  WatchThread w(&silent_only, prefix_, 0);
  ASSERT_TRUE(w.wait_done(5000));
  EXPECT_EQ(w.result().code(), GSYNC_ERR_TIMEOUT) << w.result().message();
  EXPECT_NE(w.result().message().find("no \"created\" answer"), std::string::npos)
      << w.result().message();
  close(fd);
}

TEST_F(Etcd, RestartedEtcdAnswersAgainAndAWatchSaysItsStreamEnded) {
  auto c = client(1s), watcher = client(1s);
  ASSERT_TRUE(c->put(prefix_ + "before", "1"));
  WatchThread w(watcher.get(), prefix_, revision_now(*c) + 1);
  ASSERT_TRUE(c->put(prefix_ + "k", "v"));
  ASSERT_TRUE(wait_until([&] { return w.events().size() == 1; }, 10000));
  server_->stop();
  Status st = c->put(prefix_ + "during", "1");
  EXPECT_EQ(st.code(), GSYNC_ERR_CONNECT) << st.message();
  ASSERT_TRUE(w.wait_done(10000));
  EXPECT_FALSE(w.result());
  EXPECT_NE(w.result().message().find(server_->endpoint()), std::string::npos)
      << w.result().message();
  st = server_->restart();
  ASSERT_TRUE(st) << st.message();
  st = c->put(prefix_ + "after", "1");
  ASSERT_TRUE(st) << st.message();
  std::vector<KeyValue> kvs;
  int64_t rev = 0;
  ASSERT_TRUE(c->range_prefix(prefix_, &kvs, &rev));
  ASSERT_EQ(kvs.size(), 3u);  // after, before, k: the data survived
  EXPECT_EQ(kvs[0].key, prefix_ + "after");
  EXPECT_EQ(kvs[1].key, prefix_ + "before");
}

// The parsers, on the gateway's answers as etcd 3.4.23 writes them.
constexpr char kHeader[] =
    R"("header":{"cluster_id":"14841639068965178418","member_id":"10276657743932975437",)"
    R"("revision":"9","raft_term":"2"})";

std::string with_header(const std::string& rest) {
  return std::string("{") + kHeader + (rest.empty() ? "" : "," + rest) + "}";
}

TEST(EtcdParse, RangeAnswers) {
  std::vector<KeyValue> kvs;
  int64_t rev = 0;
  ASSERT_TRUE(parse_range_response(
      with_header(R"("kvs":[{"key":"YS94","create_revision":"4","mod_revision":"5",)"
                  R"("version":"2","value":"djE=","lease":"7587899320881956624"}],"count":"1")"),
      &kvs, &rev));
  EXPECT_EQ(rev, 9);
  ASSERT_EQ(kvs.size(), 1u);
  EXPECT_EQ(kvs[0].key, "a/x");
  EXPECT_EQ(kvs[0].value, "v1");
  EXPECT_EQ(kvs[0].create_revision, 4);
  EXPECT_EQ(kvs[0].mod_revision, 5);
  EXPECT_EQ(kvs[0].version, 2);
  EXPECT_EQ(kvs[0].lease, 7587899320881956624);
  ASSERT_TRUE(parse_range_response(with_header(""), &kvs, &rev));  // no kvs: empty
  EXPECT_TRUE(kvs.empty());
  // Numbers are int64s too.
  ASSERT_TRUE(parse_range_response(R"({"header":{"revision":12}})", &kvs, &rev));
  EXPECT_EQ(rev, 12);
}

void expect_protocol(const Status& st, const std::string& says) {
  EXPECT_EQ(st.code(), GSYNC_ERR_PROTOCOL) << st.message();
  EXPECT_NE(st.message().find(says), std::string::npos) << st.message();
}

TEST(EtcdParse, BrokenAnswersSayWhatIsWrong) {
  std::vector<KeyValue> kvs;
  int64_t rev = 0, id = 0, ttl = 0;
  bool ok = true;
  WatchResponse w;
  expect_protocol(parse_range_response("{\"header\":", &kvs, &rev), "not JSON");
  expect_protocol(parse_range_response("[1,2]", &kvs, &rev), "not a JSON object");
  expect_protocol(parse_range_response("{}", &kvs, &rev), "header: missing");
  expect_protocol(parse_range_response(R"({"header":{"revision":true}})", &kvs, &rev),
                  "header.revision: not an int64");
  expect_protocol(parse_range_response(R"({"header":{"revision":"12x"}})", &kvs, &rev),
                  "\"12x\" is not an int64");
  expect_protocol(
      parse_range_response(R"({"header":{"revision":9223372036854775808}})", &kvs, &rev),
      "past the int64 range");
  expect_protocol(parse_range_response(with_header(R"("kvs":{})"), &kvs, &rev),
                  "kvs: not an array");
  expect_protocol(parse_range_response(with_header(R"("kvs":[{"key":5}])"), &kvs, &rev),
                  "kvs[0].key: not a string");
  expect_protocol(parse_range_response(with_header(R"("kvs":[{"key":"YS9"}])"), &kvs, &rev),
                  "kvs[0].key: not base64");
  expect_protocol(
      parse_range_response(with_header(R"("kvs":[{"key":"YQ==","value":"!"}])"), &kvs, &rev),
      "kvs[0].value: not base64");
  expect_protocol(parse_range_response(with_header(R"("kvs":[{"value":"YQ=="}])"), &kvs, &rev),
                  "kvs[0].key: missing");
  EXPECT_TRUE(kvs.empty());
  expect_protocol(parse_grant_response(with_header(R"("TTL":"5")"), &id, &ttl), "ID: missing");
  expect_protocol(parse_grant_response(with_header(R"("ID":"5","TTL":"0")"), &id, &ttl), "TTL");
  expect_protocol(parse_txn_response(R"({"succeeded":true})", &ok, &rev), "header: missing");
  expect_protocol(parse_txn_response(with_header(R"("succeeded":"yes")"), &ok, &rev),
                  "succeeded: not a boolean");
  expect_protocol(parse_watch_response(with_header(""), &w), "result: missing");
  expect_protocol(parse_watch_response(R"({"result":{"events":[{"type":"PUT"}]}})", &w),
                  "result.events[0].kv: missing");
  expect_protocol(
      parse_watch_response(R"({"result":{"events":[{"type":"TOUCH","kv":{"key":"YQ=="}}]}})", &w),
      "result.events[0].type");
  expect_protocol(parse_keepalive_response(with_header(""), &ttl), "result: missing");
  expect_protocol(parse_keepalive_response("", &ttl), "not JSON");
}

TEST(EtcdParse, WatchLines) {
  WatchResponse w;
  ASSERT_TRUE(
      parse_watch_response(R"({"result":{)" + std::string(kHeader) + R"(,"created":true}})", &w));
  EXPECT_TRUE(w.created);
  EXPECT_EQ(w.revision, 9);
  // A PUT has no "type": proto3 leaves the enum's default out.
  ASSERT_TRUE(parse_watch_response(
      R"({"result":{"header":{"revision":"8"},"events":[{"kv":{"key":"dy9h","create_revision":"7",)"
      R"("mod_revision":"8","version":"2","value":"Mg=="}},{"type":"DELETE","kv":{"key":"dy9h",)"
      R"("mod_revision":"9"}}]}})",
      &w));
  EXPECT_FALSE(w.created);
  ASSERT_EQ(w.events.size(), 2u);
  EXPECT_EQ(w.events[0].kind, WatchEvent::Kind::kPut);
  EXPECT_EQ(w.events[0].kv.key, "w/a");
  EXPECT_EQ(w.events[0].kv.value, "2");
  EXPECT_EQ(w.events[1].kind, WatchEvent::Kind::kDelete);
  EXPECT_EQ(w.events[1].kv.mod_revision, 9);
  ASSERT_TRUE(parse_watch_response(
      R"({"result":{"header":{"raft_term":"2"},"canceled":true,"compact_revision":"8"}})", &w));
  EXPECT_TRUE(w.canceled);
  EXPECT_EQ(w.compact_revision, 8);
  EXPECT_EQ(w.revision, 0);
  ASSERT_TRUE(parse_watch_response(R"({"result":{"watch_id":"-1","created":true,"canceled":true,)"
                                   R"("cancel_reason":"mvcc: watcher range is empty"}})",
                                   &w));
  EXPECT_EQ(w.cancel_reason, "mvcc: watcher range is empty");
}

TEST(EtcdParse, LeaseAndTxnAnswers) {
  int64_t id = 0, ttl = 0, rev = 0;
  ASSERT_TRUE(
      parse_grant_response(with_header(R"("ID":"7587899320881956613","TTL":"2")"), &id, &ttl));
  EXPECT_EQ(id, 7587899320881956613);
  EXPECT_EQ(ttl, 2);
  // LeaseGrantResponse has an "error" string of its own; empty is none.
  ASSERT_TRUE(parse_grant_response(with_header(R"("ID":"1","TTL":"2","error":"")"), &id, &ttl));
  ASSERT_TRUE(parse_keepalive_response(
      R"({"result":{)" + std::string(kHeader) + R"(,"ID":"758","TTL":"3"}})", &ttl));
  EXPECT_EQ(ttl, 3);
  // What etcd answers for a lease that expired, or never was: no TTL.
  ttl = 99;
  ASSERT_TRUE(
      parse_keepalive_response(R"({"result":{)" + std::string(kHeader) + R"(,"ID":"758"}})", &ttl));
  EXPECT_EQ(ttl, 0);
  bool ok = false;
  ASSERT_TRUE(parse_txn_response(with_header(R"("succeeded":true,"responses":[])"), &ok, &rev));
  EXPECT_TRUE(ok);
  EXPECT_EQ(rev, 9);
  ASSERT_TRUE(parse_txn_response(with_header(R"("responses":[])"), &ok, &rev));
  EXPECT_FALSE(ok);  // absent is false
}

TEST(EtcdParse, ErrorAnswers) {
  int64_t rev = 0, ttl = 0;
  Status st = parse_header_response(
      R"({"error":"etcdserver: requested lease not found","message":"etcdserver: requested )"
      R"(lease not found","code":5})",
      &rev);
  EXPECT_EQ(st.code(), GSYNC_ERR_REFUSED);
  EXPECT_NE(st.message().find("requested lease not found (gRPC code 5)"), std::string::npos)
      << st.message();
  EXPECT_EQ(parse_header_response(R"({"message":"no leader","code":14})", &rev).code(),
            GSYNC_ERR_CONNECT);
  EXPECT_EQ(parse_header_response(R"({"message":"slow","code":4})", &rev).code(),
            GSYNC_ERR_TIMEOUT);
  // Inside a stream, grpc-gateway nests it.
  st = parse_keepalive_response(R"({"error":{"grpc_code":5,"message":"gone","http_code":404}})",
                                &ttl);
  EXPECT_EQ(st.code(), GSYNC_ERR_REFUSED);
  EXPECT_NE(st.message().find("gone"), std::string::npos) << st.message();
  EXPECT_EQ(error_grpc_code(R"({"error":"x","message":"x","code":5})"), 5);
  EXPECT_EQ(error_grpc_code(with_header("")), 0);
  EXPECT_TRUE(parse_error_response("not json at all"));
}

TEST(EtcdParse, Base64) {
  std::string out;
  EXPECT_EQ(base64_encode(""), "");
  EXPECT_EQ(base64_encode("a/x"), "YS94");
  EXPECT_EQ(base64_encode("v1"), "djE=");
  EXPECT_EQ(base64_encode("2"), "Mg==");
  ASSERT_TRUE(base64_decode("djE=", &out));
  EXPECT_EQ(out, "v1");
  ASSERT_TRUE(base64_decode("", &out));
  EXPECT_EQ(out, "");
  for (const char* bad : {"YQ", "YR==", "djF=", "Y===", "====", "YQ=a", "Y Q=", "YS9\n", "a-_b"})
    EXPECT_FALSE(base64_decode(bad, &out)) << bad;
  // Every byte, at every length's tail.
  std::string all;
  for (int i = 0; i < 256; i++) all += static_cast<char>(i);
  for (size_t n = 0; n <= all.size(); n += 1) {
    std::string s = all.substr(all.size() - n);
    ASSERT_TRUE(base64_decode(base64_encode(s), &out));
    ASSERT_EQ(out, s);
  }
}

TEST(EtcdParse, PrefixEnd) {
  EXPECT_EQ(prefix_end("a/"), "a0");
  EXPECT_EQ(prefix_end("a\xff"), "b");
  EXPECT_EQ(prefix_end(std::string("\xff\xff", 2)), std::string(1, '\0'));
  EXPECT_EQ(prefix_end(""), std::string(1, '\0'));
}

}  // namespace
}  // namespace gsync::cluster::etcd
