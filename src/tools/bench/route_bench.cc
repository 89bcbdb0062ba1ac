// uma-route-bench: the time one routing decision takes (gateway/routing.h's choose()) with N
// registered agents of random load and random cached prefixes, per policy. The target:
// ≤ 200 µs p99 with 64 agents. This is the decision over candidates already built; the gateway's
// prefix-block match per agent comes on top once it exists.
//   uma-route-bench [--agents 64] [--decisions 200000] [--seed 1]
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include "gateway/routing.h"
#include "tools/bench/stats.h"

int main(int argc, char** argv) {
  using namespace uma::gateway;
  using uma::cluster::AgentState;
  CLI::App app{"uma-route-bench: routing decision time"};
  int agents = 64, decisions = 200000;
  unsigned seed = 1;
  app.add_option("--agents", agents)->check(CLI::Range(1, 100000));
  app.add_option("--decisions", decisions)->check(CLI::Range(1, 100000000));
  app.add_option("--seed", seed);
  CLI11_PARSE(app, argc, argv);

  std::mt19937_64 rng(seed);
  std::vector<AgentState> states(static_cast<std::size_t>(agents));
  for (int i = 0; i < agents; ++i) {
    AgentState& a = states[static_cast<std::size_t>(i)];
    a.id = "agent-" + std::to_string(i);
    a.models = {{"m.gguf", 8'000'000'000, i % 8 == 7 ? uma::cluster::ModelState::kRemote : uma::cluster::ModelState::kLoaded,
                 i % 2 ? uma::store::Tier::kNvme : uma::store::Tier::kDram}};
    a.prefill_tok_s = 2000.0 + static_cast<double>(rng() % 20000);
    a.prefill_backlog_tokens = static_cast<std::int64_t>(rng() % 50000);
    a.active_sessions = static_cast<std::int64_t>(rng() % 64);
    a.queued_sessions = static_cast<std::int64_t>(rng() % 8);
  }
  std::vector<Candidate> cs(static_cast<std::size_t>(agents));
  for (int i = 0; i < agents; ++i) cs[static_cast<std::size_t>(i)] = Candidate{&states[static_cast<std::size_t>(i)]};
  std::printf("%d agents, %d decisions each\n", agents, decisions);
  for (Policy policy : {Policy::kPredicted, Policy::kSeed, Policy::kRoundRobin, Policy::kLeastLoaded}) {
    std::vector<double> us;
    us.reserve(static_cast<std::size_t>(decisions));
    std::uint64_t cursor = 0;
    long long checksum = 0;
    for (int d = 0; d < decisions; ++d) {
      const RouteRequest r{"m.gguf", static_cast<std::int64_t>(100 + rng() % 4000)};
      for (Candidate& c : cs) c.cached_tokens = static_cast<std::int64_t>(rng() % 4096);  // what a prefix match gives
      const auto t0 = std::chrono::steady_clock::now();
      const RouteChoice choice = choose(policy, cs, r, RoutingParams{}, &cursor);
      const auto t1 = std::chrono::steady_clock::now();
      checksum += choice.index;
      us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    }
    const uma::bench::Summary s = uma::bench::summarize(std::move(us));
    const char* name = policy == Policy::kPredicted ? "predicted" : policy == Policy::kSeed ? "seed"
                       : policy == Policy::kRoundRobin ? "round-robin" : "least-loaded";
    std::printf("%-13s p50 %.2f us  p99 %.2f us  max %.1f us  (checksum %lld)\n", name, s.p50, s.p99, s.max, checksum);
  }
  return 0;
}
