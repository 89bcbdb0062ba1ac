#include "http/openai.h"

#include <cstring>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace uma::openai {
namespace {

using json = nlohmann::json;

Status parse(const std::string& body, bool chat, CompletionRequest* r) {
  return parse_request(body, chat, Limits{1000}, SamplingParams{}, r);
}

TEST(OpenAi, CompletionFieldsMapToOurs) {
  CompletionRequest r;
  ASSERT_TRUE(parse(R"({"model":"m","prompt":["hi"],"max_tokens":7,"temperature":0.5,"top_p":0.9,"seed":3,
                        "stop":"\n","presence_penalty":0.5,"frequency_penalty":-1,"stream":true,
                        "stream_options":{"include_usage":true},"user":"acme","n":1,"logit_bias":{}})", false, &r).ok());
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_EQ(r.prompts[0].text, "hi");
  EXPECT_EQ(r.max_tokens, 7);
  EXPECT_FLOAT_EQ(r.sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r.sampling.top_p, 0.9f);
  EXPECT_EQ(r.sampling.seed, 3u);
  EXPECT_EQ(r.stop, std::vector<std::string>{"\n"});
  EXPECT_FLOAT_EQ(r.sampling.frequency_penalty, -1.0f);
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_EQ(r.user, "acme");
}

TEST(OpenAi, ChatMessagesTakeStringsOrTextParts) {
  CompletionRequest r;
  ASSERT_TRUE(parse(R"({"messages":[{"role":"system","content":"a"},
                                    {"role":"user","content":[{"type":"text","text":"b"},{"type":"text","text":"c"}]}],
                        "max_completion_tokens":3})", true, &r).ok());
  ASSERT_EQ(r.messages.size(), 2u);
  EXPECT_EQ(r.messages[1].content, "bc");
  EXPECT_EQ(r.max_tokens, 3);
}

TEST(OpenAi, BadInputIsATypedErrorNamingTheField) {
  CompletionRequest r;
  EXPECT_EQ(parse("{", false, &r).code(), ErrorCode::kInvalidJson);
  const std::pair<const char*, const char*> cases[] = {
      {R"({"prompt":"x","n":17})", "'n'"},
      {R"({"prompt":"x","n":0})", "'n'"},
      {R"({"prompt":"x","max_tokens":2000000000})", "'max_tokens'"},
      {R"({"prompt":"x","max_tokens":0})", "'max_tokens'"},
      {R"({"prompt":"x","temperature":"hot"})", "'temperature'"},
      {R"({"prompt":"x","stop":["a","b","c","d","e","f","g","h","i","j","k","l","m","n","o","p","q"]})", "'stop'"},
      {R"({"prompt":""})", "'prompt'"},
      {R"({"prompt":5})", "'prompt'"},
  };
  for (const auto& [body, field] : cases) {
    const Status st = parse(body, false, &r);
    EXPECT_EQ(st.code(), ErrorCode::kBadRequest) << body;
    EXPECT_NE(st.message().find(field), std::string::npos) << st.message();
    const std::string name(field + 1, std::strlen(field) - 2);
    EXPECT_EQ(st.param(), name) << "OpenAI's error body names the field in 'param'";
    EXPECT_EQ(json::parse(http_error_body(st))["error"]["param"], name);
  }
  EXPECT_EQ(parse(R"({"messages":[]})", true, &r).code(), ErrorCode::kBadRequest);
  EXPECT_EQ(parse(R"({"messages":[{"role":"user","content":[{"type":"image_url"}]}]})", true, &r).code(),
            ErrorCode::kBadRequest);
  EXPECT_EQ(parse(R"({"prompt":")" + std::string(2000, 'a') + R"("})", false, &r).code(), ErrorCode::kPromptTooLarge);
}

