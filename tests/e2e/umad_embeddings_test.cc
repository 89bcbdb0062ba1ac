// End to end: POST /v1/embeddings from a second context on the loaded weights (mean-pooled: the
// oracle is a generative model), batched between decode ticks.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <thread>

#include "common/base64.h"
#include "e2e/daemon_harness.h"
#include "e2e/http_client.h"
#include "e2e/json_helpers.h"
#include "e2e/oracle.h"

namespace uma::test {
namespace {

using json = nlohmann::json;

json embed(Tcp& t, const json& body, int want = 200) {
  EXPECT_TRUE(t.send(post("/v1/embeddings", body.dump())));
  const std::string r = t.response();
  EXPECT_EQ(status_of(r), want) << body.dump() << " -> " << r.substr(0, 400);
  return json::parse(body_of(r), nullptr, false);
}

std::vector<float> vec(const json& j, std::size_t i = 0) { return j["data"][i]["embedding"].get<std::vector<float>>(); }

double cosine(const std::vector<float>& a, const std::vector<float>& b) {
  double ab = 0, aa = 0, bb = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    ab += double(a[i]) * b[i];
    aa += double(a[i]) * a[i];
    bb += double(b[i]) * b[i];
  }
  return ab / std::sqrt(aa * bb);
}

std::vector<float> from_base64(const std::string& s) {
  std::string bytes;
  EXPECT_TRUE(base64_decode(s, &bytes));
  std::vector<float> out(bytes.size() / sizeof(float));
  std::memcpy(out.data(), bytes.data(), out.size() * sizeof(float));
  return out;
}

TEST(UmadEmbeddings, UnitVectorsSameInputSameVectorBatchEqualsSingle) {
  Daemon d(http_args({}));
  ASSERT_TRUE(d.started()) << d.log();
  Tcp t(http_port(d));
  const json one = embed(t, {{"model", "oracle"}, {"input", "the river runs"}});
  ASSERT_EQ(one["object"], "list") << one.dump().substr(0, 300);
  const std::vector<float> a = vec(one);
  ASSERT_EQ(a.size(), 256u) << "the oracle's width";
  double norm = 0;
  for (float x : a) norm += double(x) * x;
  EXPECT_NEAR(norm, 1.0, 1e-5) << "normalised";
  EXPECT_EQ(one["usage"]["prompt_tokens"], oracle().tokenize("the river runs").size());
  // The same text again, alone and in a batch with others.
  EXPECT_EQ(vec(embed(t, {{"input", "the river runs"}})), a) << "same input, same vector";
  const json batch = embed(t, {{"input", {"hello world", "the river runs", "a b c"}}});
  ASSERT_EQ(batch["data"].size(), 3u);
  EXPECT_EQ(batch["data"][1]["index"], 1);
  EXPECT_GT(cosine(vec(batch, 1), a), 0.9999) << "batch equals single (within llama.cpp's batch variance)";
  EXPECT_LT(cosine(vec(batch, 0), a), 0.9999) << "different texts differ";
  // Token ids as input: the text's own tokens give its vector.
  const json ids = embed(t, {{"input", oracle().tokenize("the river runs")}});
  EXPECT_GT(cosine(vec(ids), a), 0.9999);
  // base64: the same floats.
  const json b64 = embed(t, {{"input", "the river runs"}, {"encoding_format", "base64"}});
  EXPECT_EQ(from_base64(b64["data"][0]["embedding"].get<std::string>()), a);
  // dimensions: only the model's own.
  embed(t, {{"input", "x"}, {"dimensions", 256}});
  EXPECT_EQ(embed(t, {{"input", "x"}, {"dimensions", 64}}, 400)["error"]["param"], "dimensions");
  EXPECT_EQ(embed(t, {{"input", json::array()}}, 400)["error"]["param"], "input");
  EXPECT_EQ(embed(t, {{"input", {99999999}}}, 400)["error"]["param"], "input");
  std::string too_long;
  for (int i = 0; i < 5000; ++i) too_long += " hello";
  embed(t, {{"input", too_long}}, 400);  // over the embeddings context (the trained 4096)
  // Those the scheduler saw (the router refused `dimensions` 64 and the empty input itself).
  EXPECT_EQ(metrics(d)["embedding_requests_total"].get<int>(), 8);
}

// --max-tx-kib bounds how far a reader may fall behind, not how large one whole reply may be.
TEST(UmadEmbeddings, AReplyLargerThanTheTxCapIsSentWhole) {
  Daemon d(http_args({"--max-tx-kib", "4"}));
  ASSERT_TRUE(d.started()) << d.log();
  Tcp t(http_port(d));
  json inputs = json::array();
  for (int i = 0; i < 8; ++i) inputs.push_back("text number " + std::to_string(i));
  const json batch = embed(t, {{"input", inputs}});
  ASSERT_EQ(batch["data"].size(), 8u);
  EXPECT_GT(batch.dump().size(), 4u * 1024) << "the reply is over the cap";
  EXPECT_EQ(vec(batch, 7).size(), 256u);
}

// An embeddings burst while a stream decodes: the stream stays exact and every embedding is
// served (how long the stream's tokens wait is measured by bench/embeddings.sh, not asserted).
TEST(UmadEmbeddings, ABurstBesideADecodeStreamLeavesTheStreamExact) {
  Daemon d(http_args({"--max-tokens", "300"}));
  ASSERT_TRUE(d.started()) << d.log();
  const int port = http_port(d);
  std::string text = "<no response>";
  std::thread stream([&] {
    Tcp s(port);
    if (!s.send(post("/v1/completions", json({{"prompt", "hello world"}, {"max_tokens", 300}}).dump()))) return;
    const std::string r = s.response();
    const json j = json::parse(body_of(r), nullptr, false);
    text = !j.is_discarded() && j.contains("choices") ? j["choices"][0]["text"].get<std::string>() : "<" + r + ">";
  });
  // The burst comes once the stream decodes.
  const bool decoding = static_cast<bool>(
      eventually([&] { return metrics(d)["tokens_generated_total"].get<int>() > 0; }, "the stream to decode"));
  Tcp t(port);
  json inputs = json::array();
  for (int i = 0; i < 16; ++i) inputs.push_back("passage number " + std::to_string(i) + " about rivers and stones");
  for (int k = 0; k < 10; ++k) EXPECT_EQ(embed(t, {{"input", inputs}})["data"].size(), 16u);
  stream.join();
  EXPECT_TRUE(decoding) << "timed out waiting for the stream to decode";
  EXPECT_EQ(text, oracle().expected_text("hello world", 300));
}

}  // namespace
}  // namespace uma::test
