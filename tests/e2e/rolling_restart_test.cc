// A rolling restart under load, with processes (deploy/rolling-restart.sh does the same to the
// Compose cluster's containers): two uma-agents serving the oracle model, two gateways behind a real
// nginx (deploy/compose/nginx.conf's retry rules), clients streaming completions through nginx
// without a pause, and every agent, then every gateway, stopped with SIGTERM (a drain) and started
// again in turn. No request fails and every stream is the oracle's. Streams held open through one
// gateway across both agents' restarts move off each draining agent and stay exact. Whatever must
// be in flight during a drain is held by the test, never left to a stream's speed.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <iostream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "e2e/agent_harness.h"
#include "e2e/cluster_harness.h"
#include "e2e/held_stream.h"
#include "e2e/nginx_harness.h"

namespace uma::test {
namespace {

const std::vector<std::string> kRestartPrompts = {"hello world", "one two three", "the quick brown fox", "a b c d"};
constexpr int kRestartLoadTokens = 24;  // each request of the load: short, so a gateway's drain ends with them

// Clients streaming completions through nginx, one after another on each thread, until stopped.
class SteadyLoad {
 public:
  SteadyLoad(int port, int clients) {
    for (int i = 0; i < clients; ++i) threads_.emplace_back([this, port, i] { run(port, i); });
  }
  ~SteadyLoad() { stop(); }
  void stop() {
    stop_ = true;
    for (std::thread& t : threads_) {
      if (t.joinable()) t.join();
    }
  }
  int ok() const { return ok_; }
  int failed() const { return failed_; }
  std::string failures() const {
    std::lock_guard<std::mutex> lock(mu_);
    return failures_;
  }

