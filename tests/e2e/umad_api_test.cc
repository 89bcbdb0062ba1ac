// End to end over HTTP: what the ecosystem's clients send beyond OpenAI's own fields (benchmark
// clients' fixed output lengths, vLLM's and llama-server's extensions, token-id prompts), the field
// policy, keys and the stream's first chunks, against the oracle's known outputs. The oracle's
// greedy next token is the last one + 1, so a prompt ending in BOS (token 1) is answered by EOS (2).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>

#include "e2e/daemon_harness.h"
#include "e2e/http_client.h"
#include "e2e/json_helpers.h"
#include "e2e/openai_sdk_run.h"
#include "e2e/oracle.h"

namespace uma::test {
namespace {

using json = nlohmann::json;

json completion(Tcp& t, const json& body, std::string* head = nullptr) {
  EXPECT_TRUE(t.send(post("/v1/completions", body.dump())));
  const std::string r = t.response();
  if (head != nullptr) *head = head_of(r);
  EXPECT_EQ(status_of(r), 200) << body.dump() << " -> " << r;
  return json::parse(body_of(r), nullptr, false);
}

TEST(UmadApi, TheAnthropicSdkAndTheResponsesApiGetExactText) {
  if (!node_sdks_available()) GTEST_SKIP() << "no node or the SDKs here (scripts/npm_deps.sh)";
  Daemon d(http_args({}));
  ASSERT_TRUE(d.started()) << d.log();
  std::string out;
  EXPECT_EQ(run_anthropic_responses_sdk_test("http://127.0.0.1:" + std::to_string(http_port(d)), &out), 0) << out;
  EXPECT_NE(out.find("all checks passed"), std::string::npos) << out;
}

// Ollama's API through the official `ollama` library: chat and generate (whole, streamed as JSON
// lines, raw), format with a schema, embed, list/ps/show/version, errors with their status.
TEST(UmadApi, TheOllamaNodeSdkGetsExactText) {
  if (!node_sdks_available()) GTEST_SKIP() << "no node or the ollama library here (scripts/npm_deps.sh)";
  Daemon d(http_args({"--alias", "oracle"}));
  ASSERT_TRUE(d.started()) << d.log();
  std::string out;
  EXPECT_EQ(run_ollama_client_test("http://127.0.0.1:" + std::to_string(http_port(d)), "oracle", &out), 0) << out;
  EXPECT_NE(out.find("ollama client: all passed"), std::string::npos) << out;
}

// Tools and no forcing: the model's own reply is a call (oracle-tool-call.gguf), and the client
// sees it as message.tool_calls.
TEST(UmadApi, TheOllamaNodeSdkSeesAToolCallTheModelMadeUnforced) {
  if (!node_sdks_available()) GTEST_SKIP() << "no node or the ollama library here (scripts/npm_deps.sh)";
  Daemon d(args({"--http", "127.0.0.1:0", "--alias", "oracle"}), "oracle-tool-call.gguf");
  ASSERT_TRUE(d.started()) << d.log();
  std::string out;
  EXPECT_EQ(run_ollama_tools_test("http://127.0.0.1:" + std::to_string(http_port(d)), "oracle", &out), 0) << out;
  EXPECT_NE(out.find("ollama tools: all passed"), std::string::npos) << out;
}

TEST(UmadApi, FixedOutputLengthsIgnoreEosMinTokensAndStopTokenIds) {
  Daemon d(http_args({}));
  ASSERT_TRUE(d.started()) << d.log();
  Tcp t(http_port(d));
  // [1] is answered by EOS at once: nothing generated.
  json j = completion(t, {{"prompt", json::array({1})}, {"max_tokens", 8}});
  EXPECT_EQ(j["usage"]["completion_tokens"], 0) << j.dump();
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  // ignore_eos (guidellm, inference-perf, aiperf): exactly max_tokens.
  j = completion(t, {{"prompt", json::array({1})}, {"max_tokens", 8}, {"ignore_eos", true}});
  EXPECT_EQ(j["usage"]["completion_tokens"], 8) << j.dump();
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  // min_tokens: no end before 5 tokens; then the oracle runs on to max_tokens.
  j = completion(t, {{"prompt", json::array({1})}, {"max_tokens", 8}, {"min_tokens", 5}});
  EXPECT_GE(j["usage"]["completion_tokens"].get<int>(), 5) << j.dump();
  // Streamed and sampled too (the guard sits in every chain).
  j = completion(t, {{"prompt", json::array({1})}, {"max_tokens", 6}, {"ignore_eos", true}, {"temperature", 0.8}, {"seed", 3}});
  EXPECT_EQ(j["usage"]["completion_tokens"], 6) << j.dump();
  // stop_token_ids end the text as EOS does: "hello world" continues 3187, 3188, 3189, 3190, ...
  j = completion(t, {{"prompt", "hello world"}, {"max_tokens", 8}, {"stop_token_ids", {3190}}});
  EXPECT_EQ(j["choices"][0]["text"], oracle().expected_text("hello world", 3)) << j.dump();
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(j["usage"]["completion_tokens"], 3);
}

TEST(UmadApi, LogitBiasSteersTheGreedyPick) {
  Daemon d(http_args({}));
  ASSERT_TRUE(d.started()) << d.log();
  Tcp t(http_port(d));
  const std::string expected = oracle().expected_text("hello world", 4);
  json j = completion(t, {{"prompt", "hello world"}, {"max_tokens", 4}, {"logit_bias", {{"3187", -100}}}});
  EXPECT_NE(j["choices"][0]["text"], expected) << "the oracle's pick is banned";
  // A bias towards a token makes it the pick: token 500 first, then the oracle's 501, 502, ...
  const json piece = completion(t, {{"prompt", json::array({499})}, {"max_tokens", 1}})["choices"][0]["text"];
  j = completion(t, {{"prompt", "hello world"}, {"max_tokens", 1}, {"logit_bias", {{"500", 100}}}});
  EXPECT_EQ(j["choices"][0]["text"], piece) << j.dump();
  // llama-server's form: pairs, false is never.
  j = completion(t, {{"prompt", "hello world"}, {"max_tokens", 4}, {"logit_bias", json::array({json::array({3187, false})})}});
  EXPECT_NE(j["choices"][0]["text"], expected);
}

TEST(UmadApi, TokenPromptsAndSeveralPromptsEachGetTheirChoices) {
  Daemon d(http_args({"--max-sessions", "8"}));
  ASSERT_TRUE(d.started()) << d.log();
  Tcp t(http_port(d));
  const std::vector<std::int32_t> hw = oracle().tokenize("hello world");
  json ids = json::array();
  for (std::size_t i = 1; i < hw.size(); ++i) ids.push_back(hw[i]);  // without BOS
  json j = completion(t, {{"prompt", json::array({"a b c", ids})}, {"max_tokens", 5}, {"n", 2}});
  ASSERT_EQ(j["choices"].size(), 4u) << j.dump();
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(j["choices"][i]["index"], i);
    EXPECT_EQ(j["choices"][i]["text"], oracle().expected_text(i < 2 ? "a b c" : "hello world", 5)) << i;
  }
  EXPECT_EQ(j["usage"]["prompt_tokens"], oracle().tokenize("a b c").size() + ids.size()) << "each prompt once";
  EXPECT_EQ(j["usage"]["completion_tokens"], 20);
}

TEST(UmadApi, UnknownFieldsAreNamedAndCountedOrRefusedWhenStrict) {
  Daemon d(http_args({}));
  ASSERT_TRUE(d.started()) << d.log();
  Tcp t(http_port(d));
  std::string head;
  json j = completion(t, {{"prompt", "hello world"}, {"max_tokens", 3}, {"mirostat", 2}, {"x\r\nEvil: 1", 1}}, &head);
  EXPECT_EQ(j["choices"][0]["text"], oracle().expected_text("hello world", 3));
  EXPECT_NE(head.find("X-Uma-Ignored-Fields: mirostat, x??Evil?"), std::string::npos) << head;
  EXPECT_EQ(head.find("\r\nEvil"), std::string::npos) << "a field name never becomes a header";
  EXPECT_EQ(metrics(d)["ignored_fields_total"], 2);

  Daemon strict(http_args({"--strict-fields"}));
  ASSERT_TRUE(strict.started()) << strict.log();
  Tcp s(http_port(strict));
  ASSERT_TRUE(s.send(post("/v1/completions", R"({"prompt":"hello world","mirostat":2})")));
  const std::string r = s.response();
  EXPECT_EQ(status_of(r), 400) << r;
  EXPECT_EQ(json::parse(body_of(r))["error"]["param"], "mirostat");
}

TEST(UmadApi, StreamsOpenWithTheRoleAndNoContentAndErrorsKnownBeforeTheFirstTokenAreHttpErrors) {
  Daemon d(http_args({"--n-ctx", "512"}));
  ASSERT_TRUE(d.started()) << d.log();
  Tcp t(http_port(d));
  ASSERT_TRUE(t.send(post("/v1/chat/completions", json({{"messages", {{{"role", "user"}, {"content", "hi"}}}},
                                                        {"max_tokens", 3}, {"stream", true}}).dump())));
  std::string r = t.response();
  ASSERT_EQ(status_of(r), 200) << r;
  const std::string events = dechunk(body_of(r));
  const std::size_t first = events.find("data: ");
  const json chunk = json::parse(events.substr(first + 6, events.find("\n", first) - first - 6));
  EXPECT_EQ(chunk["choices"][0]["delta"], json({{"role", "assistant"}, {"content", nullptr}})) << events;
  // A prompt the context cannot hold, streamed: a 400 before any SSE, as OpenAI and llama-server answer.
  std::string long_prompt;
  for (int i = 0; i < 600; ++i) long_prompt += " hello";
  ASSERT_TRUE(t.send(post("/v1/completions", json({{"prompt", long_prompt}, {"stream", true}}).dump())));
  r = t.response();
  EXPECT_EQ(status_of(r), 400) << r;
  EXPECT_EQ(head_of(r).find("text/event-stream"), std::string::npos) << r;
  EXPECT_EQ(json::parse(body_of(r))["error"]["code"], "context_exceeded") << r;
}

TEST(UmadApi, TheKeyIsABearerTokenOrXApiKey) {
  Daemon d(http_args({"--api-key", "sesame"}));
  ASSERT_TRUE(d.started()) << d.log();
  Tcp t(http_port(d));
  const std::string body = R"({"prompt":"hello world","max_tokens":2})";
  auto with = [&](const std::string& header) {
    EXPECT_TRUE(t.send("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + header +
                       "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body));
    return status_of(t.response());
  };
  EXPECT_EQ(with(""), 401);
  EXPECT_EQ(with("Authorization: Bearer wrong\r\n"), 401);
  EXPECT_EQ(with("Authorization: Bearer sesame\r\n"), 200);
  EXPECT_EQ(with("x-api-key: sesame\r\n"), 200);
  EXPECT_EQ(with("x-api-key: sesam\r\n"), 401);
  ASSERT_TRUE(t.send("GET /health HTTP/1.1\r\nHost: x\r\n\r\n"));
  EXPECT_EQ(status_of(t.response()), 200) << "health is open";
}

}  // namespace
}  // namespace uma::test

namespace uma::test {
namespace {

json get_json(Tcp& t, const std::string& path, int want = 200) {
  EXPECT_TRUE(t.send("GET " + path + " HTTP/1.1\r\nHost: x\r\n\r\n"));
  const std::string r = t.response();
  EXPECT_EQ(status_of(r), want) << path << " -> " << r;
  return json::parse(body_of(r), nullptr, false);
}

json post_json(Tcp& t, const std::string& path, const json& body, int want = 200) {
  EXPECT_TRUE(t.send(post(path, body.dump())));
  const std::string r = t.response();
  EXPECT_EQ(status_of(r), want) << path << " -> " << r;
  return json::parse(body_of(r), nullptr, false);
}

TEST(UmadApi, LlamaServersOwnApiAndThePathsWithoutV1) {
  Daemon d(http_args({"--n-ctx", "2048", "--max-sessions", "4", "--alias", "oracle"}));
  ASSERT_TRUE(d.started()) << d.log();
  Tcp t(http_port(d));
  // /completion: llama-server's fields and answer.
  json j = post_json(t, "/completion", {{"prompt", "hello world"}, {"n_predict", 5}, {"cache_prompt", true}});
  EXPECT_EQ(j["content"], oracle().expected_text("hello world", 5)) << j.dump();
  EXPECT_EQ(j["stop"], true);
  EXPECT_EQ(j["stop_type"], "limit");
  EXPECT_EQ(j["tokens_predicted"], 5);
  EXPECT_EQ(j["generation_settings"]["n_predict"], 5) << j.dump();
  j = post_json(t, "/completion", {{"prompt", "hello world"}, {"n_predict", 8}, {"stop", {oracle().expected_pieces("hello world", 8)[4]}}});
  EXPECT_EQ(j["stop_type"], "word") << j.dump();
  EXPECT_EQ(j["stopping_word"], oracle().expected_pieces("hello world", 8)[4]);
  // Prompts as llama-server takes them: {"prompt_string"}, token ids and text mixed in one prompt
  // (text tokenized in place, the BOS before a first piece of text), the same tokens either way.
  const std::vector<std::int32_t> ids = oracle().tokenize("hello world");  // BOS, " hello", " world"
  ASSERT_EQ(ids.size(), 3u);
  const std::string hello5 = oracle().expected_text("hello world", 5);
  EXPECT_EQ(post_json(t, "/completion", {{"prompt", {{"prompt_string", "hello world"}}}, {"n_predict", 5}})["content"], hello5);
  j = post_json(t, "/completion", {{"prompt", json::array({"hello", ids[2]})}, {"n_predict", 5}});
  EXPECT_EQ(j["content"], hello5) << j.dump();
  EXPECT_EQ(j["tokens_evaluated"], 3);
  j = post_json(t, "/completion", {{"prompt", json::array({json::array({ids[0], ids[1], ids[2]}), json::array({"hello", ids[2]})})},
                                   {"n_predict", 5}});
  ASSERT_TRUE(j.is_array()) << j.dump();
  EXPECT_EQ(j[1]["content"], hello5);
  j = post_json(t, "/completion", {{"prompt", {{"prompt_string", "x"}, {"multimodal_data", {"aGk="}}}}}, 501);
  EXPECT_EQ(j["error"]["type"], "not_supported_error") << j.dump();
  // response_fields: only those, "a/b" lifted out of a; verbose: the native object in an OpenAI answer.
  j = post_json(t, "/completion", {{"prompt", "hello world"}, {"n_predict", 5},
                                   {"response_fields", {"content", "generation_settings/n_predict", "no/such"}}});
  EXPECT_EQ(j, json({{"content", hello5}, {"generation_settings/n_predict", 5}})) << j.dump();
  j = post_json(t, "/v1/completions", {{"prompt", "hello world"}, {"max_tokens", 5}, {"verbose", true}});
  EXPECT_EQ(j["__verbose"]["content"], j["choices"][0]["text"]) << j.dump();
  EXPECT_EQ(j["__verbose"]["tokens_predicted"], 5);
  EXPECT_EQ(j["__verbose"]["prompt"], "hello world");
  // n_probs: each token with its log-probability and the likeliest alternatives.
  j = post_json(t, "/completion", {{"prompt", "hello world"}, {"n_predict", 3}, {"n_probs", 2}});
  ASSERT_EQ(j["completion_probabilities"].size(), 3u) << j.dump();
  const json& p0 = j["completion_probabilities"][0];
  EXPECT_EQ(p0["token"], oracle().expected_pieces("hello world", 3)[0]) << j.dump();
  ASSERT_EQ(p0["top_logprobs"].size(), 2u) << j.dump();
  EXPECT_EQ(p0["top_logprobs"][0]["id"], p0["id"]) << "the greedy pick is the likeliest";
  EXPECT_LE(p0["logprob"].get<double>(), 0.0);
  // n_predict past the context: generated to its end (a request's room: the whole 2048 of a
  // unified KV), not refused.
  j = post_json(t, "/completion", {{"prompt", "hello world"}, {"n_predict", 100000}});
  EXPECT_EQ(j["stop_type"], "limit");
  EXPECT_EQ(j["tokens_predicted"].get<int>() + j["tokens_evaluated"].get<int>(), 2048) << j["tokens_predicted"];
  // Streamed: an object per data line, the last with stop: true; no [DONE].
  ASSERT_TRUE(t.send(post("/completion", json({{"prompt", "hello world"}, {"n_predict", 4}, {"stream", true}}).dump())));
  const std::string events = dechunk(body_of(t.response()));
  std::string text;
  int stops = 0;
  for (std::size_t at = events.find("data: "); at != std::string::npos; at = events.find("data: ", at + 1)) {
    const json e = json::parse(events.substr(at + 6, events.find('\n', at) - at - 6));
    text += e["content"].get<std::string>();
    stops += e["stop"].get<bool>() ? 1 : 0;
  }
  EXPECT_EQ(text, oracle().expected_text("hello world", 4));
  EXPECT_EQ(stops, 1);
  EXPECT_EQ(events.find("[DONE]"), std::string::npos);
  // return_progress: prompt_progress objects before the first token, the last with all of the
  // prompt processed; the text as without.
  const std::string long_prompt = Oracle::long_prompt(300, "progress");
  ASSERT_TRUE(t.send(post("/completion", json({{"prompt", long_prompt}, {"n_predict", 4}, {"stream", true},
                                                {"return_progress", true}}).dump())));
  const std::string progressed = dechunk(body_of(t.response()));
  std::vector<json> progress;
  text.clear();
  for (std::size_t at = progressed.find("data: "); at != std::string::npos; at = progressed.find("data: ", at + 1)) {
    const json e = json::parse(progressed.substr(at + 6, progressed.find('\n', at) - at - 6));
    if (e.contains("prompt_progress")) {
      EXPECT_TRUE(text.empty()) << "progress comes before the text";
      progress.push_back(e["prompt_progress"]);
    }
    text += e["content"].get<std::string>();
  }
  ASSERT_FALSE(progress.empty()) << progressed;
  const int total = static_cast<int>(oracle().tokenize(long_prompt).size());
  EXPECT_EQ(progress.back()["total"], total) << progressed;
  EXPECT_EQ(progress.back()["processed"], total);
  EXPECT_GE(progress.back()["time_ms"].get<double>(), 0.0);
  EXPECT_EQ(text, oracle().expected_text(long_prompt, 4));
  // Tokens there and back.
  j = post_json(t, "/tokenize", {{"content", "hello world"}});
  std::vector<std::int32_t> want = oracle().tokenize("hello world");
  want.erase(want.begin());  // add_special defaults to false
  EXPECT_EQ(j["tokens"].get<std::vector<std::int32_t>>(), want);
  j = post_json(t, "/tokenize", {{"content", "hello world"}, {"add_special", true}, {"with_pieces", true}});
  EXPECT_EQ(j["tokens"][1]["piece"], " hello") << j.dump();
  EXPECT_EQ(post_json(t, "/detokenize", {{"tokens", want}})["content"], " hello world");
  post_json(t, "/detokenize", {{"tokens", {99999999}}}, 400);
  j = post_json(t, "/apply-template", {{"messages", {{{"role", "user"}, {"content", "hi"}}}}});
  EXPECT_EQ(j["prompt"], "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
  // What the server tells about itself.
  j = get_json(t, "/props");
  EXPECT_EQ(j["total_slots"], 4);
  EXPECT_EQ(j["default_generation_settings"]["n_ctx"], 2048);
  EXPECT_EQ(get_json(t, "/slots").size(), 4u);
  for (const char* path : {"/v1/models", "/models"}) {
    j = get_json(t, path);
    EXPECT_EQ(j["data"][0]["id"], "oracle");
    EXPECT_EQ(j["data"][0]["max_model_len"], 2048);
    EXPECT_GT(j["data"][0]["created"].get<std::int64_t>(), 0);
  }
  EXPECT_EQ(get_json(t, "/v1/health")["status"], "ok");
  j = post_json(t, "/completions", {{"prompt", "hello world"}, {"max_tokens", 3}});
  EXPECT_EQ(j["choices"][0]["text"], oracle().expected_text("hello world", 3));
  j = post_json(t, "/chat/completions", {{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"max_tokens", 2}});
  EXPECT_EQ(j["object"], "chat.completion");
}

// The prompt tokens whose KV the prefix cache gave are in every API's usage, as each API names
// them: OpenAI's prompt_tokens_details.cached_tokens, Anthropic's cache_read_input_tokens (apart
// from input_tokens), the Responses API's input_tokens_details, llama-server's timings.cache_n.
TEST(UmadApi, UsageSaysThePromptTokensTheCacheGave) {
  Daemon d(http_args({"--n-ctx", "8192", "--max-sessions", "2"}));
  ASSERT_TRUE(d.started()) << d.log();
  Tcp t(http_port(d));
  const std::string prompt = Oracle::long_prompt(200, "system");
  json j = post_json(t, "/v1/completions", {{"prompt", prompt + " apple"}, {"max_tokens", 3}});
  const int prompt_tokens = j["usage"]["prompt_tokens"].get<int>();
  EXPECT_EQ(j["usage"]["prompt_tokens_details"]["cached_tokens"], 0) << "nothing kept yet: " << j.dump();
  // A prefix is kept once it has been seen again (a unified KV keeps none seen once).
  post_json(t, "/v1/completions", {{"prompt", prompt + " river"}, {"max_tokens", 3}});
  j = post_json(t, "/v1/completions", {{"prompt", prompt + " stone"}, {"max_tokens", 3}});
  const int cached = j["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>();
  EXPECT_GT(cached, prompt_tokens / 2) << j.dump();
  EXPECT_LT(cached, j["usage"]["prompt_tokens"].get<int>()) << "the last words are computed";
  const json messages = {{{"role", "user"}, {"content", prompt}}};
  for (int i = 0; i < 2; ++i) post_json(t, "/v1/messages", {{"messages", messages}, {"max_tokens", 2}, {"model", "m"}});
  j = post_json(t, "/v1/messages", {{"messages", messages}, {"max_tokens", 3}, {"model", "m"}});
  EXPECT_GT(j["usage"]["cache_read_input_tokens"].get<int>(), 0) << j.dump();
  EXPECT_EQ(j["usage"]["cache_creation_input_tokens"], 0);
  EXPECT_GT(j["usage"]["input_tokens"].get<int>(), 0) << "what was computed";
  j = post_json(t, "/v1/responses", {{"input", prompt}, {"max_output_tokens", 3}});
  EXPECT_GT(j["usage"]["input_tokens_details"]["cached_tokens"].get<int>(), 0) << j.dump();
  j = post_json(t, "/completion", {{"prompt", prompt + " maple"}, {"n_predict", 4}});
  const json& timings = j["timings"];
  EXPECT_GT(timings["cache_n"].get<int>(), 0) << j.dump();
  EXPECT_EQ(timings["cache_n"].get<int>() + timings["prompt_n"].get<int>(), j["tokens_evaluated"].get<int>()) << j.dump();
  EXPECT_EQ(timings["predicted_n"], 4);
  EXPECT_EQ(j["tokens_cached"], timings["cache_n"]);
  EXPECT_GE(timings["predicted_ms"].get<double>(), 0.0);
}

TEST(UmadApi, AnNBatchBelowTheSequencesIsRaisedAndSaidNotAnAbort) {
  Daemon d(http_args({"--n-batch", "16", "--max-sessions", "16"}));
  ASSERT_TRUE(d.started()) << d.log();
  EXPECT_NE(d.log().find("n-batch raised to"), std::string::npos) << d.log();
  Tcp t(http_port(d));
  const json j = post_json(t, "/v1/completions", {{"prompt", "hello world"}, {"max_tokens", 4}});
  EXPECT_EQ(j["choices"][0]["text"], oracle().expected_text("hello world", 4));
}

// Qwen 3's template from the pinned source: the reply a grammar holds the oracle to is a thought in
// <think> tags and an answer; the thought comes back as reasoning_content, whole and streamed.
TEST(UmadApi, AThinkingTemplatesReasoningComesBackApart) {
  std::ifstream f(UMA_LLAMA_TEMPLATES "/Qwen-Qwen3-0.6B.jinja");
  std::stringstream tmpl;
  tmpl << f.rdbuf();
  ASSERT_FALSE(tmpl.str().empty());
  Daemon d(args({"--http", "127.0.0.1:0", "--chat-template", tmpl.str()}));
  ASSERT_TRUE(d.started()) << d.log();
  Tcp t(http_port(d));
  const json body = {{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"max_tokens", 64},
                     {"grammar", "root ::= \"<think>\\nabc\\n</think>\\n\\nanswer\""}};
  json j = post_json(t, "/v1/chat/completions", body);
  // llama.cpp's parser keeps the newline before </think> (llama-server answers the same).
  EXPECT_EQ(j["choices"][0]["message"]["reasoning_content"], "abc\n") << j.dump();
  EXPECT_EQ(j["choices"][0]["message"]["content"], "answer") << j.dump();
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  json streamed = body;
  streamed["stream"] = true;
  ASSERT_TRUE(t.send(post("/v1/chat/completions", streamed.dump())));
  const std::string events = dechunk(body_of(t.response()));
  std::string reasoning, content;
  for (std::size_t at = events.find("data: {"); at != std::string::npos; at = events.find("data: {", at + 1)) {
    const json e = json::parse(events.substr(at + 6, events.find('\n', at) - at - 6));
    const json& delta = e["choices"][0]["delta"];
    if (delta.contains("reasoning_content")) reasoning += delta["reasoning_content"].get<std::string>();
    if (delta.contains("content") && delta["content"].is_string()) content += delta["content"].get<std::string>();
  }
  EXPECT_EQ(reasoning, "abc\n") << events;
  EXPECT_EQ(content, "answer") << events;
  // Anthropic's thinking blocks go back into the prompt (this template renders a tool-use turn's
  // thinking): count_tokens counts them, and the Messages answer reports them.
  auto anthropic = [&](bool thinking) {
    json assistant = json::array();
    if (thinking) assistant.push_back({{"type", "thinking"}, {"thinking", "I should use the calculator."}, {"signature", ""}});
    assistant.push_back({{"type", "tool_use"}, {"id", "toolu_1"}, {"name", "calc"}, {"input", {{"x", 2}}}});
    return json{{"model", "m"}, {"max_tokens", 8},
                {"messages", {{{"role", "user"}, {"content", "What is 2+2?"}},
                              {{"role", "assistant"}, {"content", assistant}},
                              {{"role", "user"}, {"content", {{{"type", "tool_result"}, {"tool_use_id", "toolu_1"}, {"content", "4"}}}}}}}};
  };
  const int with = post_json(t, "/v1/messages/count_tokens", anthropic(true))["input_tokens"];
  const int without = post_json(t, "/v1/messages/count_tokens", anthropic(false))["input_tokens"];
  EXPECT_GE(with, without + 5) << "the thinking's tokens";
  j = post_json(t, "/v1/messages", anthropic(true));
  EXPECT_EQ(j["usage"]["input_tokens"].get<int>() + j["usage"]["cache_read_input_tokens"].get<int>(), with) << j.dump();
}

TEST(UmadApi, TheContextDefaultsToTheModelsAndTheRequestCapsFollowIt) {
  {
    Daemon d(http_args({}));  // no --n-ctx: the oracle's trained 4096
    ASSERT_TRUE(d.started()) << d.log();
    EXPECT_NE(d.log().find("n_ctx 4096 (the model's trained context)"), std::string::npos) << d.log();
  }
  // A coding assistant's large context: a 200 KiB prompt at n_ctx 65536, no limit flags.
  Daemon d(http_args({"--n-ctx", "65536", "--max-sessions", "2"}));
  ASSERT_TRUE(d.started()) << d.log();
  // Runs of 16 spaces are one token of the oracle's vocabulary: 200 KiB in ~13k tokens (a prefill
  // this machine does in seconds), then the words whose continuation the oracle knows. Under the
  // sanitizers 64 KiB, over the 64 KiB floor of the derived cap (the prefill is llama.cpp's work).
  constexpr std::size_t kKiB = kSanitized ? 64 : 200;
  std::string prompt(kKiB * 1024, ' ');
  prompt += "hello world";
  Tcp t(http_port(d));
  const json j = post_json(t, "/v1/completions", {{"prompt", prompt}, {"max_tokens", 2}});
  EXPECT_EQ(j["choices"][0]["text"], oracle().expected_text("hello world", 2)) << j.dump().substr(0, 300);
  EXPECT_GT(j["usage"]["prompt_tokens"].get<int>(), static_cast<int>(kKiB * 1024 / 16 - 500));
  // Past the derived cap (65536 x 8 bytes), still a typed 413.
  std::string huge(600 * 1024, 'a');
  ASSERT_TRUE(t.send(post("/v1/completions", json({{"prompt", huge}}).dump())));
  EXPECT_EQ(status_of(t.response()), 413);
}

// A Jinja template with no tool syntax and a forced tool_choice: the generic JSON call under a
// grammar (llama-server's fallback), never silently free text.
// A template without tool syntax given as text, and (as llama-server does) the chatml a model
// without a template of its own falls back to: tools described, a call read in the generic format.
class ForcedTool : public ::testing::TestWithParam<bool> {};
INSTANTIATE_TEST_SUITE_P(Template, ForcedTool, ::testing::Values(true, false),
                         [](const ::testing::TestParamInfo<bool>& i) { return i.param ? "Given" : "ModelHasNone"; });
TEST_P(ForcedTool, AForcedToolWithATemplateWithoutToolSyntaxIsAGenericCall) {
  const std::string chatml =
      "{%- for message in messages -%}{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' -}}"
      "{%- endfor -%}{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}";
  Daemon d(GetParam() ? args({"--http", "127.0.0.1:0", "--chat-template", chatml}) : args({"--http", "127.0.0.1:0"}));
  ASSERT_TRUE(d.started()) << d.log();
  Tcp t(http_port(d));
  const json tool = {{"type", "function"},
                     {"function", {{"name", "get_weather"},
                                   {"parameters", {{"type", "object"},
                                                   {"properties", {{"city", {{"type", "string"}, {"enum", {"Paris", "Rome"}}}}}},
                                                   {"required", {"city"}}}}}}};
  const json j = post_json(t, "/v1/chat/completions",
                           {{"messages", {{{"role", "user"}, {"content", "weather?"}}}}, {"max_tokens", 80}, {"tools", {tool}},
                            {"tool_choice", {{"type", "function"}, {"function", {{"name", "get_weather"}}}}}});
  const json& choice = j["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls") << j.dump();
  ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u) << j.dump();
  EXPECT_EQ(choice["message"]["tool_calls"][0]["function"]["name"], "get_weather");
  const json args = json::parse(choice["message"]["tool_calls"][0]["function"]["arguments"].get<std::string>());
  EXPECT_TRUE(args["city"] == "Paris" || args["city"] == "Rome") << args.dump();
}

TEST(UmadApi, CorsPreflightAndOriginHeaders) {
  Daemon d(http_args({"--cors-origin", "http://app.example", "--api-key", "k"}));
  ASSERT_TRUE(d.started()) << d.log();
  Tcp t(http_port(d));
  ASSERT_TRUE(t.send("OPTIONS /v1/chat/completions HTTP/1.1\r\nHost: x\r\nOrigin: http://app.example\r\n"
                     "Access-Control-Request-Method: POST\r\n\r\n"));
  std::string r = t.response();
  EXPECT_EQ(status_of(r), 204) << "a preflight needs no key: " << r;
  EXPECT_NE(r.find("Access-Control-Allow-Origin: http://app.example"), std::string::npos) << r;
  EXPECT_NE(r.find("Access-Control-Allow-Headers: Authorization"), std::string::npos) << r;
  ASSERT_TRUE(t.send("GET /v1/models HTTP/1.1\r\nHost: x\r\nOrigin: http://app.example\r\nAuthorization: Bearer k\r\n\r\n"));
  r = t.response();
  EXPECT_EQ(status_of(r), 200) << r;
  EXPECT_NE(r.find("Access-Control-Allow-Origin: http://app.example"), std::string::npos) << r;
  ASSERT_TRUE(t.send("GET /v1/models HTTP/1.1\r\nHost: x\r\nOrigin: http://evil.example\r\nAuthorization: Bearer k\r\n\r\n"));
  r = t.response();
  EXPECT_EQ(r.find("Access-Control-Allow-Origin"), std::string::npos) << "another origin is not allowed: " << r;
}

// By default any origin may call, as llama-server allows: a preflight is answered, not a 405.
TEST(UmadApi, ByDefaultAnyOriginGetsItsPreflightAnswered) {
  Daemon d(http_args({}));
  ASSERT_TRUE(d.started()) << d.log();
  Tcp t(http_port(d));
  ASSERT_TRUE(t.send("OPTIONS /v1/chat/completions HTTP/1.1\r\nHost: x\r\nOrigin: http://ui.example\r\n"
                     "Access-Control-Request-Method: POST\r\n\r\n"));
  const std::string r = t.response();
  EXPECT_EQ(status_of(r), 204) << r;
  EXPECT_NE(r.find("Access-Control-Allow-Origin: *"), std::string::npos) << r;
}

}  // namespace
}  // namespace uma::test