TEST(OpenAi, AnOpenAiFieldUmadCannotHonourIsA400NamingIt) {
  CompletionRequest r;
  const std::pair<const char*, const char*> chat_cases[] = {
      {R"("response_format":{"type":"xml"})", "response_format"},
      {R"("response_format":{"type":"json_schema"})", "response_format.json_schema"},
      {R"("response_format":{"type":"json_schema","json_schema":{"name":"x"}})", "response_format.json_schema.schema"},
      {R"("tools":[{"type":"function"}])", "tools"},
      {R"("tools":{"type":"function"})", "tools"},
      {R"("tools":[{"type":"function","function":{"name":""}}])", "tools[].function.name"},
      {R"("tools":[{"type":"function","function":{"name":"f","parameters":"{}"}}])", "tools[].function.parameters"},
      {R"("tools":[{"type":"function","function":{"name":"f"}},{"type":"function","function":{"name":"f"}}])", "tools"},
      {R"("tool_choice":"required")", "tool_choice"},
      {R"("tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"sometimes")", "tool_choice"},
      {R"("tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"function","function":{"name":"g"}})", "tool_choice"},
      {R"("tools":[{"type":"function","function":{"name":"f"}}],"parallel_tool_calls":1)", "parallel_tool_calls"},
      {R"("tools":[{"type":"function","function":{"name":"f"}}],"response_format":{"type":"json_object"})", "response_format"},
      {R"("functions":[{"name":"f"}])", "functions"},
      {R"("logprobs":"yes")", "logprobs"},
      {R"("top_logprobs":3)", "top_logprobs"},
      {R"("logprobs":true,"top_logprobs":21)", "top_logprobs"},
      {R"("logit_bias":{"50256":-101})", "logit_bias"},
      {R"("logit_bias":[[1]])", "logit_bias"},
      {R"("reasoning_effort":"extreme")", "reasoning_effort"},
      {R"("function_call":"auto")", "function_call"},
      {R"("prompt":"x")", "prompt"},
  };
  for (const auto& [field, name] : chat_cases) {
    const std::string body = std::string(R"({"messages":[{"role":"user","content":"x"}],)") + field + "}";
    const Status st = parse(body, true, &r);
    EXPECT_EQ(st.code(), ErrorCode::kBadRequest) << body;
    EXPECT_EQ(st.param(), name) << body;
  }
  EXPECT_EQ(parse(R"({"prompt":"x","logprobs":-1})", false, &r).param(), "logprobs");
  EXPECT_EQ(parse(R"({"prompt":"x","echo":true})", false, &r).param(), "echo");
  EXPECT_EQ(parse(R"({"prompt":"x","messages":[]})", false, &r).param(), "messages") << "a chat field on /v1/completions";
}

TEST(OpenAi, ToolsToolChoiceAndToolTurnsAreRead) {
  CompletionRequest r;
  ASSERT_TRUE(parse(R"({"messages":[{"role":"user","content":"x"},
      {"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},
      {"role":"tool","tool_call_id":"call_1","name":"f","content":"ok"}],
    "tools":[{"type":"function","function":{"name":"f","description":"does f","parameters":{"type":"object"}}},
             {"type":"function","function":{"name":"g"}}],
    "tool_choice":{"type":"function","function":{"name":"g"}},"parallel_tool_calls":false})", true, &r).ok());
  ASSERT_EQ(r.tools.size(), 2u);
  EXPECT_EQ(r.tools[0].name, "f");
  EXPECT_EQ(r.tools[0].description, "does f");
  EXPECT_EQ(json::parse(r.tools[0].parameters), json::parse(R"({"type":"object"})"));
  EXPECT_EQ(r.tools[1].parameters, "{}") << "a tool without parameters takes none";
  EXPECT_EQ(r.tool_choice, ToolChoice::kRequired);
  EXPECT_EQ(r.forced_tool, "g");
  EXPECT_FALSE(r.parallel_tool_calls);
  ASSERT_EQ(r.messages.size(), 3u);
  ASSERT_EQ(r.messages[1].tool_calls.size(), 1u);
  EXPECT_EQ(r.messages[1].tool_calls[0].id, "call_1");
  EXPECT_EQ(r.messages[1].tool_calls[0].name, "f");
  EXPECT_EQ(r.messages[1].tool_calls[0].arguments, R"({"a":1})");
  EXPECT_TRUE(r.messages[1].content.empty());
  EXPECT_EQ(r.messages[2].tool_call_id, "call_1");
  EXPECT_EQ(r.messages[2].name, "f");
  ASSERT_TRUE(parse(R"({"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f"}}]})",
                    true, &r).ok());
  EXPECT_EQ(r.tool_choice, ToolChoice::kAuto);
  EXPECT_TRUE(r.parallel_tool_calls);
  ASSERT_TRUE(parse(R"({"messages":[{"role":"user","content":"x"}],"tools":[],"tool_choice":"none"})", true, &r).ok());
  EXPECT_EQ(r.tool_choice, ToolChoice::kNone);
}