 private:
  void run(int port, int client) {
    for (std::size_t n = 0; !stop_; ++n) {
      const std::string& prompt = kRestartPrompts[(static_cast<std::size_t>(client) + n) % kRestartPrompts.size()];
      HeldStream s(port, "m", prompt, "", kRestartLoadTokens);
      const ::testing::AssertionResult ended = eventually([&] { return s.ended(); }, "a request of the load to end");
      const ::testing::AssertionResult exact = ended ? s.exact() : ended;
      if (exact) {
        ++ok_;
        continue;
      }
      ++failed_;
      std::lock_guard<std::mutex> lock(mu_);
      failures_ += std::string(exact.message()) + "\n";
    }
  }
  std::atomic<bool> stop_{false};
  std::atomic<int> ok_{0}, failed_{0};
  mutable std::mutex mu_;
  std::string failures_;
  std::vector<std::thread> threads_;
};

std::vector<std::string> restart_agent_flags() { return {"--cluster", "--drain-sec", std::to_string(kHangGuard.count())}; }

std::vector<std::string> restart_gateway_flags(int port) {
  std::vector<std::string> f = {"--drain-sec", std::to_string(kHangGuard.count()), "--policy", "round-robin",
                                "--queue-timeout-ms", kAgentGuardMs};
  if (port > 0) f.insert(f.end(), {"--listen", "127.0.0.1:" + std::to_string(port)});
  return f;
}

// An agent serving "m", and every gateway routing to `agents` agents.
::testing::AssertionResult serving_everywhere(const Agent& a, const std::vector<std::unique_ptr<Gateway>>& gateways, int agents) {
  if (a.port() <= 0) return ::testing::AssertionFailure() << "the agent did not start\n" << a.log();
  const std::string state = load(a.port(), "m", {{"stream", false}}).back().value("state", "");
  if (state != "loaded") return ::testing::AssertionFailure() << "the model did not load: " << state << "\n" << a.log();
  for (const auto& g : gateways) {
    ::testing::AssertionResult routed = eventually([&] { return gw_metric(*g, "uma_gw_agents_live") == agents; }, "a gateway routing to every agent");
    if (!routed) return routed << "\n" << g->log();
  }
  return ::testing::AssertionSuccess();
}

TEST(RollingRestart, EveryAgentAndGatewayRestartedInTurnUnderLoadFailsNoRequestAndEveryStreamStaysExact) {
  if (skip_remote_tier_tests()) GTEST_SKIP() << "no nginx (the gateways' front) on this machine";
  Catalog cat;
  ASSERT_TRUE(cat.up({"m"}));
  std::vector<std::string> stores = {cat.store_dir, cat.another_store({"m"})};
  std::vector<std::unique_ptr<Agent>> agents;
  std::vector<std::unique_ptr<Gateway>> gateways;
  for (int i = 0; i < 2; ++i) gateways.push_back(std::make_unique<Gateway>(cat.redis.address(), restart_gateway_flags(0)));
  for (const auto& g : gateways) ASSERT_TRUE(g->started()) << g->log();
  for (int i = 0; i < 2; ++i) {
    agents.push_back(std::make_unique<Agent>(cat.redis.address(), stores[static_cast<std::size_t>(i)], restart_agent_flags()));
    ASSERT_TRUE(serving_everywhere(*agents.back(), gateways, i + 1));
  }
  NginxServer::Options front;
  for (const auto& g : gateways) front.upstreams.push_back(g->port());
  NginxServer nginx(front);
  ASSERT_TRUE(nginx.start()) << nginx.log();

  SteadyLoad traffic(nginx.port(), 3);
  // The load goes on through every step: a few more requests served before the next one.
  const auto load_goes_on = [&](const std::string& step) {
    const int from = traffic.ok() + traffic.failed();
    return eventually([&] { return traffic.ok() + traffic.failed() >= from + 3; }, "the load to go on " + step);
  };
  ASSERT_TRUE(load_goes_on("at the start"));
  const auto seconds_since = [](TestClock::time_point t) { return std::chrono::duration<double>(TestClock::now() - t).count(); };

  // Streams held through the first gateway until each agent has one: each agent's drain must move some.
  Gateway& holder = *gateways[0];
  const auto streams_at = [&](const Agent& a) { return gw_metric(holder, "uma_gw_agent_proxied{agent=\"" + a.id() + "/m\"}"); };
  std::vector<std::unique_ptr<HeldStream>> held;
  for (std::size_t i = 0; i < 6 && !(streams_at(*agents[0]) > 0 && streams_at(*agents[1]) > 0); ++i) {
    held.push_back(std::make_unique<HeldStream>(holder.port(), "m", kRestartPrompts[i % kRestartPrompts.size()]));
    ASSERT_TRUE(eventually([&] { return held.back()->tokens() > 0; }, "held stream " + std::to_string(i) + " under way")) << holder.log();
  }
  ASSERT_TRUE(streams_at(*agents[0]) > 0 && streams_at(*agents[1]) > 0) << holder.log();

  for (std::size_t i = 0; i < agents.size(); ++i) {
    const double moved_before = gw_metric(holder, "uma_gw_drain_moved_total");
    const auto t0 = TestClock::now();
    EXPECT_EQ(agents[i]->stop(), 0) << agents[i]->log();
    const double drained_s = seconds_since(t0);
    EXPECT_GT(gw_metric(holder, "uma_gw_drain_moved_total"), moved_before) << "the held streams there moved\n" << holder.log();
    for (const auto& s : held) {
      const std::size_t at = s->tokens();
      EXPECT_TRUE(eventually([&] { return s->tokens() >= at + 8; }, "a held stream going on past the drain")) << holder.log();
    }
    const auto t1 = TestClock::now();
    agents[i] = std::make_unique<Agent>(cat.redis.address(), stores[i], restart_agent_flags());
    ASSERT_TRUE(serving_everywhere(*agents[i], gateways, 2));
    std::cout << "agent " << i << ": drained and exited in " << drained_s << " s, serving again " << seconds_since(t1) << " s after its start\n";
    ASSERT_TRUE(load_goes_on("after agent " + std::to_string(i) + "'s restart"));
  }
  for (const auto& s : held) {
    s->close();
    EXPECT_TRUE(s->exact()) << holder.log();
  }
  EXPECT_EQ(gw_metric(holder, "uma_gw_drain_left_total"), 0) << "another agent served the model at every drain";

  for (std::size_t i = 0; i < gateways.size(); ++i) {
    const int port = gateways[i]->port();
    const auto t0 = TestClock::now();
    EXPECT_EQ(gateways[i]->stop(), 0) << gateways[i]->log();
    const double drained_s = seconds_since(t0);
    const auto t1 = TestClock::now();
    gateways[i] = std::make_unique<Gateway>(cat.redis.address(), restart_gateway_flags(port));
    ASSERT_TRUE(gateways[i]->started()) << gateways[i]->log();
    ASSERT_TRUE(eventually([&] { return gw_metric(*gateways[i], "uma_gw_agents_live") == 2; }, "the new gateway routing to both agents"))
        << gateways[i]->log();
    std::cout << "gateway " << i << ": drained and exited in " << drained_s << " s, routing again " << seconds_since(t1) << " s after its start\n";
    ASSERT_TRUE(load_goes_on("after gateway " + std::to_string(i) + "'s restart"));
  }
  traffic.stop();
  std::cout << "the load: " << traffic.ok() << " requests served, " << traffic.failed() << " failed\n";
  EXPECT_EQ(traffic.failed(), 0) << traffic.failures() << nginx.log();
  EXPECT_GT(traffic.ok(), 0);
}

}  // namespace
}  // namespace uma::test
