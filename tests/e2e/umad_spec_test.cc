// Speculative decoding end to end with the oracle model (greedy next token = last + 1): prompts
// given as token ids that hold the oracle's continuation, whole or with a cut, so that prompt
// lookup drafts are accepted, rejected and resumed; 16 streams at once, each exact.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <thread>

#include "e2e/daemon_harness.h"
#include "e2e/http_client.h"
#include "e2e/json_helpers.h"
#include "e2e/oracle.h"

namespace uma::test {
namespace {

// Stream k: a passage of consecutive token ids, a separator, then the passage's first four ids:
// the model goes on with the passage. Odd k: the passage skips ten ids in its middle, so the
// draft is rejected there and found again ten tokens later.
std::vector<std::int32_t> copy_prompt(int k) {
  const std::int32_t base = 1000 + 300 * k;
  std::vector<std::int32_t> p;
  for (std::int32_t t = base; t < base + 80; ++t) {
    if (k % 2 == 1 && t >= base + 30 && t < base + 40) continue;
    p.push_back(t);
  }
  p.push_back(13);  // a newline: no run of the passage continues it
  for (std::int32_t t = base; t < base + 4; ++t) p.push_back(t);
  return p;
}

struct StreamsRun {
  std::vector<std::string> texts;
  nlohmann::json metrics;
};

StreamsRun run_streams(const std::vector<std::string>& extra, int n, int max_tokens) {
  std::vector<std::string> a = {"--max-sessions", "16"};
  a.insert(a.end(), extra.begin(), extra.end());
  Daemon d(http_args(a));
  StreamsRun r;
  EXPECT_TRUE(d.started()) << d.log();
  if (!d.started()) return r;
  const int port = http_port(d);
  r.texts.resize(static_cast<std::size_t>(n));
  std::vector<std::thread> threads;
  for (int k = 0; k < n; ++k) {
    threads.emplace_back([&, k] {
      const nlohmann::json body = {{"prompt", copy_prompt(k)}, {"max_tokens", max_tokens}, {"temperature", 0}};
      Tcp t(port);
      if (!t.send(post("/v1/completions", body.dump()))) return;
      const std::string resp = t.response();
      const auto j = nlohmann::json::parse(body_of(resp), nullptr, false);
      r.texts[static_cast<std::size_t>(k)] = !j.is_discarded() && j.contains("choices") ? j["choices"][0]["text"].get<std::string>() : resp;
    });
  }
  for (std::thread& t : threads) t.join();
  r.metrics = metrics(d);
  return r;
}

TEST(UmadSpec, SixteenStreamsWithDraftsAcceptedRejectedAndResumedAreExactlyTheStreamsWithout) {
  constexpr int kStreams = 16, kTokens = 72;
  // --speculative-force: verify every draft found, whatever the cost model says (on this CPU it
  // would decline many at 16 streams), so that the comparison covers drafts under concurrency.
  const StreamsRun with = run_streams({"--speculative", "lookup", "--speculative-force"}, kStreams, kTokens);
  const StreamsRun without = run_streams({"--speculative", "off"}, kStreams, kTokens);
  ASSERT_EQ(with.texts.size(), static_cast<std::size_t>(kStreams));
  ASSERT_EQ(without.texts.size(), static_cast<std::size_t>(kStreams));
  for (int k = 0; k < kStreams; ++k) {
    const std::vector<std::int32_t> p = copy_prompt(k);
    const std::string expected = oracle().expected_text_after(p.back(), kTokens);
    EXPECT_EQ(with.texts[static_cast<std::size_t>(k)], expected) << "stream " << k;
    EXPECT_EQ(without.texts[static_cast<std::size_t>(k)], expected) << "stream " << k;
  }
  const auto& m = with.metrics;
  const double drafted = m.value("spec_drafted_total", 0.0), accepted = m.value("spec_accepted_total", 0.0);
  std::printf("16 streams: %.0f draft tokens verified, %.0f accepted, in %.0f ticks; %.0f decodes against %.0f without\n",
              drafted, accepted, m.value("spec_ticks_total", 0.0), m.value("batch_calls_total", 0.0),
              without.metrics.value("batch_calls_total", 0.0));
  EXPECT_GT(accepted, 0);
  EXPECT_LT(accepted, drafted) << "the cut passages reject drafts";
  EXPECT_LT(m.value("batch_calls_total", 0.0), without.metrics.value("batch_calls_total", 0.0));
  EXPECT_EQ(m.value("kv_tokens_used", -1.0), 0.0) << "no draft cell left behind";
  EXPECT_EQ(without.metrics.value("spec_drafted_total", -1.0), 0.0);
}

TEST(UmadSpec, ARequestSaysNoAndTheFieldIsChecked) {
  Daemon d(http_args({"--speculative", "lookup", "--speculative-force"}));
  ASSERT_TRUE(d.started()) << d.log();
  const int port = http_port(d);
  const std::vector<std::int32_t> p = copy_prompt(0);
  Tcp t(port);
  ASSERT_TRUE(t.send(post("/v1/completions", nlohmann::json({{"prompt", p}, {"max_tokens", 20}, {"speculative", false}}).dump())));
  const std::string resp = t.response();
  ASSERT_EQ(status_of(resp), 200) << resp;
  EXPECT_EQ(nlohmann::json::parse(body_of(resp))["choices"][0]["text"], oracle().expected_text_after(p.back(), 20));
  EXPECT_EQ(metrics(d).value("spec_drafted_total", -1.0), 0.0);
  Tcp bad(port);
  ASSERT_TRUE(bad.send(post("/v1/completions", nlohmann::json({{"prompt", p}, {"max_tokens", 2}, {"speculative", "yes"}}).dump())));
  const std::string r2 = bad.response();
  EXPECT_EQ(status_of(r2), 400) << r2;
  EXPECT_NE(r2.find("speculative"), std::string::npos) << r2;
}

}  // namespace
}  // namespace uma::test