TEST(OpenAi, ToolCallsInOpenAisShapes) {
  CompletionRequest r;
  r.chat = true;
  const std::vector<ToolCall> calls = {{"call_x", "f", R"({"a":1})"}};
  json j = json::parse(response(r, "id", 1, "", "tool_calls", Usage{3, 4}, {}, calls));
  const json& m = j["choices"][0]["message"];
  EXPECT_TRUE(m["content"].is_null());
  EXPECT_EQ(m["tool_calls"][0], json::parse(R"({"id":"call_x","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}})"));
  EXPECT_EQ(j["choices"][0]["finish_reason"], "tool_calls");
  j = json::parse(delta_chunk(r, "id", 1, ChatDelta{"", 0, "call_x", "f", ""}, true));
  EXPECT_EQ(j["choices"][0]["delta"], json::parse(R"({"role":"assistant","tool_calls":[{"index":0,"id":"call_x","type":"function",
                                                      "function":{"name":"f","arguments":""}}]})"));
  j = json::parse(delta_chunk(r, "id", 1, ChatDelta{"", 0, "", "", "{\"a\""}, false));
  EXPECT_EQ(j["choices"][0]["delta"], json::parse(R"({"tool_calls":[{"index":0,"function":{"arguments":"{\"a\""}}]})"));
  j = json::parse(delta_chunk(r, "id", 1, ChatDelta{"hi", -1, "", "", ""}, false));
  EXPECT_EQ(j["choices"][0]["delta"], json::parse(R"({"content":"hi"})"));
}

TEST(OpenAi, ResponseFormatGivesTheSchemaTheOutputMustMatch) {
  CompletionRequest r;
  const std::string msgs = R"("messages":[{"role":"user","content":"x"}])";
  ASSERT_TRUE(parse("{" + msgs + R"(,"response_format":{"type":"json_object"}})", true, &r).ok());
  EXPECT_EQ(json::parse(r.json_schema), json::parse(R"({"type":"object"})"));
  r = {};
  ASSERT_TRUE(parse("{" + msgs + R"(,"response_format":{"type":"json_schema","json_schema":{"name":"n","strict":true,
                    "schema":{"type":"object","properties":{"a":{"enum":[1,2]}}}}}})", true, &r).ok());
  EXPECT_EQ(json::parse(r.json_schema), json::parse(R"({"type":"object","properties":{"a":{"enum":[1,2]}}})"));
  r = {};
  ASSERT_TRUE(parse("{" + msgs + R"(,"response_format":{"type":"text"}})", true, &r).ok());
  EXPECT_TRUE(r.json_schema.empty());
  EXPECT_EQ(parse(R"({"prompt":"x","response_format":{"type":"json_object"}})", false, &r).param(), "response_format")
      << "a chat field on /v1/completions";
}

