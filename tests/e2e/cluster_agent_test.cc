// umad as a cluster agent against a real redis-server: it registers its soft state
// under a TTL every second, leaves at once on shutdown, serves on through a Redis outage and is
// registered again soon after Redis comes back, empty.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <algorithm>
#include <functional>
#include <set>
#include <memory>
#include <thread>

#include "publish/agent_heartbeat.h"
#include "cluster/kv_events.h"
#include "cluster/redis_client.h"
#include "e2e/cluster_harness.h"
#include "e2e/daemon_harness.h"
#include "e2e/http_client.h"
#include "e2e/json_helpers.h"
#include "e2e/oracle.h"
#include "e2e/redis_harness.h"

namespace uma::test {
namespace {

using cluster::RedisClient;
using cluster::RedisReply;

std::optional<nlohmann::json> agent_state(RedisClient& c, const std::string& id) {
  RedisReply r;
  if (!c.command({"GET", cluster::agent_key(id)}, &r).ok() || r.kind != RedisReply::Kind::kString) return std::nullopt;
  return nlohmann::json::parse(r.str, nullptr, false);
}

std::vector<std::string> agent_args(const RedisServer& redis, const std::string& id) {
  return args({"--http", "127.0.0.1:0", "--agent", "--redis", redis.address(), "--agent-id", id});
}

std::string complete(int port, const std::string& prompt, int n) {
  Tcp t(port);
  if (!t.send(post("/v1/completions", nlohmann::json({{"prompt", prompt}, {"max_tokens", n}}).dump()))) return "";
  const std::string r = t.response();
  if (status_of(r) != 200) return r;
  return nlohmann::json::parse(body_of(r))["choices"][0]["text"];
}

// A Redis, one agent registered with it, and a client of that Redis.
struct Cluster {
  explicit Cluster(std::string agent_id) : id(std::move(agent_id)) {}
  bool up() {
    if (!redis.start()) return false;
    daemon = std::make_unique<Daemon>(agent_args(redis, id));
    client = std::make_unique<RedisClient>(cluster::RedisAddress{"127.0.0.1", redis.port()}, kHangGuard);
    return daemon->started() && wait_for([&] { return (state = agent_state(*client, id)).has_value(); });
  }
  std::string id;
  RedisServer redis;
  std::unique_ptr<Daemon> daemon;
  std::unique_ptr<RedisClient> client;
  std::optional<nlohmann::json> state;  // as first registered
};

TEST(ClusterAgent, RegistersItsStateUnderATtlAndLeavesOnShutdown) {
  Cluster one("agent-a");
  ASSERT_TRUE(one.up()) << one.daemon->log();
  Daemon& d = *one.daemon;
  RedisClient& c = *one.client;
  std::optional<nlohmann::json> s = one.state;
  EXPECT_EQ((*s)["id"], "agent-a");
  EXPECT_EQ((*s)["address"], "http://127.0.0.1:" + std::to_string(http_port(d)));
  EXPECT_EQ((*s)["boot_id"].get<std::string>().size(), 16u);
  EXPECT_EQ((*s)["models"][0]["name"], "oracle.gguf");
  EXPECT_EQ((*s)["models"][0]["state"], "loaded");
  EXPECT_GT((*s)["models"][0]["bytes"].get<std::int64_t>(), 0);
  EXPECT_GT((*s)["kv_cells_total"].get<std::int64_t>(), 0);
  EXPECT_GT((*s)["free_memory_bytes"].get<std::int64_t>(), 0);
  RedisReply ttl, member;
  ASSERT_TRUE(c.command({"PTTL", cluster::agent_key("agent-a")}, &ttl).ok());
  EXPECT_GT(ttl.integer, 0);
  EXPECT_LE(ttl.integer, 3000) << "soft state: gone ~3 s after the agent stops writing it";
  ASSERT_TRUE(c.command({"SISMEMBER", cluster::kAgentsSet, "agent-a"}, &member).ok());
  EXPECT_EQ(member.integer, 1);

  // Beats go on (the timestamp moves) and carry the measured rates once there was work.
  const std::int64_t ts = (*s)["ts_ms"];
  EXPECT_EQ(complete(http_port(d), "hello world", 24), oracle().expected_text("hello world", 24));
  ASSERT_TRUE(eventually([&] {
    s = agent_state(c, "agent-a");
    return s && (*s)["ts_ms"].get<std::int64_t>() > ts && (*s)["decode_tok_s"].get<double>() > 0.0 &&
           (*s)["prefill_tok_s"].get<double>() > 0.0;
  }, "a later beat with the measured rates")) << (s ? s->dump() : "no state");

  EXPECT_EQ(d.stop(), 0);
  EXPECT_FALSE(agent_state(c, "agent-a").has_value()) << "a clean shutdown leaves at once, not after the TTL";
  ASSERT_TRUE(c.command({"SISMEMBER", cluster::kAgentsSet, "agent-a"}, &member).ok());
  EXPECT_EQ(member.integer, 0);
}

TEST(ClusterAgent, ServesThroughARedisOutageAndRegistersAgainWhenItIsBack) {
  Cluster one("agent-b");
  ASSERT_TRUE(one.up()) << one.daemon->log();
  Daemon& d = *one.daemon;
  RedisClient& c = *one.client;
  std::optional<nlohmann::json> s = one.state;
  const std::string boot = (*s)["boot_id"];

  one.redis.kill();  // Redis crashes: the agent is not on Redis's path; requests are served as before
  EXPECT_EQ(complete(http_port(d), "the river", 16), oracle().expected_text("the river", 16));
  ASSERT_TRUE(one.redis.start());  // back, empty, on the same port
  const auto back = wait_for([&] { return (s = agent_state(c, "agent-b")).has_value(); });
  ASSERT_TRUE(back.has_value()) << "timed out waiting for the agent's state in Redis again\n" << d.log();
  EXPECT_EQ((*s)["boot_id"], boot) << "the same process: the same boot id";
  std::printf("re-registered %lld ms after Redis answered again\n", static_cast<long long>(back->count()));
  EXPECT_EQ(complete(http_port(d), "the stone", 8), oracle().expected_text("the stone", 8));
}

// The KV-event stream: a snapshot first, then the prefix blocks of a served prompt, hashed exactly
// as a gateway hashes the prompt it tokenized itself.
TEST(ClusterAgent, PublishesThePrefixBlocksItHoldsOnItsKvEventStream) {
  Cluster one("agent-e");
  ASSERT_TRUE(one.up()) << one.daemon->log();
  const std::string events = (*one.state)["events"];
  ASSERT_EQ(events.rfind("127.0.0.1:", 0), 0u) << events;
  Tcp sub(std::stoi(events.substr(events.find(':') + 1)));
  ASSERT_TRUE(sub.send("GET /kv-events HTTP/1.1\r\nHost: x\r\n\r\n"));
  const std::string head = sub.read_until([](const std::string& b) { return b.find("\n\n", b.find("\r\n\r\n")) != std::string::npos; });
  ASSERT_EQ(status_of(head), 200) << head;
  EXPECT_NE(head.find("text/event-stream"), std::string::npos);
  EXPECT_NE(head.find("Transfer-Encoding: chunked"), std::string::npos);
  const std::string first = body_of(head);  // a chunk: its size line, then the event
  const std::size_t data = first.find("data: ");
  cluster::KvEvent snap;
  ASSERT_NE(data, std::string::npos) << first;
  ASSERT_TRUE(cluster::decode_kv_event(first.substr(data + 6, first.find("\n\n", data) - data - 6), &snap).ok()) << first;
  EXPECT_TRUE(snap.snapshot);
  EXPECT_EQ(snap.boot_id, (*one.state)["boot_id"].get<std::string>());
  EXPECT_EQ(snap.block, 32);
  EXPECT_TRUE(snap.stored.empty());

  // Longer than the 256 tokens past which a first-seen prompt's KV is kept after it finishes.
  const std::string prompt = Oracle::long_prompt(300, "end");
  EXPECT_EQ(complete(http_port(*one.daemon), prompt, 4), oracle().expected_text(prompt, 4));
  const std::vector<std::uint64_t> want = chained_block_hashes(oracle().tokenize(prompt), 32);
  ASSERT_GE(want.size(), 3u);
  std::set<std::uint64_t> held;
  const auto all_there = [&](const std::string& b) {
    held.clear();
    for (std::size_t at = b.find("data: "); at != std::string::npos; at = b.find("data: ", at + 1)) {
      cluster::KvEvent e;
      const std::size_t end = b.find("\n\n", at);
      if (end == std::string::npos) break;
      if (!cluster::decode_kv_event(b.substr(at + 6, end - at - 6), &e).ok()) continue;
      for (std::uint64_t h : e.stored) held.insert(h);
      for (std::uint64_t h : e.evicted) held.erase(h);
    }
    return std::all_of(want.begin(), want.end(), [&](std::uint64_t h) { return held.count(h) != 0; });
  };
  const std::string stream = sub.read_until(all_there);
  EXPECT_TRUE(all_there(stream)) << "the stream's blocks, within the hang guard: " << stream;
  EXPECT_NE(stream.find("\"load\""), std::string::npos);

  Tcp wrong(std::stoi(events.substr(events.find(':') + 1)));
  ASSERT_TRUE(wrong.send("GET /nope HTTP/1.1\r\n\r\n"));
  EXPECT_EQ(status_of(wrong.response()), 404);
  // The agent stops: its stream ends (what a gateway takes as "gone").
  one.daemon->stop();
  EXPECT_TRUE(sub.closed_by_peer(kHangGuard));
}

TEST(ClusterAgent, NoRedisAtStartIsNotFatal) {
  const int nobody = free_loopback_port();
  Daemon d(args({"--http", "127.0.0.1:0", "--agent", "--redis", "127.0.0.1:" + std::to_string(nobody)}));
  ASSERT_TRUE(d.started()) << d.log();
  EXPECT_EQ(complete(http_port(d), "hello world", 8), oracle().expected_text("hello world", 8));
  EXPECT_NE(d.log().find("cannot reach redis"), std::string::npos) << d.log();
}

TEST(ClusterAgent, AgentWithoutHttpIsAClearError) {
  std::string out;
  const int rc = run_command({bin_path("umad"), "--model", model_path("oracle.gguf"), "--agent"}, &out);
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("--agent needs --http"), std::string::npos) << out;
}

}  // namespace
}  // namespace uma::test
