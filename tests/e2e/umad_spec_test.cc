// Speculative decoding end to end with the oracle model (greedy next token = last + 1): prompts
// given as token ids that hold the oracle's continuation, whole or with a cut, so that prompt
// lookup drafts are accepted, rejected and resumed; 16 streams at once, each exact.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
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

// One completion on a fresh connection, with what tells a client that gave up from a server that
// answered wrongly.
struct SpecReply {
  bool sent = false;
  bool whole = false;   // a whole HTTP response arrived
  bool closed = false;  // the server closed the connection
  bool has_text = false;
  int status = -1;
  std::string text;  // choices[0].text of a 200 (streamed: its chunks' together, up to [DONE])
  std::string raw;   // what arrived
  // Why this is not a 200 completion with a text ("" when it is).
  std::string problem(int k) const {
    const std::string req = "request " + std::to_string(k);
    const std::string got = " (" + std::to_string(raw.size()) + " bytes arrived: '" + raw.substr(0, 300) + "')";
    if (!sent) return "could not send " + req;
    if (!whole && closed) return "the server closed the connection before the whole response to " + req + got;
    if (!whole) return "timed out waiting for the response to " + req + got;
    if (status != 200) return req + ": status " + std::to_string(status) + ": " + raw.substr(0, 400);
    if (!has_text) return req + ": no completion text in " + raw.substr(0, 400);
    return {};
  }
};

// One whole response; the hang guard counts from the last bytes that came, so that a stream that
// is slow (a sanitizer build on busy cores) is never cut off, only one that stopped.
std::string spec_read_response(Tcp& t) {
  for (std::size_t seen = 0;;) {
    const std::string r = t.response();
    if (response_length(r) != std::string::npos || t.closed() || r.size() == seen) return r;
    seen = r.size();
  }
}

SpecReply spec_complete(int port, const nlohmann::json& body) {
  SpecReply r;
  Tcp t(port);
  r.sent = t.send(post("/v1/completions", body.dump()));
  if (!r.sent) return r;
  r.raw = spec_read_response(t);
  r.whole = response_length(r.raw) != std::string::npos;
  r.closed = t.closed();
  r.status = status_of(r.raw);
  if (!r.whole || r.status != 200) return r;
  if (body.value("stream", false)) {
    const std::string sse = dechunk(body_of(r.raw));
    bool done = false, error = false;
    for (std::size_t at = sse.find("data: "); at != std::string::npos; at = sse.find("data: ", at + 1)) {
      const std::size_t end = sse.find("\n\n", at);
      const std::string data = sse.substr(at + 6, end == std::string::npos ? std::string::npos : end - at - 6);
      done = done || data == "[DONE]";
      const auto j = nlohmann::json::parse(data, nullptr, false);
      error = error || (!j.is_discarded() && j.contains("error"));
      if (!j.is_discarded() && j.contains("choices") && !j["choices"].empty()) r.text += j["choices"][0].value("text", "");
    }
    r.has_text = done && !error;  // else problem() shows what came
    return r;
  }
  const auto j = nlohmann::json::parse(body_of(r.raw), nullptr, false);
  const nlohmann::json::json_pointer text_at("/choices/0/text");
  r.has_text = !j.is_discarded() && j.contains(text_at) && j.at(text_at).is_string();
  if (r.has_text) r.text = j.at(text_at).get<std::string>();
  return r;
}

// Fails with what went wrong: no whole response, an error, or another text.
void expect_spec_completion(const SpecReply& r, int k, const std::string& expected, const std::string& what) {
  if (const std::string problem = r.problem(k); !problem.empty()) {
    ADD_FAILURE() << what << ": " << problem;
  } else {
    EXPECT_EQ(r.text, expected) << what << ": request " << k;
  }
}

