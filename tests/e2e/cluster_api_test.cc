// What a gateway relays to the agent serving a model rather than answering itself (it holds no
// weights): embeddings (OpenAI's and Ollama's), reranking, /infill and Ollama's /api/show, each
// against the same request sent straight to that agent; errors in each API's own shape; and
// images through the gateway to an agent with a vision projector, the agent's own answer exactly,
// a body of several MiB through and one over the gateway's cap refused with a 413.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "common/base64.h"
#include "e2e/cluster_harness.h"
#include "e2e/http_client.h"
#include "e2e/json_helpers.h"
#include "e2e/openai_sdk_run.h"
#include "e2e/oracle.h"
#include "e2e/test_images.h"

namespace uma::test {
namespace {

using json = nlohmann::json;

struct GwAnswer {
  int status = -1;
  json body;
  std::string raw;  // the response's body as it came (dechunked)
  std::string head;
};

GwAnswer gw_call(int port, const std::string& path, const std::string& body) {
  Tcp t(port);
  GwAnswer a;
  if (!t.send(post(path, body))) return a;
  const std::string r = t.response();
  a.status = status_of(r);
  a.head = head_of(r);
  a.raw = head_of(r).find("chunked") != std::string::npos ? dechunk(body_of(r)) : body_of(r);
  a.body = json::parse(a.raw, nullptr, false);
  return a;
}

// The largest difference between two arrays of vectors of floats (99 when their shapes differ).
double farthest_apart(const json& a, const json& b) {
  if (!a.is_array() || !b.is_array() || a.size() != b.size()) return 99;
  double d = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i].is_array()) {
      d = std::max(d, farthest_apart(a[i], b[i]));
    } else {
      d = std::max(d, std::fabs(a[i].get<double>() - b[i].get<double>()));
    }
  }
  return d;
}

json openai_vectors(const json& j) {
  json out = json::array();
  if (j.is_object() && j.contains("data")) {
    for (const json& d : j["data"]) out.push_back(d["embedding"]);
  }
  return out;
}

// A cluster of one gateway and one agent per model (the file's stem names it).
bool cluster_of(LocalCluster& c, const std::vector<std::pair<std::string, std::vector<std::string>>>& agents,
             std::vector<std::string> gateway_extra = {}) {
  if (!c.redis.start()) return false;
  for (const auto& [model, extra] : agents) {
    if (!c.add_agent(model, extra)) return false;
  }
  c.gateways.push_back(std::make_unique<Gateway>(c.redis.address(), std::move(gateway_extra)));
  return c.gateways.back()->started() && c.all_live(agents.size());
}