TEST(OpenAi, LogprobsAskForTheChosenTokensAndSomeAlternatives) {
  CompletionRequest r;
  const std::string msgs = R"("messages":[{"role":"user","content":"x"}])";
  ASSERT_TRUE(parse("{" + msgs + R"(,"logprobs":true,"top_logprobs":3})", true, &r).ok());
  EXPECT_EQ(r.logprobs, 3);
  EXPECT_EQ(r.sampling.logprobs, 3) << "the sampler's side knows it too";
  r = {};
  ASSERT_TRUE(parse("{" + msgs + R"(,"logprobs":true})", true, &r).ok());
  EXPECT_EQ(r.logprobs, 0);
  r = {};
  ASSERT_TRUE(parse(R"({"prompt":"x","logprobs":2})", false, &r).ok());
  EXPECT_EQ(r.logprobs, 2);
  r = {};
  ASSERT_TRUE(parse(R"({"prompt":"x"})", false, &r).ok());
  EXPECT_EQ(r.sampling.logprobs, -1);

  LogprobEntry e;
  e.chosen = {5, "\xC3", -0.5f};  // half a code point: bytes carry it exactly
  e.top = {{5, "\xC3", -0.5f}, {9, "b", -1.5f}};
  CompletionRequest chat;
  chat.chat = true;
  chat.logprobs = 2;
  json j = json::parse(chunk(chat, "id", 1, "x", "", false, std::vector<LogprobEntry>{e}));
  const json& c = j["choices"][0]["logprobs"]["content"][0];
  EXPECT_FLOAT_EQ(c["logprob"].get<float>(), -0.5f);
  EXPECT_EQ(c["bytes"], json::array({0xC3}));
  EXPECT_EQ(c["top_logprobs"].size(), 2u);
  EXPECT_EQ(c["top_logprobs"][1]["token"], "b");
  CompletionRequest compl_req;
  compl_req.logprobs = 1;
  j = json::parse(response(compl_req, "id", 1, "ab", "stop", Usage{1, 2}, std::vector<LogprobEntry>{e, e}));
  const json& lp = j["choices"][0]["logprobs"];
  EXPECT_EQ(lp["token_logprobs"].size(), 2u);
  EXPECT_EQ(lp["text_offset"], json::array({0, 1}));
  EXPECT_TRUE(json::parse(response(CompletionRequest{}, "id", 1, "ab", "stop", Usage{}))["choices"][0]["logprobs"].is_null());
}

TEST(OpenAi, FieldsThatAskForNothingOrChangeNothingAreAccepted) {
  CompletionRequest r;
  EXPECT_TRUE(parse(R"({"messages":[{"role":"user","content":"x"}],"logprobs":false,"top_logprobs":0,
                        "tools":[],"tool_choice":"none","parallel_tool_calls":true,
                        "modalities":["text"],"metadata":{"a":"b"},"store":false,"service_tier":"auto",
                        "audio":null,"n":1})", true, &r).ok());
  EXPECT_TRUE(parse(R"({"prompt":"x","echo":false,"best_of":1,"suffix":"","logprobs":0,"user":"u"})", false, &r).ok());
  ASSERT_TRUE(parse(R"({"prompt":"x","top_k":40,"min_p":0.05,"repeat_penalty":1.1})", false, &r).ok());
  EXPECT_EQ(r.sampling.top_k, 40);
  EXPECT_FLOAT_EQ(r.sampling.min_p, 0.05f);
  EXPECT_FLOAT_EQ(r.sampling.repeat_penalty, 1.1f);
  EXPECT_EQ(parse(R"({"prompt":"x","repeat_penalty":0})", false, &r).param(), "repeat_penalty");
  EXPECT_EQ(parse(R"({"prompt":"x","top_k":-2})", false, &r).param(), "top_k");
}

