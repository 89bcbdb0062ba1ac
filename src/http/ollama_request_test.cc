#include "http/ollama_request.h"
#include "http/ollama_api.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace uma::ollama {
namespace {

using json = nlohmann::json;

json chat(const std::string& body, std::vector<std::string>* ignored = nullptr) {
  std::string out;
  std::vector<std::string> none;
  const Status st = chat_body(body, &out, ignored != nullptr ? ignored : &none);
  EXPECT_TRUE(st.ok()) << st.message();
  return json::parse(out);
}

TEST(OllamaRequest, ChatMapsOptionsFormatThinkAndStreamsByDefault) {
  std::vector<std::string> ignored;
  json o = chat(R"({"model":"m","messages":[{"role":"user","content":"hi"}],"keep_alive":"5m","format":"json","think":false,
                    "options":{"num_predict":7,"temperature":0.5,"top_k":3,"stop":["x"],"num_ctx":8192,"seed":4}})", &ignored);
  EXPECT_EQ(o["stream"], true) << "Ollama streams unless told not to";
  EXPECT_EQ(o["max_tokens"], 7);
  EXPECT_EQ(o["temperature"], 0.5);
  EXPECT_EQ(o["top_k"], 3);
  EXPECT_EQ(o["seed"], 4);
  EXPECT_EQ(o["stop"], json::array({"x"}));
  EXPECT_EQ(o["response_format"]["type"], "json_object");
  EXPECT_EQ(o["chat_template_kwargs"]["enable_thinking"], false);
  EXPECT_EQ(ignored, (std::vector<std::string>{"options.num_ctx", "keep_alive"}));
  // -1 and -2 (to the end, to the context's end) are umad's default: no max_tokens.
  o = chat(R"({"model":"m","stream":false,"messages":[],"options":{"num_predict":-1},"think":"high",
              "format":{"type":"object"}})");
  EXPECT_FALSE(o.contains("max_tokens"));
  EXPECT_EQ(o["stream"], false);
  EXPECT_EQ(o["chat_template_kwargs"]["enable_thinking"], true);
  EXPECT_EQ(o["response_format"]["json_schema"]["schema"], json({{"type", "object"}}));
}

TEST(OllamaRequest, ToolCallsArgumentsBecomeJsonTextAndToolTurnsKeepTheirName) {
  const json o = chat(R"({"model":"m","tools":[{"type":"function","function":{"name":"f"}}],"messages":[
      {"role":"assistant","content":"","tool_calls":[{"function":{"name":"f","arguments":{"a":1}}}]},
      {"role":"tool","content":"42","tool_name":"f"}]})");
  EXPECT_EQ(o["tools"][0]["function"]["name"], "f");
  EXPECT_EQ(o["messages"][0]["tool_calls"][0]["function"]["arguments"], R"({"a":1})");
  EXPECT_EQ(o["messages"][0]["tool_calls"][0]["type"], "function");
  EXPECT_EQ(o["messages"][1]["name"], "f");
}

TEST(OllamaRequest, WhatUmadCannotTakeIsRefusedByName) {
  std::string out;
  std::vector<std::string> ignored;
  EXPECT_EQ(chat_body(R"({"model":"m","messages":[{"role":"user","content":"hi","images":"aGk="}]})", &out, &ignored).param(),
            "messages[].images");
  EXPECT_EQ(chat_body(R"({"messages":[]})", &out, &ignored).param(), "model");
  EXPECT_EQ(chat_body(R"({"model":"m","messages":[],"options":{"num_predict":0}})", &out, &ignored).param(), "options.num_predict");
  EXPECT_EQ(chat_body(R"({"model":"m","messages":[],"format":"yaml"})", &out, &ignored).param(), "format");
  EXPECT_EQ(chat_body("[1]", &out, &ignored).code(), ErrorCode::kBadRequest);
  EXPECT_EQ(chat_body("{", &out, &ignored).code(), ErrorCode::kInvalidJson);
  Generate g;
  ASSERT_TRUE(generate_body(R"({"model":"m","prompt":"a","suffix":"b"})", &g, &ignored).ok()) << "the route builds the FIM prompt";
  EXPECT_EQ(g.prompt, "a");
  EXPECT_EQ(g.suffix, "b");
  EXPECT_FALSE(g.load_only);
  EXPECT_EQ(generate_body(R"({"model":"m","prompt":"a","suffix":3})", &g, &ignored).param(), "suffix");
  EXPECT_EQ(generate_body(R"({"model":"m","prompt":"a","template":"{{.Prompt}}"})", &g, &ignored).param(), "template");
  EXPECT_EQ(generate_body(R"({"model":"m","prompt":"a","images":[7]})", &g, &ignored).param(), "images");
}

TEST(OllamaRequest, ImagesBecomeDataUrlPartsBeforeTheText) {
  std::string out;
  std::vector<std::string> ignored;
  ASSERT_TRUE(chat_body(R"({"model":"m","messages":[{"role":"user","content":"what","images":["QUJD"]}]})", &out, &ignored).ok());
  const json content = json::parse(out)["messages"][0]["content"];
  ASSERT_EQ(content.size(), 2u);
  EXPECT_EQ(content[0]["image_url"]["url"], "data:application/octet-stream;base64,QUJD");
  EXPECT_EQ(content[1], json::parse(R"({"type":"text","text":"what"})"));
  Generate g;
  ASSERT_TRUE(generate_body(R"({"model":"m","prompt":"p","raw":true,"images":["QUJD"]})", &g, &ignored).ok());
  EXPECT_EQ(json::parse(g.body)["prompt"], json::parse(R"({"prompt_string":"<__media__>p","multimodal_data":["QUJD"]})"));
}

