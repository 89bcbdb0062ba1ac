// The gateway and the model catalog (cluster/model_catalog.h), real processes: /v1/models lists
// the catalog beside what the agents serve; once the cluster has a catalog, a model that is
// neither served nor in it is a 404 in OpenAI's shape, and one only in the catalog (loaded
// nowhere) a 503 until agents load on demand. A cluster without a catalog routes any name to its
// agents, as one llama-server accepts any model name. Each catalog model is tokenized and its chat
// rendered with its own vocabulary (gateway/vocab_cache.h), loaded from the catalog on first use.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "serve/chat_types.h"
#include "cluster/model_catalog.h"
#include "e2e/cluster_harness.h"
#include "gateway/vocab_cache.h"
#include "e2e/http_client.h"
#include "e2e/oracle.h"

namespace uma::test {
namespace {

using json = nlohmann::json;

std::string complete_as(int port, const std::string& model) {
  Tcp t(port);
  EXPECT_TRUE(t.send(post("/v1/completions", json({{"model", model}, {"prompt", "the river"}, {"max_tokens", 6}}).dump())));
  return t.response();
}

TEST(ClusterCatalog, UnknownModelsAre404sWithOrWithoutACatalogWhichModelsLists) {
  LocalCluster c;
  ASSERT_TRUE(c.up(1, 1)) << (c.gateways.empty() ? "" : c.gateways[0]->log());
  ASSERT_TRUE(c.all_live(1));
  const int port = c.gateways[0]->port();
  // No catalog yet: a name no agent serves is a 404 all the same; the served file's stem finds it.
  std::string r = complete_as(port, "gpt-4o");
  EXPECT_EQ(status_of(r), 404) << r;
  r = complete_as(port, "oracle");
  ASSERT_EQ(status_of(r), 200) << r;
  EXPECT_EQ(json::parse(body_of(r))["choices"][0]["text"], oracle().expected_text("the river", 6));

  store::Manifest m;
  ASSERT_TRUE(store::build_manifest(model_path("oracle.gguf"), "oracle-cold", 1 << 20, 2, &m).ok());
  cluster::RedisClient rc(c.redis.cluster_address(), kHangGuard);
  ASSERT_TRUE(cluster::catalog_put(rc, m, "").ok());
  ASSERT_TRUE(eventually([&] { return http_get(port, "/v1/models").find("oracle-cold") != std::string::npos; }, "the catalog model listed"))
      << http_get(port, "/v1/models");
  const json models = json::parse(body_of(http_get(port, "/v1/models")));
  std::vector<std::string> ids;
  for (const json& e : models["data"]) ids.push_back(e["id"]);
  EXPECT_EQ(ids, (std::vector<std::string>{"oracle-cold", "oracle.gguf"}));

  r = complete_as(port, "gpt-4o");
  EXPECT_EQ(status_of(r), 404) << r;
  const json err = json::parse(body_of(r))["error"];
  EXPECT_EQ(err["code"], "model_not_found");
  EXPECT_EQ(err["type"], "invalid_request_error");
  EXPECT_EQ(err["param"], "model");
  EXPECT_NE(err["message"].get<std::string>().find("gpt-4o"), std::string::npos);
  r = complete_as(port, "oracle-cold");
  EXPECT_EQ(status_of(r), 503) << r;
  r = complete_as(port, "oracle.gguf");
  ASSERT_EQ(status_of(r), 200) << r;
  EXPECT_EQ(json::parse(body_of(r))["choices"][0]["text"], oracle().expected_text("the river", 6));
}

// `id` from `file` into the catalog, with its vocabulary unless told not to.
void put_model(cluster::RedisClient& rc, const std::string& file, const std::string& id, bool with_vocab = true) {
  store::Manifest m;
  ASSERT_TRUE(store::build_manifest(model_path(file), id, 1 << 20, 2, &m).ok());
  std::string vocab, hash;
  if (with_vocab) {
    ASSERT_TRUE(store::vocab_gguf(model_path(file), &vocab, &hash).ok());
  }
  ASSERT_TRUE(cluster::catalog_put(rc, m, "", vocab).ok());
}

std::vector<Token> tokens_of(const gateway::Vocabulary& v, const std::string& text) {
  std::vector<Token> out;
  EXPECT_TRUE(v.vocab->tokenize(text, out, false).ok());
  return out;
}

TEST(ClusterCatalog, EachModelIsTokenizedWithItsOwnVocabularyLoadedFromTheCatalogLeastRecentlyUsedOut) {
  RedisServer redis;
  ASSERT_TRUE(redis.start());
  const cluster::RedisAddress addr = redis.cluster_address();
  cluster::RedisClient rc(addr, kHangGuard);
  put_model(rc, "oracle.gguf", "plain");
  put_model(rc, "oracle-qwen25-template.gguf", "qwen");
  put_model(rc, "tiny-nobos-f16.gguf", "nobos");

  // The catalog as the gateway's Redis reader hands it over.
  const auto catalog = [&rc] {
    std::vector<cluster::CatalogModel> models;
    EXPECT_TRUE(cluster::catalog_list(rc, &models).ok());
    std::unordered_map<std::string, std::string> vocab_of;
    for (const cluster::CatalogModel& m : models) vocab_of[m.id] = m.vocab_hash;
    return vocab_of;
  };
  gateway::VocabCache::Options o;
  o.capacity = 1;
  Status st;
  gateway::VocabCache cache(o, addr, nullptr);
  cache.set_catalog(catalog());
  std::shared_ptr<const gateway::Vocabulary> plain = cache.get("plain", &st);
  ASSERT_TRUE(plain) << st.to_string();
  std::shared_ptr<const gateway::Vocabulary> nobos = cache.get("nobos", &st);
  ASSERT_TRUE(nobos) << st.to_string();
  EXPECT_NE(plain->hash, nobos->hash);
  const std::vector<Token> with_bos = tokens_of(*plain, "the river"), without = tokens_of(*nobos, "the river");
  ASSERT_EQ(with_bos.size(), without.size() + 1);
  EXPECT_EQ(std::vector<Token>(with_bos.begin() + 1, with_bos.end()), without);
  EXPECT_EQ(cache.stats().loads, 2u);
  EXPECT_EQ(cache.stats().evictions, 1u) << "capacity 1";
  EXPECT_EQ(tokens_of(*plain, "x").front(), with_bos.front()) << "a request's entry outlives its eviction";
  ASSERT_TRUE(cache.get("nobos", &st));
  EXPECT_EQ(cache.stats().hits, 1u);
  ASSERT_TRUE(cache.get("plain", &st));
  EXPECT_EQ(cache.stats().loads, 3u) << "evicted, so loaded again";

  // Chat renders with each model's own template: the Qwen one's, or (the oracle has none) chatml as
  // umad falls back to, without the Qwen template's default system prompt.
  ChatRequest chat;
  chat.turns.push_back({"user", "hi"});
  ChatPrompt prompt;
  std::shared_ptr<const gateway::Vocabulary> qwen = cache.get("qwen", &st);
  ASSERT_TRUE(qwen) << st.to_string();
  ASSERT_TRUE(qwen->render(chat, &prompt).ok());
  EXPECT_NE(prompt.text.find("<|im_start|>user\nhi<|im_end|>"), std::string::npos) << prompt.text;
  ASSERT_TRUE(plain->render(chat, &prompt).ok());
  EXPECT_EQ(prompt.text, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");

  EXPECT_FALSE(cache.get("gpt-4o", &st));
  EXPECT_EQ(st.code(), ErrorCode::kNotFound);
  EXPECT_EQ(st.param(), "model");
  // A catalog written without vocabularies (an older uma-store): a clear error, not a crash.
  ASSERT_TRUE(rc.command({"DEL", "uma:vocab:" + nobos->hash}).ok());
  put_model(rc, "tiny-nobos-f16.gguf", "novocab", false);
  cache.set_catalog(catalog());
  EXPECT_FALSE(cache.get("novocab", &st));
  EXPECT_EQ(st.code(), ErrorCode::kUnavailable);
  EXPECT_NE(st.message().find("uma-store add"), std::string::npos) << st.message();

  // The same id re-added from another file: seen with the next view of the catalog.
  put_model(rc, "tiny-nobos-f16.gguf", "plain");
  ASSERT_TRUE((plain = cache.get("plain", &st)));
  EXPECT_EQ(tokens_of(*plain, "the river"), with_bos) << "until the next view";
  cache.set_catalog(catalog());
  ASSERT_TRUE((plain = cache.get("plain", &st)));
  EXPECT_EQ(tokens_of(*plain, "the river"), without);

  // Outside the catalog: the fallback (uma-gw --model); catalog models of its vocabulary share it.
  std::shared_ptr<const gateway::Vocabulary> fallback = gateway::open_vocabulary(model_path("oracle.gguf"), "", &st);
  ASSERT_TRUE(fallback) << st.to_string();
  gateway::VocabCache with_fallback(o, addr, fallback);
  EXPECT_EQ(with_fallback.get("gpt-4o", &st), fallback);
  put_model(rc, "oracle.gguf", "plain");
  with_fallback.set_catalog(catalog());
  EXPECT_EQ(with_fallback.get("plain", &st), fallback);
  EXPECT_EQ(with_fallback.stats().loads, 0u);
}

TEST(ClusterCatalog, TheGatewayRendersChatWithTheTemplateOfTheModelAsked) {
  RedisServer redis;
  ASSERT_TRUE(redis.start());
  cluster::RedisClient rc(redis.cluster_address(), kHangGuard);
  put_model(rc, "oracle-qwen25-template.gguf", "qwen");
  put_model(rc, "oracle.gguf", "plain");
  Daemon agent({"--http", "127.0.0.1:0", "--agent", "--redis", redis.address(), "--alias", "qwen"},
               "oracle-qwen25-template.gguf");
  ASSERT_TRUE(agent.started()) << agent.log();
  Gateway gw(redis.address(), {"--model", "", "--chat-template", ""});  // no vocabulary but the catalog's
  ASSERT_TRUE(gw.started()) << gw.log();
  ASSERT_TRUE(eventually([&] { return json::parse(body_of(http_get(gw.port(), "/health")), nullptr, false).value("live", 0) == 1; },
                         "the agent live in the gateway's view"))
      << gw.log();

  const auto chat = [](int port, const std::string& model) {
    Tcp t(port);
    EXPECT_TRUE(t.send(post("/v1/chat/completions",
                            json({{"model", model}, {"messages", {{{"role", "user"}, {"content", "the river"}}}}, {"max_tokens", 6}}).dump())));
    return t.response();
  };
  const std::string direct = chat(http_port(agent), "qwen");
  ASSERT_EQ(status_of(direct), 200) << direct;
  for (int i = 0; i < 2; ++i) {
    const std::string r = chat(gw.port(), "qwen");
    ASSERT_EQ(status_of(r), 200) << r << gw.log();
    EXPECT_EQ(json::parse(body_of(r))["choices"][0]["message"]["content"],
              json::parse(body_of(direct))["choices"][0]["message"]["content"]);
  }
  // In the catalog, its vocabulary without a template: rendered with chatml as umad would (not
  // refused), then unavailable: no agent has it loaded.
  const std::string r = chat(gw.port(), "plain");
  EXPECT_EQ(status_of(r), 503) << r;
  EXPECT_NE(r.find("no agent has it loaded"), std::string::npos) << r;
  EXPECT_EQ(status_of(complete_as(gw.port(), "gpt-4o")), 404);
  const std::string metrics = body_of(http_get(gw.port(), "/metrics"));
  EXPECT_EQ(prometheus_value(metrics, "uma_gw_vocab_loads_total"), 2) << metrics;
  EXPECT_EQ(prometheus_value(metrics, "uma_gw_vocab_hits_total"), 1);
  EXPECT_EQ(prometheus_value(metrics, "uma_gw_vocabularies"), 2);
}

}  // namespace
}  // namespace uma::test