TEST(ClusterApi, EmbeddingsRerankInfillAndShowGoToTheAgentServingTheModel) {
  LocalCluster c;
  ASSERT_TRUE(cluster_of(c, {{"oracle-fim.gguf", {}}, {"tiny-rerank-f32.gguf", {}}}))
      << (c.gateways.empty() ? "" : c.gateways[0]->log());
  const int gw = c.gateways[0]->port(), fim = c.agent_port(0), ranker = c.agent_port(1);

  // Embeddings, OpenAI's (both paths) and Ollama's (both): the agent's own vectors.
  const std::string e = json{{"model", "oracle-fim"}, {"input", {"hello world", "goodbye"}}}.dump();
  const GwAnswer direct = gw_call(fim, "/v1/embeddings", e);
  ASSERT_EQ(direct.status, 200) << direct.raw;
  for (const char* path : {"/v1/embeddings", "/embeddings"}) {
    const GwAnswer a = gw_call(gw, path, e);
    ASSERT_EQ(a.status, 200) << path << " " << a.raw;
    EXPECT_LT(farthest_apart(openai_vectors(a.body), openai_vectors(direct.body)), 1e-5) << path;
  }
  const std::string oe = json{{"model", "oracle-fim"}, {"input", {"hello world", "goodbye"}}}.dump();
  const GwAnswer od = gw_call(fim, "/api/embed", oe), og = gw_call(gw, "/api/embed", oe);
  ASSERT_EQ(og.status, 200) << og.raw;
  EXPECT_EQ(og.body["model"], "oracle-fim");
  EXPECT_LT(farthest_apart(og.body["embeddings"], od.body["embeddings"]), 1e-5);
  const std::string legacy = json{{"model", "oracle-fim"}, {"prompt", "hello world"}}.dump();
  const GwAnswer ol = gw_call(gw, "/api/embeddings", legacy);
  ASSERT_EQ(ol.status, 200) << ol.raw;
  EXPECT_LT(farthest_apart(ol.body["embedding"], od.body["embeddings"][0]), 1e-5);

  // Ollama's /api/show: what the agent tells of its model, through either.
  const std::string show = json{{"model", "oracle-fim"}}.dump();
  const GwAnswer sg = gw_call(gw, "/api/show", show);
  ASSERT_EQ(sg.status, 200) << sg.raw;
  EXPECT_EQ(sg.body, gw_call(fim, "/api/show", show).body);

  // llama-server's /infill on the model with FIM tokens: the oracle's tokens after MID (6), whole
  // and streamed.
  json infill = {{"model", "oracle-fim"}, {"input_prefix", "def area(r):\n    return"}, {"input_suffix", "\nprint(area(2))"},
                 {"n_predict", 4}};
  const GwAnswer ig = gw_call(gw, "/infill", infill.dump());
  ASSERT_EQ(ig.status, 200) << ig.raw;
  EXPECT_EQ(ig.body["content"], std::string("\x04\x05\x06\x07"));
  EXPECT_EQ(ig.body["tokens_evaluated"], gw_call(fim, "/infill", infill.dump()).body["tokens_evaluated"]);
  infill["stream"] = true;
  const GwAnswer is = gw_call(gw, "/infill", infill.dump());
  ASSERT_EQ(is.status, 200) << is.raw;
  std::string streamed;
  for (std::size_t at = is.raw.find("data: "); at != std::string::npos; at = is.raw.find("data: ", at + 1)) {
    const json ev = json::parse(is.raw.substr(at + 6, is.raw.find('\n', at) - at - 6), nullptr, false);
    if (ev.is_object()) streamed += ev.value("content", "");
  }
  EXPECT_EQ(streamed, std::string("\x04\x05\x06\x07")) << is.raw;

  // Ollama's generate with a suffix is the same fill in the middle (the model's FIM tokens are the
  // agent's): the agent's own answer, whole and as NDJSON lines.
  json gen = {{"model", "oracle-fim"}, {"prompt", "def area(r):\n    return"}, {"suffix", "\nprint(area(2))"},
              {"stream", false}, {"options", {{"num_predict", 4}}}};
  const GwAnswer gg = gw_call(gw, "/api/generate", gen.dump()), gd = gw_call(fim, "/api/generate", gen.dump());
  ASSERT_EQ(gg.status, 200) << gg.raw;
  EXPECT_EQ(gg.body["response"], std::string("\x04\x05\x06\x07")) << gg.raw;
  EXPECT_EQ(gg.body["prompt_eval_count"], gd.body["prompt_eval_count"]);
  gen["stream"] = true;
  const GwAnswer gs = gw_call(gw, "/api/generate", gen.dump());
  ASSERT_EQ(gs.status, 200) << gs.raw;
  EXPECT_NE(gs.head.find("application/x-ndjson"), std::string::npos) << gs.head;
  std::string lines;
  bool done = false;
  for (std::size_t at = 0; at < gs.raw.size();) {
    const std::size_t end = std::min(gs.raw.find('\n', at), gs.raw.size());
    const json line = json::parse(gs.raw.substr(at, end - at), nullptr, false);
    if (line.is_object()) {
      lines += line.value("response", "");
      done = done || line.value("done", false);
    }
    at = end + 1;
  }
  EXPECT_EQ(lines, std::string("\x04\x05\x06\x07")) << gs.raw;
  EXPECT_TRUE(done) << gs.raw;

  // Reranking goes to the reranker's agent (by its name): its own scores, best first.
  const std::string r = json{{"model", "tiny-rerank-f32"}, {"query", "what is a river"},
                             {"documents", {"a river is water flowing to the sea", "cats sleep all day"}}}.dump();
  const GwAnswer rd = gw_call(ranker, "/v1/rerank", r);
  for (const char* path : {"/v1/rerank", "/rerank"}) {
    const GwAnswer rg = gw_call(gw, path, r);
    ASSERT_EQ(rg.status, 200) << path << " " << rg.raw;
    ASSERT_EQ(rg.body["results"].size(), 2u) << rg.raw;
    for (std::size_t k = 0; k < 2; ++k) {
      EXPECT_EQ(rg.body["results"][k]["index"], rd.body["results"][k]["index"]);
      EXPECT_NEAR(rg.body["results"][k]["relevance_score"].get<double>(), rd.body["results"][k]["relevance_score"].get<double>(), 1e-4);
    }
  }
  // The other model's agent cannot rank: its 501 is the answer (not a failure to retry elsewhere).
  const GwAnswer not_ranker = gw_call(gw, "/v1/rerank", json{{"model", "oracle-fim"}, {"query", "q"}, {"documents", {"d"}}}.dump());
  EXPECT_EQ(not_ranker.status, 501) << not_ranker.raw;
  EXPECT_EQ(not_ranker.body["error"]["type"], "not_supported_error") << not_ranker.raw;
}