TEST(OllamaRequest, GenerateIsChatAroundSystemAndPromptOrRawOrOnlyALoad) {
  std::vector<std::string> ignored;
  Generate g;
  ASSERT_TRUE(generate_body(R"({"model":"m","system":"s","prompt":"p","context":[1,2]})", &g, &ignored).ok());
  EXPECT_FALSE(g.raw);
  EXPECT_EQ(json::parse(g.body)["messages"], json::parse(R"([{"role":"system","content":"s"},{"role":"user","content":"p"}])"));
  EXPECT_EQ(ignored, std::vector<std::string>{"context"});
  ASSERT_TRUE(generate_body(R"({"model":"m","prompt":"p","raw":true})", &g, &ignored).ok());
  EXPECT_TRUE(g.raw);
  EXPECT_EQ(json::parse(g.body)["prompt"], "p");
  ASSERT_TRUE(generate_body(R"({"model":"m"})", &g, &ignored).ok());
  EXPECT_TRUE(g.load_only);
  std::string out;
  ASSERT_TRUE(embed_body(R"({"model":"m","input":["a","b"],"truncate":true})", false, &out, &ignored).ok());
  EXPECT_EQ(json::parse(out)["input"], json::array({"a", "b"}));
  EXPECT_EQ(embed_body(R"({"model":"m","prompt":["a"]})", true, &out, &ignored).param(), "prompt");
}

}  // namespace
}  // namespace uma::ollama

namespace uma::http_route {
namespace {

TEST(OllamaPull, AModelWhoseFileIsHereIsPulledAtOnceAnyOtherIsNotFound) {
  const auto have = [](const std::string& m) { return m == "here"; };
  Reply r = ollama_pull_local(R"({"model":"here"})", have);
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.content_type, "application/x-ndjson");
  EXPECT_EQ(r.body.substr(r.body.rfind('{', r.body.size() - 3)), "{\"status\":\"success\"}\n") << "streamed by default";
  r = ollama_pull_local(R"({"name":"here","stream":false})", have);  // Ollama's older field
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(nlohmann::json::parse(r.body)["status"], "success");
  r = ollama_pull_local(R"({"model":"elsewhere"})", have);
  EXPECT_EQ(r.status, 404);
  EXPECT_NE(nlohmann::json::parse(r.body)["error"].get<std::string>().find("'elsewhere'"), std::string::npos);
  for (const char* bad : {"[]", "{}", R"({"model":5})", R"({"model":"here","stream":"yes"})", "{"}) {
    EXPECT_EQ(ollama_pull_local(bad, have).status, 400) << bad;
  }
}

}  // namespace
}  // namespace uma::http_route

namespace uma {
namespace {

using json = nlohmann::json;

// The objects of an NDJSON stream, its HTTP chunk framing taken off.
std::vector<json> ndjson_objects(const std::string& chunked) {
  std::vector<json> out;
  std::size_t at = 0;
  while ((at = chunked.find('{', at)) != std::string::npos) {
    const std::size_t end = chunked.find('\n', at);
    out.push_back(json::parse(chunked.substr(at, end - at)));
    at = end;
  }
  return out;
}

TEST(OllamaAnswer, AToolCallsPiecesBecomeOneMessageWithItsArgumentsAsAnObject) {
  openai::CompletionRequest r;
  r.model = "m";
  auto w = ollama_chat_writer(r, "id", 0);
  std::string out;
  w->open(1, out);
  w->delta(0, ChatDelta{"", 0, "call_1", "get_weather", R"({"city":)"}, {}, 0, out);
  w->delta(0, ChatDelta{"", 0, "", "", R"("Paris"})"}, {}, 0, out);
  w->finish(0, ChoiceEnd{"tool_calls", ""}, {}, 0, out);
  w->close(openai::Usage{}, out);
  const std::vector<json> lines = ndjson_objects(out);
  ASSERT_EQ(lines.size(), 2u) << out;
  EXPECT_EQ(lines[0]["message"]["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(lines[0]["message"]["tool_calls"][0]["function"]["arguments"], json::parse(R"({"city":"Paris"})"));
  EXPECT_EQ(lines[0]["done"], false);
  EXPECT_EQ(lines[1]["done"], true);
  EXPECT_EQ(lines[1]["done_reason"], "stop");

  const ToolCall call{"call_1", "get_weather", R"({"city":"Oslo"})"};
  const WholeChoice whole{"", "", ChoiceEnd{"tool_calls", ""}, {}, std::span<const ToolCall>(&call, 1)};
  const json j = json::parse(ollama_chat_writer(r, "id", 0)->whole(std::span<const WholeChoice>(&whole, 1), openai::Usage{}));
  EXPECT_EQ(j["message"]["tool_calls"][0]["function"]["arguments"]["city"], "Oslo");
  EXPECT_EQ(j["message"]["role"], "assistant");
}

}  // namespace
}  // namespace uma
