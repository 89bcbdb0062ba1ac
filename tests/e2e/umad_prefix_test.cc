// End-to-end prefix cache with the oracle model over the JSON protocol: concurrent requests
// sharing a long prefix all get exact outputs while reusing its KV; eviction under a small cap;
// a weak (colliding) hash never serves another prompt's KV.
#include <gtest/gtest.h>

#include <thread>

#include "e2e/json_helpers.h"
#include "e2e/oracle.h"

namespace uma::test {
namespace {

// Eight concurrent requests: shared prefix + unique last word; each reply is checked exactly.
void run_shared(const Daemon& d, const std::string& prefix, int n, int tokens) {
  std::vector<std::thread> clients;
  std::vector<std::string> got(static_cast<std::size_t>(n)), want(static_cast<std::size_t>(n));
  const char* words[] = {"apple", "river", "stone", "cloud", "maple", "tiger", "ocean", "piano"};
  for (int i = 0; i < n; ++i) {
    const std::string prompt = prefix + " " + words[i % 8];
    want[static_cast<std::size_t>(i)] = oracle().expected_text(prompt, tokens);
    clients.emplace_back([&, i, prompt] {
      auto c = connect(d);
      if (c && c->send_request(request("r" + std::to_string(i), prompt, tokens)).ok()) {
        got[static_cast<std::size_t>(i)] = read_reply(*c).text;
      }
    });
  }
  for (auto& t : clients) t.join();
  for (int i = 0; i < n; ++i) EXPECT_EQ(got[static_cast<std::size_t>(i)], want[static_cast<std::size_t>(i)]) << "request " << i;
}

std::string repeated(const std::string& word, int n) {
  std::string s = word;
  for (int i = 1; i < n; ++i) s += " " + word;
  return s;
}

TEST(UmadPrefix, ConcurrentRequestsSharingAPrefixGetExactOutputsAndReuseIt) {
  Daemon d(args({"--max-tokens", "64", "--n-ctx", "8192"}));
  ASSERT_TRUE(d.started()) << d.log();
  const std::string prefix = Oracle::long_prompt(300, "system");
  run_shared(d, prefix, 8, 16);
  auto m = metrics(d)["prefix_cache"];
  EXPECT_EQ(m["lookups_total"], 8);
  EXPECT_GE(m["hits_total"], 7) << m.dump();
  run_shared(d, prefix, 8, 16);  // again: now from kept sequences
  m = metrics(d)["prefix_cache"];
  EXPECT_GE(m["hits_total"], 15) << m.dump();
  EXPECT_GT(m["hit_ratio_tokens"].get<double>(), 0.8) << m.dump();
}

// Per-sequence KV (the default with several sessions) follows the sessions and the budget: the
// prefix cache holds no streams of its own (the oracle's cells are 1 KiB: 2 layers of 128-wide K
// and V in f16; its trained context is 4096).
TEST(UmadPrefix, TheKvIsTheSessionsRoomWithinTheBudgetAndPrefixesAreReusedInIt) {
  {
    Daemon d(args({"--kv-layout", "per-seq", "--max-sessions", "4", "--n-ctx", "4096"}));
    ASSERT_TRUE(d.started()) << d.log();
    EXPECT_EQ(metrics(d)["kv_cells_total"], 4096) << "4 sessions x 1024 cells, nothing on top for kept prefixes";
    EXPECT_NE(d.log().find("KV 4 MiB = 4 sessions x 1024 cells x 1 KiB"), std::string::npos) << d.log();
  }
  // --n-ctx 0 under a 2 MiB budget: 4 x the trained 4096 would need 16 MiB; 512 cells a session fit.
  Daemon d(args({"--kv-layout", "per-seq", "--max-sessions", "4", "--kv-mb", "2", "--max-tokens", "64"}));
  ASSERT_TRUE(d.started()) << d.log();
  EXPECT_EQ(metrics(d)["kv_cells_total"], 2048) << d.log();
  EXPECT_NE(d.log().find("KV budget 2 MiB (--kv-mb)"), std::string::npos) << d.log();
  // A prefix reused exactly within it: one after another, each takes the last one's stream over.
  const std::string prefix = Oracle::long_prompt(300, "system");
  for (const char* word : {"apple", "river", "stone"}) {
    auto c = connect(d);
    const std::string prompt = prefix + " " + word;
    ASSERT_TRUE(c->send_request(request(word, prompt, 8)).ok());
    EXPECT_EQ(read_reply(*c).text, oracle().expected_text(prompt, 8)) << word;
  }
  const auto m = metrics(d)["prefix_cache"];
  EXPECT_EQ(m["hits_total"], 2) << m.dump();
  EXPECT_EQ(m["adopted_total"], 2) << "taken over where they were kept: " << m.dump();
  // An explicit context over an explicit budget is refused at start, saying both.
  std::string out;
  EXPECT_NE(run_command({bin_path("umad"), "--model", model_path("oracle.gguf"), "--socket", temp_dir() + "/kv.sock",
                         "--n-ctx", "8192", "--kv-mb", "4"}, &out), 0);
  EXPECT_NE(out.find("over the --kv-mb budget of 4 MiB"), std::string::npos) << out;
}

TEST(UmadPrefix, EvictionUnderASmallCapKeepsOutputsExact) {
  Daemon d(args({"--max-tokens", "64", "--n-ctx", "2048", "--prefix-cache-seqs", "1", "--prefix-cache-mb", "1"}));
  ASSERT_TRUE(d.started()) << d.log();
  for (int round = 0; round < 3; ++round) {
    for (const char* topic : {"alpha", "beta", "gamma"}) {
      run_shared(d, Oracle::long_prompt(200, topic), 2, 8);
    }
  }
  const auto m = metrics(d)["prefix_cache"];
  EXPECT_GT(m["evictions_total"], 0) << m.dump();
  EXPECT_LE(m["kept_sequences"], 1);
  EXPECT_LE(m["host_bytes"].get<long>(), 1 << 20);
}

TEST(UmadPrefix, AWeakHashNeverServesAnotherPromptsKv) {
  Daemon d(args({"--max-tokens", "64", "--n-ctx", "8192", "--prefix-hash", "weak"}));
  ASSERT_TRUE(d.started()) << d.log();
  // Every block of every prompt hashes alike: only the token comparison tells them apart.
  // Prompts that differ from their first token on, and prompts that share a prefix.
  for (const char* topic : {"alpha", "beta", "gamma", "delta"}) run_shared(d, repeated(topic, 100), 2, 8);
  run_shared(d, repeated("alpha", 100), 2, 8);
  const auto m = metrics(d)["prefix_cache"];
  EXPECT_GT(m["hits_total"], 0) << "real matches still reuse: " << m.dump();
}

TEST(UmadPrefix, NoPrefixCacheMeansNoLookups) {
  Daemon d(args({"--max-tokens", "64", "--no-prefix-cache"}));
  ASSERT_TRUE(d.started()) << d.log();
  run_shared(d, Oracle::long_prompt(100, "system"), 2, 8);
  const auto m = metrics(d);
  EXPECT_EQ(m["prefix_cache"]["lookups_total"], 0);
  EXPECT_EQ(m["kv_tokens_used"], 0);
}

}  // namespace
}  // namespace uma::test