// Errors the gateway writes itself keep the client's API: Ollama's {"error": "..."}, OpenAI's object.
TEST(ClusterApi, RelayedRequestsErrorsKeepTheirApisShape) {
  LocalCluster c;
  ASSERT_TRUE(cluster_of(c, {{"oracle.gguf", {}}})) << (c.gateways.empty() ? "" : c.gateways[0]->log());
  const int gw = c.gateways[0]->port();
  for (const char* path : {"/api/embed", "/api/show"}) {
    const GwAnswer unknown = gw_call(gw, path, R"({"model":"no-such-model","input":"x"})");
    EXPECT_EQ(unknown.status, 404) << path << " " << unknown.raw;
    ASSERT_TRUE(unknown.body.contains("error") && unknown.body["error"].is_string()) << unknown.raw;
    EXPECT_NE(unknown.body["error"].get<std::string>().find("no-such-model"), std::string::npos) << unknown.raw;
    const GwAnswer bad = gw_call(gw, path, "[1, 2");
    EXPECT_EQ(bad.status, 400) << bad.raw;
    EXPECT_TRUE(bad.body.contains("error") && bad.body["error"].is_string()) << bad.raw;
    const GwAnswer wrong = gw_call(gw, path, R"({"model": 7})");
    EXPECT_EQ(wrong.status, 400) << wrong.raw;
    EXPECT_TRUE(wrong.body["error"].is_string()) << wrong.raw;
  }
  for (const char* path : {"/v1/embeddings", "/v1/rerank", "/infill"}) {
    const GwAnswer unknown = gw_call(gw, path, R"({"model":"no-such-model","input":"x"})");
    EXPECT_EQ(unknown.status, 404) << path << " " << unknown.raw;
    EXPECT_EQ(unknown.body["error"]["param"], "model") << unknown.raw;
    const GwAnswer bad = gw_call(gw, path, "[1, 2");
    EXPECT_EQ(bad.status, 400) << bad.raw;
    EXPECT_EQ(bad.body["error"]["type"], "invalid_request_error") << bad.raw;
  }
  // The agent's own refusals come back as it wrote them (Ollama's shape from its /api/embed).
  const GwAnswer no_input = gw_call(gw, "/api/embed", R"({"model":"oracle"})");
  EXPECT_EQ(no_input.status, 400) << no_input.raw;
  EXPECT_TRUE(no_input.body["error"].is_string()) << no_input.raw;
  const GwAnswer ok = gw_call(gw, "/api/embed", R"({"model":"oracle","input":"still serving"})");
  EXPECT_EQ(ok.status, 200) << ok.raw;
}


