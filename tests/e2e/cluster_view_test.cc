// A gateway's view of the cluster against a real redis-server: the live agents' states, dead and
// stale ones left out, garbage under a key skipped, and the last snapshot kept while Redis is down
// (fail-static). Agents here are their keys, written as an agent writes them.
#include <gtest/gtest.h>

#include <chrono>

#include "publish/agent_heartbeat.h"
#include "gateway/cluster_view.h"
#include "e2e/daemon_harness.h"
#include "e2e/redis_harness.h"

namespace uma::test {
namespace {

using namespace std::chrono_literals;
using namespace cluster;
using gateway::ClusterView;

std::vector<std::string> beat(const std::string& id, std::chrono::system_clock::time_point at) {
  AgentState a;
  a.id = id;
  a.address = "http://10.0.0.1:80";
  a.boot_id = "b";
  a.ts_ms = std::chrono::duration_cast<std::chrono::milliseconds>(at.time_since_epoch()).count();
  a.models = {{"m.gguf", 1, ModelState::kLoaded, store::Tier::kDram}};
  // Age is the view's to judge from ts_ms and the time it is given; the key outlives a slow test.
  return {"SET", agent_key(id), encode_agent_state(a), "PX", std::to_string(std::chrono::milliseconds(kHangGuard).count())};
}

TEST(ClusterView, LiveAgentsOnlyAndTheLastSnapshotWhileRedisIsDown) {
  RedisServer redis;
  ASSERT_TRUE(redis.start());
  RedisClient w({"127.0.0.1", redis.port()}, kHangGuard);
  const auto now = std::chrono::system_clock::now();
  ASSERT_TRUE(w.pipeline({beat("b", now), beat("a", now), beat("old", now - 10s),
                          {"SET", agent_key("junk"), "not json"},
                          {"SADD", kAgentsSet, "a", "b", "old", "junk", "gone"}}).ok());
  ClusterView view({"127.0.0.1", redis.port()}, kHangGuard, 3000ms);
  EXPECT_TRUE(view.stale()) << "nothing read yet";
  ASSERT_TRUE(view.refresh(now).ok());
  ASSERT_EQ(view.agents().size(), 2u) << "'old' beat 10 s ago, 'gone' has no key, 'junk' does not decode";
  EXPECT_EQ(view.agents()[0].id, "a");
  EXPECT_EQ(view.agents()[1].id, "b");
  EXPECT_EQ(view.undecodable_total(), 1u);
  EXPECT_FALSE(view.stale());

  redis.kill();
  EXPECT_EQ(view.refresh(now + 1s).code(), ErrorCode::kIo);
  EXPECT_TRUE(view.stale());
  EXPECT_EQ(view.agents().size(), 2u) << "fail-static: routing goes on with the last snapshot";

  ASSERT_TRUE(redis.start());  // back, empty: no agent has beaten yet
  ASSERT_TRUE(view.refresh(now + 2s).ok());
  EXPECT_TRUE(view.agents().empty());
  EXPECT_FALSE(view.stale());
}

}  // namespace
}  // namespace uma::test
