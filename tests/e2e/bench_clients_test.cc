// The request bodies the benchmark clients that compare servers send, as their published sources
// write them (vLLM's `vllm bench serve` endpoint_request_func.py, guidellm's OpenAI request
// handlers, inference-perf's completion/chat APIs, aiperf's and genai-perf's OpenAI endpoints),
// replayed against umad and through uma-gw: every one is served, fixed output lengths are honoured,
// and the replies carry what those clients parse (object names, the usage chunk, [DONE]).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "e2e/cluster_harness.h"
#include "e2e/daemon_harness.h"
#include "e2e/http_client.h"
#include "e2e/openai_sdk_run.h"

namespace uma::test {
namespace {

using json = nlohmann::json;

struct Replay {
  const char* client;
  const char* path;
  const char* body;  // 32 tokens out, "hello world" in
};

const Replay kBodies[] = {
    {"vllm bench serve (openai)", "/v1/completions",
     R"({"model":"M","prompt":"hello world","repetition_penalty":1.0,"max_tokens":32,"logprobs":null,"stream":true,"stream_options":{"include_usage":true},"ignore_eos":true})"},
    {"vllm bench serve (openai-chat)", "/v1/chat/completions",
     R"({"model":"M","messages":[{"role":"user","content":[{"type":"text","text":"hello world"}]}],"max_completion_tokens":32,"stream":true,"stream_options":{"include_usage":true},"ignore_eos":true})"},
    {"guidellm (text completions)", "/v1/completions",
     R"({"model":"M","stream":true,"stream_options":{"include_usage":true,"continuous_usage_stats":true},"max_tokens":32,"ignore_eos":true,"prompt":"hello world"})"},
    {"guidellm (chat)", "/v1/chat/completions",
     R"({"model":"M","stream":true,"stream_options":{"include_usage":true,"continuous_usage_stats":true},"max_completion_tokens":32,"ignore_eos":true,"messages":[{"role":"user","content":[{"type":"text","text":"hello world"}]}]})"},
    {"guidellm 0.2 (both token fields, stop null)", "/v1/chat/completions",
     R"({"model":"M","messages":[{"role":"user","content":"hello world"}],"max_tokens":32,"max_completion_tokens":32,"stop":null,"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true}})"},
    {"guidellm (not streamed)", "/v1/completions",
     R"({"model":"M","max_tokens":32,"ignore_eos":true,"prompt":"hello world"})"},
    {"inference-perf (completion, streamed)", "/v1/completions",
     R"({"model":"M","prompt":"hello world","max_tokens":32,"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true}})"},
    {"inference-perf (completion)", "/v1/completions",
     R"({"model":"M","prompt":"hello world","max_tokens":32,"ignore_eos":true,"stream":false})"},
    {"inference-perf (ignore_eos false, add_special_tokens)", "/v1/completions",
     R"({"model":"M","prompt":"hello world","max_tokens":32,"ignore_eos":false,"stream":false,"add_special_tokens":false})"},
    {"inference-perf (chat)", "/v1/chat/completions",
     R"({"model":"M","messages":[{"role":"user","content":"hello world"}],"max_tokens":32,"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true}})"},
    {"aiperf (chat)", "/v1/chat/completions",
     R"({"messages":[{"role":"user","content":"hello world","name":"text"}],"model":"M","stream":true,"max_completion_tokens":32,"ignore_eos":true,"min_tokens":32})"},
    {"aiperf (completions)", "/v1/completions",
     R"({"prompt":["hello world"],"model":"M","stream":true,"max_tokens":32,"ignore_eos":true,"min_tokens":32})"},
    {"genai-perf (chat)", "/v1/chat/completions",
     R"({"model":"M","messages":[{"role":"user","content":"hello world"}],"stream":true,"max_tokens":32,"min_tokens":32,"ignore_eos":true})"},
    {"genai-perf (completions)", "/v1/completions",
     R"({"model":"M","prompt":["hello world"],"stream":true,"max_tokens":32,"ignore_eos":true})"},
};

// Each body against `port`: 200, 32 tokens (from usage, which every client reads), the object
// names aiperf checks, and a stream's usage chunk and [DONE].
void replay_all(int port, const std::string& model) {
  for (const Replay& r : kBodies) {
    SCOPED_TRACE(r.client);
    json body = json::parse(r.body);
    body["model"] = model;
    const bool chat = std::string(r.path) == "/v1/chat/completions";
    Tcp t(port);
    ASSERT_TRUE(t.send(post(r.path, body.dump())));
    const std::string resp = t.response();
    ASSERT_EQ(status_of(resp), 200) << resp;
    if (!body.value("stream", false)) {
      const json j = json::parse(body_of(resp));
      EXPECT_EQ(j["object"], chat ? "chat.completion" : "text_completion");
      EXPECT_EQ(j["usage"]["completion_tokens"], 32) << j.dump();
      continue;
    }
    EXPECT_NE(head_of(resp).find("text/event-stream"), std::string::npos);
    const std::string events = dechunk(body_of(resp));
    int chunks = 0;
    json usage;
    for (std::size_t at = events.find("data: {"); at != std::string::npos; at = events.find("data: {", at + 1)) {
      const json c = json::parse(events.substr(at + 6, events.find('\n', at) - at - 6));
      EXPECT_EQ(c["object"], chat ? "chat.completion.chunk" : "text_completion");
      if (c.contains("usage") && c["choices"].empty()) usage = c["usage"];
      if (!c["choices"].empty()) ++chunks;
    }
    EXPECT_GE(chunks, 32) << events;
    if (body.contains("stream_options")) {
      EXPECT_EQ(usage["completion_tokens"], 32) << events;
    }
    EXPECT_NE(events.find("data: [DONE]\n\n"), std::string::npos);
  }
  // vllm bench serve reads data[0].id and data[0].root of /v1/models.
  Tcp t(port);
  ASSERT_TRUE(t.send("GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n"));
  const json models = json::parse(body_of(t.response()));
  EXPECT_TRUE(models["data"][0].contains("id"));
}

TEST(BenchClients, EveryClientsBodiesAreServedByUmadWithTheirFixedLengths) {
  Daemon d(http_args({"--max-tokens", "64"}));
  ASSERT_TRUE(d.started()) << d.log();
  replay_all(http_port(d), "M");
  Tcp t(http_port(d));
  ASSERT_TRUE(t.send("GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n"));
  EXPECT_TRUE(json::parse(body_of(t.response()))["data"][0].contains("root"));
}

TEST(BenchClients, EveryClientsBodiesAreServedThroughTheGateway) {
  LocalCluster c;
  ASSERT_TRUE(c.up(2, 1, {"--max-tokens", "64"})) << (c.gateways.empty() ? "" : c.gateways[0]->log());
  ASSERT_TRUE(c.all_live(2));
  replay_all(c.gateways[0]->port(), "oracle");  // the agents serve oracle.gguf: the stem finds it
  if (!node_sdks_available()) GTEST_SKIP() << "no node or SDKs here: the replayed bodies passed, the SDK part is skipped";
  // Anthropic's and the Responses SDKs through the gateway: re-encoded from the agents' OpenAI streams.
  std::string out;
  EXPECT_EQ(run_anthropic_responses_sdk_test("http://127.0.0.1:" + std::to_string(c.gateways[0]->port()), &out, true), 0) << out;
  EXPECT_NE(out.find("all checks passed"), std::string::npos) << out;
}

}  // namespace
}  // namespace uma::test