// A photo's size: 1280 x 1024 pixels, 3.75 MiB as a BMP, 5 MiB as base64 (over the gateway's old
// 1 MiB body cap and its 4 MiB of unsent bytes to an agent).
const std::string& large_picture() {
  static const std::string b = bmp(1280, 1024, [](int x, int y) {
    return Rgb{static_cast<unsigned char>(x / 5), static_cast<unsigned char>(y / 4), static_cast<unsigned char>((x ^ y) & 0xFF)};
  });
  return b;
}

json picture_chat(const std::string& image, bool stream) {
  return {{"messages", {{{"role", "user"}, {"content", {{{"type", "text"}, {"text", "what is in the picture"}},
                                                       {{"type", "image_url"}, {"image_url", {{"url", data_url(image)}}}}}}}}},
          {"max_tokens", 8}, {"temperature", 0}, {"logprobs", true}, {"stream", stream}};
}

// The generated tokens' texts of a chat answer, whole or streamed (SSE).
std::vector<std::string> chat_tokens(const GwAnswer& a) {
  std::vector<std::string> out;
  const auto take = [&](const json& choice) {
    if (!choice.contains("logprobs") || !choice["logprobs"].is_object()) return;
    for (const json& t : choice["logprobs"]["content"]) out.push_back(t["token"].get<std::string>());
  };
  if (a.body.is_object()) {
    take(a.body["choices"][0]);
    return out;
  }
  for (std::size_t at = a.raw.find("data: {"); at != std::string::npos; at = a.raw.find("data: {", at + 1)) {
    const json ev = json::parse(a.raw.substr(at + 6, a.raw.find('\n', at) - at - 6), nullptr, false);
    if (ev.is_object() && ev.contains("choices") && !ev["choices"].empty()) take(ev["choices"][0]);
  }
  return out;
}

// Greedy, one request at a time, no prefix cache (a cached prefix changes the prefill's batches):
// what the agent answers through the gateway is token for token what it answers straight.
TEST(ClusterApi, ImagesThroughTheGatewayGetTheAgentsOwnAnswer) {
  LocalCluster c;
  ASSERT_TRUE(cluster_of(c, {{"tiny-vision-f16.gguf", {"--mmproj", model_path("tiny-vision-mmproj.gguf"), "--no-prefix-cache"}}},
                         {"--model", model_path("tiny-vision-f16.gguf")}))
      << (c.gateways.empty() ? "" : c.gateways[0]->log());
  const int gw = c.gateways[0]->port(), agent = c.agent_port(0);
  const std::string small = bmp(40, 30, [](int x, int y) { return Rgb{static_cast<unsigned char>(x * 6), static_cast<unsigned char>(y * 8), 128}; });
  for (const std::string* image : {&small, &large_picture()}) {
    const GwAnswer direct = gw_call(agent, "/v1/chat/completions", picture_chat(*image, false).dump());
    ASSERT_EQ(direct.status, 200) << direct.raw.substr(0, 500);
    const std::vector<std::string> tokens = chat_tokens(direct);
    ASSERT_EQ(tokens.size(), 8u) << direct.raw.substr(0, 500);
    const GwAnswer whole = gw_call(gw, "/v1/chat/completions", picture_chat(*image, false).dump());
    ASSERT_EQ(whole.status, 200) << whole.raw.substr(0, 500);
    EXPECT_EQ(whole.body["choices"][0]["message"]["content"], direct.body["choices"][0]["message"]["content"]);
    EXPECT_EQ(chat_tokens(whole), tokens) << "image of " << image->size() << " bytes";
    EXPECT_EQ(whole.body["usage"]["prompt_tokens"], direct.body["usage"]["prompt_tokens"]);
    const GwAnswer streamed = gw_call(gw, "/v1/chat/completions", picture_chat(*image, true).dump());
    ASSERT_EQ(streamed.status, 200) << streamed.raw.substr(0, 500);
    EXPECT_EQ(chat_tokens(streamed), tokens) << "streamed, image of " << image->size() << " bytes";
  }
  // Ollama's chat with `images` (base64): the same reply through the gateway as straight.
  const json ollama = {{"model", "tiny-vision-f16"}, {"stream", false}, {"options", {{"num_predict", 8}, {"temperature", 0}}},
                       {"messages", {{{"role", "user"}, {"content", "what is in the picture"}, {"images", {base64_encode(large_picture())}}}}}};
  const GwAnswer od = gw_call(agent, "/api/chat", ollama.dump()), og = gw_call(gw, "/api/chat", ollama.dump());
  ASSERT_EQ(od.status, 200) << od.raw.substr(0, 500);
  ASSERT_EQ(og.status, 200) << og.raw.substr(0, 500);
  EXPECT_EQ(og.body["message"]["content"], od.body["message"]["content"]);
  EXPECT_EQ(og.body["eval_count"], 8);
  EXPECT_EQ(og.body["prompt_eval_count"], od.body["prompt_eval_count"]);
}