struct StreamsRun {
  std::vector<SpecReply> replies;
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
  r.replies.resize(static_cast<std::size_t>(n));
  std::vector<std::thread> threads;
  for (int k = 0; k < n; ++k) {
    threads.emplace_back([&, k] {
      const nlohmann::json body = {{"prompt", copy_prompt(k)}, {"max_tokens", max_tokens}, {"temperature", 0}};
      r.replies[static_cast<std::size_t>(k)] = spec_complete(port, body);
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
  ASSERT_EQ(with.replies.size(), static_cast<std::size_t>(kStreams));
  ASSERT_EQ(without.replies.size(), static_cast<std::size_t>(kStreams));
  for (int k = 0; k < kStreams; ++k) {
    const std::vector<std::int32_t> p = copy_prompt(k);
    const std::string expected = oracle().expected_text_after(p.back(), kTokens);
    expect_spec_completion(with.replies[static_cast<std::size_t>(k)], k, expected, "with drafts");
    expect_spec_completion(without.replies[static_cast<std::size_t>(k)], k, expected, "without");
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

// Seeded sampling over two likely tokens (top_k 2, the oracle's token biased to about 3 in 4): how long each output follows the passage before it first turns away, over 320 seeds,
// with every draft verified and without speculation. Sample-and-compare draws exactly the
// tokens a run without drafts draws, so the distributions agree (and most outputs are the same,
// the logits being computed in other batch shapes).
std::vector<int> run_lengths(const std::vector<std::string>& extra, int seeds, std::vector<std::string>* texts,
                             nlohmann::json* m) {
  Daemon d(http_args(extra));
  EXPECT_TRUE(d.started()) << d.log();
  if (!d.started()) return {};
  const int port = http_port(d);
  constexpr int kTokens = 12, kThreads = 8;
  std::vector<int> lengths(static_cast<std::size_t>(seeds), -1);
  texts->resize(static_cast<std::size_t>(seeds));
  std::vector<std::thread> threads;
  for (int w = 0; w < kThreads; ++w) {
    threads.emplace_back([&, w] {
      for (int i = w; i < seeds; i += kThreads) {
        const std::vector<std::int32_t> p = copy_prompt(i % 8 * 2);  // whole passages
        // The oracle's token scores 16 and the best other about 4: a bias of -11 on the passage
        // leaves it the likelier of the two top_k keeps, about 3 times in 4.
        nlohmann::json bias = nlohmann::json::object();
        for (int k = 1; k <= kTokens; ++k) bias[std::to_string(p.back() + k)] = -11;
        const nlohmann::json body = {{"prompt", p}, {"max_tokens", kTokens}, {"temperature", 1}, {"top_k", 2},
                                     {"logit_bias", bias}, {"seed", 7000 + i}};
        const SpecReply r = spec_complete(port, body);
        if (const std::string problem = r.problem(i); !problem.empty()) {
          ADD_FAILURE() << problem;
          continue;
        }
        const std::string& text = r.text;
        (*texts)[static_cast<std::size_t>(i)] = text;
        int m = 0;
        while (m < kTokens && text.rfind(oracle().expected_text_after(p.back(), m + 1), 0) == 0) ++m;
        lengths[static_cast<std::size_t>(i)] = m;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  *m = metrics(d);
  return lengths;
}

TEST(UmadSpec, SeededSamplingKeepsTheTargetDistribution) {
  constexpr int kSeeds = kSanitized ? 80 : 320;  // the tolerance below follows the count
  std::vector<std::string> with_texts, without_texts;
  nlohmann::json m, m_off;
  const std::vector<int> with = run_lengths({"--speculative", "lookup", "--speculative-force"}, kSeeds, &with_texts, &m);
  const std::vector<int> without = run_lengths({"--speculative", "off"}, kSeeds, &without_texts, &m_off);
  EXPECT_GT(m.value("spec_accepted_total", 0.0), 0.0) << "drafts were verified and taken";
  EXPECT_LT(m.value("spec_accepted_total", 0.0), m.value("spec_drafted_total", 0.0)) << "and rejected";
  ASSERT_EQ(with.size(), static_cast<std::size_t>(kSeeds));
  ASSERT_EQ(without.size(), static_cast<std::size_t>(kSeeds));
  // Per position m: the share of outputs that still follow the passage after m tokens.
  int same = 0;
  for (int i = 0; i < kSeeds; ++i) {
    ASSERT_GE(with[static_cast<std::size_t>(i)], 0) << "request " << i << " failed";
    ASSERT_GE(without[static_cast<std::size_t>(i)], 0) << "request " << i << " failed";
    same += with_texts[static_cast<std::size_t>(i)] == without_texts[static_cast<std::size_t>(i)];
  }
  double mean_with = 0, mean_without = 0;
  for (int m = 1; m <= 12; ++m) {
    const double a = static_cast<double>(std::count_if(with.begin(), with.end(), [&](int l) { return l >= m; })) / kSeeds;
    const double b = static_cast<double>(std::count_if(without.begin(), without.end(), [&](int l) { return l >= m; })) / kSeeds;
    mean_with += a;
    mean_without += b;
    // Two independent binomial shares of one p: their difference has sd sqrt(2 p (1-p) / n).
    const double p = (a + b) / 2, sd = std::sqrt(2 * p * (1 - p) / kSeeds);
    EXPECT_LE(std::abs(a - b), 4 * sd + 0.01) << "position " << m << ": " << a << " with, " << b << " without";
  }
  std::printf("seeded sampling, %d seeds: mean run on the passage %.2f tokens with drafts, %.2f without; %d outputs "
              "identical; %.0f of %.0f draft tokens accepted\n", kSeeds, mean_with, mean_without, same,
              m.value("spec_accepted_total", 0.0), m.value("spec_drafted_total", 0.0));
  EXPECT_GT(mean_without, 1.0) << "the passage is the likelier path";
  EXPECT_LT(mean_without, 11.0) << "and not the only one: the test would not see a skewed sampler";
}

// A draft model agreeing with the oracle on none, half or all of the tokens (uma-mkmodel --agree):
// prompts with nothing to look up, 16 streams at once, every output exact. --draft-max 8: forced
// ticks of half the default's rows (the 0% draft's 40 ticks are this file's heaviest work), the
// same cases. Streamed, so that the hang guard runs from each stream's last bytes.
TEST(UmadSpec, DraftModelsAgreeingNoneHalfOrAllLeaveSixteenStreamsExact) {
  for (const std::string share : {"0", "50", "100"}) {
    Daemon d(http_args({"--max-sessions", "16", "--draft-model", model_path("oracle-draft-" + share + ".gguf"),
                        "--speculative-force", "--draft-max", "8"}));
    ASSERT_TRUE(d.started()) << d.log();
    EXPECT_NE(d.log().find("draft model:"), std::string::npos) << d.log();
    const int port = http_port(d);
    std::vector<SpecReply> replies(16);
    std::vector<std::thread> threads;
    for (int k = 0; k < 16; ++k) {
      threads.emplace_back([&, k] {
        const nlohmann::json body = {{"prompt", "count " + std::to_string(k)}, {"max_tokens", 40}, {"stream", true}};
        replies[static_cast<std::size_t>(k)] = spec_complete(port, body);
      });
    }
    for (std::thread& t : threads) t.join();
    for (int k = 0; k < 16; ++k) {
      expect_spec_completion(replies[static_cast<std::size_t>(k)], k, oracle().expected_text("count " + std::to_string(k), 40),
                        share + "% draft");
    }
    const auto m = metrics(d);
    const double drafted = m.value("spec_drafted_total", 0.0), accepted = m.value("spec_accepted_total", 0.0);
    std::printf("draft agreeing on %s%%: %.0f of %.0f draft tokens accepted\n", share.c_str(), accepted, drafted);
    // The draft model's costs were measured (what the plan weighs when speculation is not forced).
    EXPECT_GT(m.value("spec_draft_step_ms", 0.0), 0.0) << share;
    EXPECT_GT(m.value("spec_draft_call_ms", 0.0), 0.0) << share;
    EXPECT_GT(drafted, 0.0);
    if (share == "0") { EXPECT_EQ(accepted, 0.0); }
    if (share == "100") { EXPECT_EQ(accepted, drafted); }
    if (share == "50") {  // 8 drafted a tick (forced), of which about one is accepted
      EXPECT_GT(accepted, 0.0);
      EXPECT_LT(accepted, 0.5 * drafted);
    }
    EXPECT_EQ(m.value("kv_tokens_used", -1.0), 0.0);
  }
}

TEST(UmadSpec, ADraftModelOfAnotherVocabularyIsRefusedAtStart) {
  Daemon d(http_args({"--draft-model", model_path("tiny-gpt2-vocab-f16.gguf")}));
  EXPECT_FALSE(d.started());
  EXPECT_NE(d.log().find("another vocabulary"), std::string::npos) << d.log();
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

TEST(UmadSpec, APredictedOutputIsVerifiedAndTheUsageSaysWhatWasAccepted) {
  Daemon d(http_args({"--speculative", "lookup", "--speculative-force"}));
  ASSERT_TRUE(d.started()) << d.log();
  const int port = http_port(d);
  // Token ids with nothing to look up: every draft comes from the prediction.
  const std::vector<std::int32_t> p = {5000, 7000, 9000};
  const std::string expected = oracle().expected_text_after(9000, 24);
  auto ask = [&](const nlohmann::json& extra) {
    nlohmann::json body = {{"prompt", p}, {"max_tokens", 24}, {"temperature", 0}};
    if (extra.is_object()) body.update(extra);
    Tcp t(port);
    EXPECT_TRUE(t.send(post("/v1/completions", body.dump())));
    return t.response();
  };
  const std::string plain = ask(nlohmann::json::object());
  ASSERT_EQ(status_of(plain), 200) << plain;
  EXPECT_EQ(nlohmann::json::parse(body_of(plain))["choices"][0]["text"], expected);
  EXPECT_FALSE(nlohmann::json::parse(body_of(plain))["usage"].contains("completion_tokens_details"));
  EXPECT_EQ(metrics(d).value("spec_drafted_total", -1.0), 0.0);
  // The expected text as OpenAI's prediction (its tokenization need not be the generated ids:
  // drafts are verified, the output is the one without them).
  const nlohmann::json part = {{"type", "text"}, {"text", expected}};
  const nlohmann::json prediction = {{"type", "content"}, {"content", nlohmann::json::array({part})}};
  const std::string with = ask(nlohmann::json{{"prediction", prediction}});
  ASSERT_EQ(status_of(with), 200) << with;
  const auto j = nlohmann::json::parse(body_of(with));
  EXPECT_EQ(j["choices"][0]["text"], expected);
  ASSERT_TRUE(j["usage"].contains("completion_tokens_details")) << with;
  const auto& details = j["usage"]["completion_tokens_details"];
  const double drafted = metrics(d).value("spec_drafted_total", -1.0);
  EXPECT_GT(drafted, 0.0);
  EXPECT_EQ(details["accepted_prediction_tokens"].get<double>() + details["rejected_prediction_tokens"].get<double>(), drafted);
  EXPECT_EQ(metrics(d).value("kv_tokens_used", -1.0), 0.0);
  const nlohmann::json image = {{"type", "image"}};
  for (const nlohmann::json& bad : {nlohmann::json{{"type", "text"}, {"content", "x"}}, nlohmann::json{{"type", "content"}, {"content", 7}},
                                    nlohmann::json{{"type", "content"}, {"content", nlohmann::json::array({image})}}}) {
    const std::string r = ask(nlohmann::json{{"prediction", bad}});
    EXPECT_EQ(status_of(r), 400) << r;
    EXPECT_NE(r.find("prediction"), std::string::npos) << r;
  }
}

}  // namespace
}  // namespace uma::test
