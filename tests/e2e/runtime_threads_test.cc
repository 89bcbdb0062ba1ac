// The compute threads changed between decodes (--threads auto, sched/thread_governor.h) change
// nothing a decode computes: on the oracle model greedy streams stay exact while every decode
// takes another thread count, and on an ordinary random model (attention matters) the logits of
// a prompt and the decode steps after it stay those of a fixed pool within tolerance. A daemon
// with --threads auto counts the cores its affinity mask allows, and its compute threads spin
// only briefly at a barrier before they sleep.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sched.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "e2e/daemon_harness.h"
#include "e2e/oracle.h"
#include "e2e/tiny_runtime.h"
#include "runtime/llama_runtime.h"

namespace uma::test {
namespace {

constexpr std::int32_t kThreadCycle[] = {1, 3, 2, 1, 2, 3, 3, 1};

// Greedy streams of three sequences, `steps` decodes; `switching`: the threads change every decode.
std::map<std::int32_t, std::vector<Token>> greedy_streams(LlamaRuntime& rt, bool switching, int steps) {
  std::map<std::int32_t, std::vector<Token>> prompts = {{0, {700, 701, 702}}, {1, {1200}}, {2, {300, 301, 302, 303, 304}}};
  std::map<std::int32_t, std::vector<Token>> out;
  std::map<std::int32_t, std::int32_t> pos;
  for (auto& [seq, p] : prompts) EXPECT_TRUE(rt.start_sequence(seq, SamplingParams{}).ok());
  for (int step = 0; step < steps; ++step) {
    if (switching) rt.set_threads(kThreadCycle[step % std::size(kThreadCycle)]);
    std::vector<BatchEntry> batch;
    std::map<std::int32_t, std::int32_t> row;
    for (auto& [seq, p] : prompts) {
      const std::vector<Token> feed = step == 0 ? p : std::vector<Token>{out[seq].back()};
      for (std::size_t i = 0; i < feed.size(); ++i) batch.push_back({feed[i], pos[seq]++, seq, i + 1 == feed.size()});
      row[seq] = static_cast<std::int32_t>(batch.size()) - 1;
    }
    EXPECT_TRUE(rt.decode(batch).ok());
    for (auto& [seq, p] : prompts) out[seq].push_back(rt.sample(seq, row[seq]));
  }
  for (auto& [seq, p] : prompts) rt.end_sequence(seq);
  return out;
}

TEST(RuntimeThreads, OracleStreamsStayExactWhileEveryDecodeTakesAnotherThreadCount) {
  auto rt = open_tiny_runtime([](RuntimeConfig& cfg) {
    cfg.model_path = std::string(UMA_MODELS_DIR) + "/oracle.gguf";
    cfg.n_ctx = 1024;
  });
  ASSERT_TRUE(rt);
  const auto fixed = greedy_streams(*rt, /*switching=*/false, 24);
  const auto switched = greedy_streams(*rt, /*switching=*/true, 24);
  EXPECT_EQ(rt->threads(), kThreadCycle[23 % std::size(kThreadCycle)]);
  for (const auto& [seq, tokens] : fixed) {
    EXPECT_EQ(switched.at(seq), tokens) << "sequence " << seq;
    // The oracle's rule: after token t comes t + 1.
    const Token last_prompt = seq == 0 ? 702 : seq == 1 ? 1200 : 304;
    for (std::size_t i = 0; i < tokens.size(); ++i) EXPECT_EQ(tokens[i], last_prompt + 1 + static_cast<Token>(i)) << "sequence " << seq;
  }
}

// Prompt then decode steps of one sequence; the logits of every step.
std::vector<std::vector<float>> logits_of_steps(LlamaRuntime& rt, bool switching) {
  std::vector<std::vector<float>> rows;
  EXPECT_TRUE(rt.start_sequence(0, SamplingParams{}).ok());
  std::vector<Token> feed = tiny_prompt(48, 3);
  std::int32_t pos = 0;
  for (int step = 0; step < 12; ++step) {
    if (switching) rt.set_threads(kThreadCycle[step % std::size(kThreadCycle)]);
    std::vector<BatchEntry> batch;
    for (std::size_t i = 0; i < feed.size(); ++i) batch.push_back({feed[i], pos++, 0, i + 1 == feed.size()});
    EXPECT_TRUE(rt.decode(batch).ok());
    const auto row = rt.logits(static_cast<std::int32_t>(batch.size()) - 1);
    rows.emplace_back(row.begin(), row.end());
    feed = {static_cast<Token>(std::max_element(rows.back().begin(), rows.back().end()) - rows.back().begin())};
  }
  rt.end_sequence(0);
  return rows;
}

TEST(RuntimeThreads, AnOrdinaryModelsLogitsStayThoseOfAFixedPoolWhileTheThreadsChange) {
  auto rt = open_tiny_runtime([](RuntimeConfig&) {});
  ASSERT_TRUE(rt);
  if (!rt->computes_on_host()) GTEST_SKIP() << "every layer on a GPU: no host thread pool to switch";
  const auto fixed = logits_of_steps(*rt, false);
  const auto switched = logits_of_steps(*rt, true);
  ASSERT_EQ(fixed.size(), switched.size());
  for (std::size_t s = 0; s < fixed.size(); ++s) {
    ASSERT_EQ(fixed[s].size(), switched[s].size());
    ASSERT_FALSE(fixed[s].empty());
    float scale = 0;
    for (float x : fixed[s]) scale = std::max(scale, std::fabs(x));
    for (std::size_t i = 0; i < fixed[s].size(); ++i) ASSERT_NEAR(fixed[s][i], switched[s][i], 1e-3f * scale) << "step " << s << " logit " << i;
  }
}

// The daemon inherits an affinity mask of one CPU from the thread that spawns it (taskset's way):
// --threads auto computes on that one, says so at start and in the metrics, and serves exactly.
TEST(RuntimeThreads, ADaemonWithThreadsAutoCountsTheCpusItsAffinityAllows) {
  cpu_set_t mine, one;
  ASSERT_EQ(::sched_getaffinity(0, sizeof(mine), &mine), 0);
  CPU_ZERO(&one);
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &mine)) {
      CPU_SET(c, &one);
      break;
    }
  }
  ASSERT_EQ(::sched_setaffinity(0, sizeof(one), &one), 0);
  Daemon d({"--threads", "auto", "--max-tokens", "24"});
  ASSERT_EQ(::sched_setaffinity(0, sizeof(mine), &mine), 0);
  ASSERT_TRUE(d.started()) << d.log();
  EXPECT_NE(d.log().find("threads: 1 (1 of "), std::string::npos) << d.log();
  Client c(d.socket());
  ASSERT_TRUE(c.send("hello world\n"));
  EXPECT_EQ(c.read_line().value_or("<none>"), oracle().expected_reply("hello world", 24));
  const auto m = nlohmann::json::parse(fetch_metrics(d.socket()));
  EXPECT_EQ(m.value("compute_threads", -1), 1) << m.dump();
  EXPECT_GE(m.value("cpu_others_cores", -1.0), 0.0) << m.dump();
}