// An unforced tool call through the gateway: Ollama's chat re-encoded from the agent's OpenAI
// stream, the model's own call seen by the official client as message.tool_calls.
TEST(ClusterApi, TheOllamaNodeSdkSeesAnUnforcedToolCallThroughTheGateway) {
  if (!node_sdks_available()) GTEST_SKIP() << "no node or the ollama library here (scripts/npm_deps.sh)";
  LocalCluster c;
  ASSERT_TRUE(c.redis.start());
  // The model's own template (Qwen 2.5's) on both sides, not the harness's chatml.
  c.agents.push_back(std::make_unique<Daemon>(args({"--agent", "--redis", c.redis.address(), "--threads", "1", "--http", "127.0.0.1:0"}),
                                              "oracle-tool-call.gguf"));
  ASSERT_TRUE(c.agents.back()->started()) << c.agents.back()->log();
  c.gateways.push_back(std::make_unique<Gateway>(c.redis.address(), std::vector<std::string>{
      "--model", model_path("oracle-tool-call.gguf"), "--chat-template", ""}));
  ASSERT_TRUE(c.gateways.back()->started() && c.all_live(1)) << c.gateways.back()->log();
  std::string out;
  EXPECT_EQ(run_ollama_tools_test(c.gateways[0]->url(), "oracle-tool-call", &out), 0) << out;
  EXPECT_NE(out.find("ollama tools: all passed"), std::string::npos) << out;
}

// Over the gateway's body cap (32 MiB by default): a typed 413 that says the cap, and the gateway
// serves on.
TEST(ClusterApi, ABodyOverTheGatewaysCapIsA413) {
  LocalCluster c;
  ASSERT_TRUE(c.up(1, 1)) << (c.gateways.empty() ? "" : c.gateways[0]->log());
  const int gw = c.gateways[0]->port();
  Tcp t(gw);
  ASSERT_TRUE(t.send("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
                     std::to_string((std::size_t{32} << 20) + 1) + "\r\n\r\n"));
  const std::string r = t.response();
  EXPECT_EQ(status_of(r), 413) << r;
  const json e = json::parse(body_of(r), nullptr, false);
  EXPECT_NE(e["error"]["message"].get<std::string>().find("request body over the limit of 33554432 bytes"), std::string::npos) << r;
  EXPECT_EQ(complete(gw, "the river", 4), oracle().expected_text("the river", 4)) << "still serving";
}

}  // namespace
}  // namespace uma::test