TEST(OpenAi, ChunksAndResponsesHaveOpenAisShapes) {
  CompletionRequest chat;
  chat.chat = true;
  chat.model = "m";
  json j = json::parse(chunk(chat, "id1", 5, "hi", "", true));
  EXPECT_EQ(j["object"], "chat.completion.chunk");
  EXPECT_EQ(j["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(j["choices"][0]["delta"]["content"], "hi");
  EXPECT_TRUE(j["choices"][0]["finish_reason"].is_null());
  j = json::parse(chunk(chat, "id1", 5, "", "length", false));
  EXPECT_FALSE(j["choices"][0]["delta"].contains("content"));
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  j = json::parse(usage_chunk(chat, "id1", 5, {3, 4}));
  EXPECT_TRUE(j["choices"].empty());
  EXPECT_EQ(j["usage"]["total_tokens"], 7);
  CompletionRequest text;
  j = json::parse(response(text, "id2", 5, "abc", "stop", {1, 2}));
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["choices"][0]["text"], "abc");
  EXPECT_EQ(j["usage"]["completion_tokens"], 2);
}

TEST(OpenAi, ErrorsMapToOneHttpStatusEach) {
  EXPECT_EQ(http_status(ErrorCode::kBadRequest), 400u);
  EXPECT_EQ(http_status(ErrorCode::kContextExceeded), 400u);
  EXPECT_EQ(http_status(ErrorCode::kPromptTooLarge), 413u);
  EXPECT_EQ(http_status(ErrorCode::kOverloaded), 429u);
  EXPECT_EQ(http_status(ErrorCode::kShuttingDown), 503u);
  EXPECT_EQ(http_status(ErrorCode::kDecodeFailed), 500u);
  const json e = json::parse(http_error_body(ErrorCode::kOverloaded, "busy"));
  EXPECT_EQ(e["error"]["type"], "rate_limit_error");
  EXPECT_EQ(e["error"]["message"], "busy");
  // llama-server's types, which its clients look for.
  EXPECT_EQ(json::parse(http_error_body(ErrorCode::kUnauthorized, "no key"))["error"]["type"], "authentication_error");
  EXPECT_EQ(json::parse(http_error_body(ErrorCode::kContextExceeded, "too long"))["error"]["type"], "exceed_context_size_error");
  EXPECT_EQ(json::parse(http_error_body(ErrorCode::kBadRequest, "bad"))["error"]["type"], "invalid_request_error");
}

// Fields of the wrong type inside nested objects are typed errors: an exception out of the parser
// or the encoder would abort umad.
TEST(OpenAi, WrongTypesInNestedFieldsAreBadRequestsNotExceptions) {
  CompletionRequest r;
  Status st = parse(R"({"prompt":"x","stream":true,"stream_options":{"include_usage":1}})", false, &r);
  EXPECT_EQ(st.code(), ErrorCode::kBadRequest);
  EXPECT_NE(st.message().find("stream_options.include_usage"), std::string::npos) << st.message();
  EXPECT_EQ(parse(R"({"prompt":"x","stream_options":{"include_usage":"yes"}})", false, &r).code(), ErrorCode::kBadRequest);
  EXPECT_EQ(parse(R"({"prompt":"x","stream_options":7})", false, &r).code(), ErrorCode::kBadRequest);
  EXPECT_TRUE(parse(R"({"prompt":"x","stream_options":null})", false, &r).ok());
  for (const char* part : {R"({"type":1,"text":"a"})", R"({"type":"text","text":1})", R"({"type":"text"})",
                           R"({"type":null,"text":"a"})", R"("text")", "[]"}) {
    const std::string body = std::string(R"({"messages":[{"role":"user","content":[)") + part + "]}]}";
    CompletionRequest c;
    EXPECT_EQ(parse(body, true, &c).code(), ErrorCode::kBadRequest) << body;
  }
  EXPECT_EQ(parse(R"({"messages":[{"role":1,"content":"a"}]})", true, &r).code(), ErrorCode::kBadRequest);
  EXPECT_EQ(parse(R"({"messages":["user"]})", true, &r).code(), ErrorCode::kBadRequest);
  EXPECT_EQ(parse(R"({"prompt":"x","model":1})", false, &r).code(), ErrorCode::kBadRequest);
  EXPECT_EQ(parse(R"({"prompt":"x","user":42})", false, &r).code(), ErrorCode::kBadRequest);
}

TEST(OpenAi, ANulAnywhereInThePromptIsRefusedNotTruncated) {
  CompletionRequest r;
  EXPECT_EQ(parse(R"({"prompt":"a\u0000b"})", false, &r).code(), ErrorCode::kContainsNul);
  EXPECT_EQ(parse(R"({"messages":[{"role":"user","content":"hello\u0000world"}]})", true, &r).code(), ErrorCode::kContainsNul);
  EXPECT_EQ(parse(R"({"messages":[{"role":"us\u0000er","content":"x"}]})", true, &r).code(), ErrorCode::kContainsNul);
  EXPECT_EQ(http_status(ErrorCode::kContainsNul), 400u);
}

TEST(OpenAi, WhatWeEmitIsValidJsonWhateverBytesItCarries) {
  const std::string bad = "no such endpoint: /\xff\xfe\xc3";
  const json e = json::parse(http_error_body(ErrorCode::kBadRequest, bad));  // throws if invalid
  EXPECT_EQ(e["error"]["message"], "no such endpoint: /\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");
  CompletionRequest r;
  r.model = "m\xff";
  EXPECT_NO_THROW(json::parse(chunk(r, "id", 0, "\xe2\x82", "", true)));
  EXPECT_NO_THROW(json::parse(response(r, "id", 0, "\x80", "stop", Usage{})));
  EXPECT_NO_THROW(json::parse(models("model\xfe.gguf", 0)));
}

}  // namespace
}  // namespace uma::openai