// The environment libgomp read when the daemon's process image started (compute_spin.h): a short
// spin before its compute threads sleep at a barrier by default, and an operator's setting kept.
std::string process_env(pid_t pid, const std::string& name) {
  const std::string env = slurp("/proc/" + std::to_string(pid) + "/environ");
  const std::string key = name + "=";
  for (std::size_t at = 0; at < env.size();) {
    const std::size_t end = std::min(env.find('\0', at), env.size());
    if (env.compare(at, key.size(), key) == 0) return env.substr(at + key.size(), end - at - key.size());
    at = end + 1;
  }
  return "<unset>";
}

TEST(RuntimeThreads, ComputeThreadsSpinBrieflyAtBarriersUnlessTheOperatorSaysOtherwise) {
  ASSERT_EQ(::unsetenv("GOMP_SPINCOUNT"), 0);
  ASSERT_EQ(::unsetenv("OMP_WAIT_POLICY"), 0);
  {
    Daemon d({"--max-tokens", "8"});
    ASSERT_TRUE(d.started()) << d.log();
    EXPECT_EQ(process_env(d.pid(), "GOMP_SPINCOUNT"), "3000");
    EXPECT_NE(d.log().find("wait at barriers: spin 3000 pauses"), std::string::npos) << d.log();
    Client c(d.socket());
    ASSERT_TRUE(c.send("hello world\n"));
    EXPECT_EQ(c.read_line().value_or("<none>"), oracle().expected_reply("hello world", 8));
  }
  ASSERT_EQ(::setenv("GOMP_SPINCOUNT", "77", 1), 0);
  {
    Daemon d({"--max-tokens", "8"});
    ASSERT_TRUE(d.started()) << d.log();
    EXPECT_EQ(process_env(d.pid(), "GOMP_SPINCOUNT"), "77");
  }
  ASSERT_EQ(::unsetenv("GOMP_SPINCOUNT"), 0);
  ASSERT_EQ(::setenv("OMP_WAIT_POLICY", "passive", 1), 0);
  {
    Daemon d({"--max-tokens", "8"});
    ASSERT_TRUE(d.started()) << d.log();
    EXPECT_EQ(process_env(d.pid(), "GOMP_SPINCOUNT"), "<unset>");
    EXPECT_NE(d.log().find("wait at barriers: OMP_WAIT_POLICY=passive"), std::string::npos) << d.log();
  }
  ASSERT_EQ(::unsetenv("OMP_WAIT_POLICY"), 0);
}

}  // namespace
}  // namespace uma::test
