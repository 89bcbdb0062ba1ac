// Routing as pure functions over synthetic cluster states: the predicted TTFT's three terms, and
// what each policy picks.
#include "gateway/routing.h"

#include <gtest/gtest.h>

#include <vector>

namespace uma::gateway {
namespace {

cluster::AgentState agent(const std::string& id, double prefill_tok_s, std::int64_t backlog, std::int64_t active = 0) {
  cluster::AgentState a;
  a.id = id;
  a.models = {{"m.gguf", 4'000'000'000, cluster::ModelState::kLoaded, store::Tier::kDram}};
  a.prefill_tok_s = prefill_tok_s;
  a.prefill_backlog_tokens = backlog;
  a.active_sessions = active;
  return a;
}

TEST(Routing, PredictedTtftIsLoadPlusQueuePlusUncachedPrefill) {
  cluster::AgentState a = agent("a", 1000.0, 500);
  Candidate c{&a, /*cached*/ 800, /*pending*/ 300};
  const RouteRequest r{"m.gguf", 1000};
  RoutingParams p;
  Prediction t = predict_ttft(c, r, p);
  EXPECT_DOUBLE_EQ(t.load, 0.0) << "loaded";
  EXPECT_DOUBLE_EQ(t.queue, 0.8) << "(500 backlog + 300 of ours) / 1000 tok/s";
  EXPECT_DOUBLE_EQ(t.prefill, 0.2) << "200 uncached tokens";
  a.models[0].state = cluster::ModelState::kRemote;
  c.load_bandwidth_bytes_s = 2e9;
  c.loader_queue_bytes = 1'000'000'000;
  t = predict_ttft(c, r, p);
  EXPECT_DOUBLE_EQ(t.load, 2.5) << "(4 GB + 1 GB queued) / 2 GB/s";
  a.prefill_tok_s = 0.0;  // not measured yet: the default rate
  p.default_prefill_tok_s = 100.0;
  EXPECT_DOUBLE_EQ(predict_ttft(c, r, p).prefill, 2.0);
  c.cached_tokens = 5000;  // more than the prompt: only its last token is computed, never negative
  EXPECT_DOUBLE_EQ(predict_ttft(c, r, p).prefill, 0.01);
}

TEST(Routing, EveryTickPaysItsFixedCostAndTheRunningStreamsDecodeStep) {
  cluster::AgentState a = agent("a", 1000.0, /*backlog*/ 1024, /*active*/ 0);
  a.tick_tokens = 512;
  a.tick_fixed_ms = 10.0;
  a.decode_tick_ms = 0.0;  // nobody decoding
  Candidate c{&a, /*cached*/ 0, /*pending*/ 0};
  const RouteRequest r{"m.gguf", 600};
  Prediction t = predict_ttft(c, r, RoutingParams{});
  EXPECT_DOUBLE_EQ(t.queue, 1.024 + 2 * 0.010) << "two whole ticks ahead";
  EXPECT_DOUBLE_EQ(t.prefill, 0.6 + 2 * 0.010) << "1624 tokens end in the 4th tick: two of them are the request's";
  a.active_sessions = 3;
  a.decode_tick_ms = 30.0;  // streams decoding: every tick is also their decode step
  t = predict_ttft(c, r, RoutingParams{});
  EXPECT_DOUBLE_EQ(t.queue, 1.024 + 2 * 0.040);
  EXPECT_DOUBLE_EQ(t.prefill, 0.6 + 2 * 0.040);
}

// An agent that has not measured its rate (it just joined) is predicted at its peers' median, not at
// the default: here the default would make its cold prefill look 5x cheaper than the measured
// agent's queue behind a cached prefix.
TEST(Routing, AnUnmeasuredAgentIsPredictedAtItsPeersRate) {
  cluster::AgentState measured = agent("a", 100.0, /*backlog*/ 300);
  cluster::AgentState other = agent("c", 120.0, 0);
  other.models[0].name = "other.gguf";  // another model's rate says nothing about this one
  cluster::AgentState fresh = agent("b", 0.0, 0);
  std::vector<Candidate> cs = {{&measured, /*cached*/ 900, 0}, {&other, 0, 0}, {&fresh, 0, 0}};
  const RouteRequest r{"m.gguf", 1000};
  EXPECT_DOUBLE_EQ(cluster_prefill_tok_s(cs, r), 100.0);
  RoutingParams p;  // default 500 tok/s
  EXPECT_NEAR(predict_ttft(cs[2], r, p).total(), 2.0, 1e-9) << "alone, the default: it would beat the measured 4 s";
  std::uint64_t cursor = 0;
  const RouteChoice choice = choose(Policy::kPredicted, cs, r, p, &cursor);
  EXPECT_EQ(choice.index, 0) << "(300 ahead + 100 uncached) / 100 tok/s = 4 s beats 1000 / 100 tok/s = 10 s";
  EXPECT_NEAR(choice.predicted.total(), 4.0, 1e-9);
  measured.prefill_tok_s = 0.0;  // nobody has measured: the default again
  EXPECT_DOUBLE_EQ(cluster_prefill_tok_s(cs, r), 0.0);
}

// Once the gateway has measured enough of an agent's answers, the prediction is the fit's: here an
// agent twice as slow as its beat says, with 50 ms of its own per request.
TEST(Routing, AnAgentsMeasuredFitReplacesItsBeatsModel) {
  cluster::AgentState a = agent("a", 1000.0, 0);
  TtftFit fit;
  Candidate c{&a, /*cached*/ 0, /*pending*/ 0};
  c.fit = &fit;
  const RouteRequest r{"m.gguf", 1000};
  RoutingParams p;
  for (std::size_t i = 0; i + 1 < p.min_fit_samples; ++i) fit.observe(500 + 100 * i, 0, 0, 0.050 + 0.002 * (500 + 100 * i));
  Prediction t = predict_ttft(c, r, p);
  EXPECT_FALSE(t.fitted) << "one sample short";
  EXPECT_DOUBLE_EQ(t.total(), 1.0);
  for (int i = 0; i < 40; ++i) fit.observe(200 + 50 * (i % 9), 300 * (i % 4), 0, 0.050 + 0.002 * (200 + 50 * (i % 9)) + 0.002 * 300 * (i % 4));
  t = predict_ttft(c, r, p);
  EXPECT_TRUE(t.fitted);
  EXPECT_EQ(t.uncached, 1000);
  EXPECT_NEAR(t.total(), 0.050 + 2.0, 0.1);
}

TEST(Routing, PredictedPrefersTheCachedPrefixUntilItsQueueCostsMore) {
  cluster::AgentState hot = agent("hot", 1000.0, 0), cold = agent("cold", 1000.0, 0);
  std::vector<Candidate> cs = {{&cold, 0, 0}, {&hot, 900, 0}};
  const RouteRequest r{"m.gguf", 1000};
  std::uint64_t cursor = 0;
  EXPECT_EQ(choose(Policy::kPredicted, cs, r, RoutingParams{}, &cursor).index, 1) << "0.1 s against 1.0 s";
  hot.prefill_backlog_tokens = 950;  // 0.95 + 0.1 > 1.0
  const RouteChoice c = choose(Policy::kPredicted, cs, r, RoutingParams{}, &cursor);
  EXPECT_EQ(c.index, 0);
  EXPECT_DOUBLE_EQ(c.predicted.total(), 1.0);
  cs[0].pending_tokens = 200;  // this gateway's own unreported dispatches count too
  EXPECT_EQ(choose(Policy::kPredicted, cs, r, RoutingParams{}, &cursor).index, 1);
}

TEST(Routing, OnlyAgentsWithTheModelAndNoneIsMinusOne) {
  cluster::AgentState a = agent("a", 1000.0, 0), b = agent("b", 1000.0, 0);
  b.models[0].name = "other.gguf";
  std::vector<Candidate> cs = {{&b, 0, 0}, {&a, 0, 0}};
  std::uint64_t cursor = 0;
  for (Policy p : {Policy::kPredicted, Policy::kSeed, Policy::kRoundRobin, Policy::kLeastLoaded}) {
    EXPECT_EQ(choose(p, cs, RouteRequest{"m.gguf", 10}, RoutingParams{}, &cursor).index, 1);
    EXPECT_EQ(choose(p, cs, RouteRequest{"nope.gguf", 10}, RoutingParams{}, &cursor).index, -1);
  }
  EXPECT_EQ(choose(Policy::kPredicted, {}, RouteRequest{"m.gguf", 10}, RoutingParams{}, &cursor).index, -1);
}

TEST(Routing, RoundRobinCyclesAndLeastLoadedPicksTheIdlest) {
  cluster::AgentState a = agent("a", 1000.0, 0, 5), b = agent("b", 1000.0, 0, 1), c = agent("c", 1000.0, 0, 3);
  std::vector<Candidate> cs = {{&a, 0, 0}, {&b, 0, 0}, {&c, 0, 0}};
  std::uint64_t cursor = 0;
  std::vector<int> order;
  for (int k = 0; k < 6; ++k) order.push_back(choose(Policy::kRoundRobin, cs, RouteRequest{"m.gguf", 1}, {}, &cursor).index);
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 0, 1, 2}));
  EXPECT_EQ(choose(Policy::kLeastLoaded, cs, RouteRequest{"m.gguf", 1}, {}, &cursor).index, 1);
}

TEST(Routing, TheSeedFormulaWeighsCacheLevelHitRateQueueAndLoad) {
  cluster::AgentState loaded = agent("loaded", 1000.0, 2000), cold = agent("cold", 1000.0, 0);
  cold.models[0].state = cluster::ModelState::kRemote;
  cold.models[0].tier = store::Tier::kNvme;  // cache level 2
  std::vector<Candidate> cs = {{&loaded, 0, 0}, {&cold, 0, 0, 4e9}};
  std::uint64_t cursor = 0;
  RoutingParams p;
  // loaded: 1·0 − 0 + 1·2.0 + 0 = 2.0; cold: 1·2 − 0 + 0 + 1·(4 GB / 4 GB/s) = 3.0
  EXPECT_EQ(choose(Policy::kSeed, cs, RouteRequest{"m.gguf", 100}, p, &cursor).index, 0);
  p.gamma = 2.0;  // weigh the queue more: 4.0 against 3.0
  EXPECT_EQ(choose(Policy::kSeed, cs, RouteRequest{"m.gguf", 100}, p, &cursor).index, 1);
}

TEST(Routing, PolicyNames) {
  Policy p;
  ASSERT_TRUE(parse_policy("least-loaded", &p));
  EXPECT_EQ(p, Policy::kLeastLoaded);
  EXPECT_FALSE(parse_policy("random", &p));
}

}  // namespace
}  // namespace uma::gateway
