#include "http/http_router.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace uma::http_route {
namespace {

namespace http = boost::beast::http;
using json = nlohmann::json;

struct Fixture {
  openai::Limits limits{1000};
  SamplingParams sampling;
  ServerMetrics metrics;
  struct NoParser final : ChatOutputParser {
    std::vector<ChatDelta> feed(std::string_view, bool) override { return {}; }
    std::unique_ptr<ChatOutputParser> fresh() const override { return std::make_unique<NoParser>(); }
    const std::string& content() const override { return text; }
    const std::string& reasoning() const override { return text; }
    const std::vector<ToolCall>& tool_calls() const override { return calls; }
    std::string text;
    std::vector<ToolCall> calls;
  };
  ChatTemplate chat = [](const ChatRequest& r, ChatPrompt* out) {
    for (const auto& x : r.turns) out->text += "<" + x.role + ">" + x.content;
    if (!r.tools.empty()) {  // what a family's template gives for tools
      out->grammar = "root ::= \"call " + r.tools[0].name + "\"";
      out->grammar_lazy = r.tool_choice == ToolChoice::kAuto;
      out->grammar_triggers = {"call"};
      out->stops = {"<end>"};
      out->parser = std::make_unique<NoParser>();
    }
    return Status::Ok();
  };
  SchemaToGrammar grammar = [](const std::string& schema, std::string* gbnf) {
    if (schema.find("$ref") != std::string::npos) return Status(ErrorCode::kBadRequest, "cannot resolve $ref");
    *gbnf = "root ::= " + schema;
    return Status::Ok();
  };
  Context ctx() {
    Context c;
    c.schema_to_grammar = &grammar;
    c.ready = true;
    c.model_id = "m.gguf";
    c.chat_template = &chat;
    c.limits = &limits;
    c.default_sampling = &sampling;
    c.metrics = &metrics;
    return c;
  }
};

const Reply& reply_of(const Routed& r) { return std::get<Reply>(r.action); }

TEST(HttpRouter, EndpointsAndMethods) {
  Fixture f;
  EXPECT_EQ(reply_of(route(http::verb::get, "/health", "", f.ctx())).status, 200u);
  EXPECT_EQ(reply_of(route(http::verb::get, "/health?x=1", "", f.ctx())).status, 200u);
  EXPECT_EQ(reply_of(route(http::verb::post, "/health", "", f.ctx())).status, 405u);
  EXPECT_EQ(reply_of(route(http::verb::get, "/v1/completions", "", f.ctx())).status, 405u);
  EXPECT_EQ(json::parse(reply_of(route(http::verb::get, "/v1/models", "", f.ctx())).body)["data"][0]["id"], "m.gguf");
  EXPECT_TRUE(json::parse(reply_of(route(http::verb::get, "/models", "", f.ctx())).body)["data"][0]["aliases"].is_array())
      << "llama-server's field";
  EXPECT_NE(reply_of(route(http::verb::get, "/metrics", "", f.ctx())).body.find("uma_errors_total"), std::string::npos);
  Context loading = f.ctx();
  loading.ready = false;
  EXPECT_EQ(reply_of(route(http::verb::get, "/health", "", loading)).status, 503u);
  const Routed early = route(http::verb::post, "/v1/completions", R"({"prompt":"x"})", loading);
  EXPECT_EQ(reply_of(early).status, 503u);
  EXPECT_FALSE(early.completion_endpoint);  // not counted in requests_total
}

TEST(HttpRouter, ToolsBringTheTemplatesGrammarStopsAndParserBesideTheRequestsSampling) {
  Fixture f;
  const Routed r = route(http::verb::post, "/v1/chat/completions",
                         R"({"messages":[{"role":"user","content":"x"}],"temperature":0.5,"stop":"zz",
                             "tools":[{"type":"function","function":{"name":"f"}}]})", f.ctx());
  ASSERT_TRUE(std::holds_alternative<Completion>(r.action));
  const Completion& c = std::get<Completion>(r.action);
  EXPECT_EQ(c.request.sampling.grammar, R"(root ::= "call f")");
  EXPECT_TRUE(c.request.sampling.grammar_lazy);
  EXPECT_EQ(c.request.sampling.grammar_triggers, std::vector<std::string>{"call"});
  EXPECT_FLOAT_EQ(c.request.sampling.temperature, 0.5f);
  EXPECT_EQ(c.request.stop, (std::vector<std::string>{"zz", "<end>"}));
  EXPECT_TRUE(c.tool_parser != nullptr);
  const Routed plain = route(http::verb::post, "/v1/chat/completions", R"({"messages":[{"role":"user","content":"x"}]})", f.ctx());
  EXPECT_TRUE(std::get<Completion>(plain.action).tool_parser == nullptr);
  EXPECT_TRUE(std::get<Completion>(plain.action).request.sampling.grammar.empty());
}

TEST(HttpRouter, SlotsAndMetricsTurnedOffAnswer501AsLlamaServersDo) {
  Fixture f;
  Context c = f.ctx();
  c.slots_endpoint = false;
  c.metrics_endpoint = false;
  for (const char* path : {"/slots", "/metrics"}) {
    const Routed r = route(http::verb::get, path, "", c);
    EXPECT_EQ(reply_of(r).status, 501u) << path;
    EXPECT_EQ(json::parse(reply_of(r).body)["error"]["type"], "not_supported_error") << path;
  }
  EXPECT_EQ(reply_of(route(http::verb::get, "/metrics", "", f.ctx())).status, 200u) << "on by default";
}

TEST(HttpRouter, TheResponsesApiAnswersWithAndWithoutV1AsLlamaServersDoes) {
  Fixture f;
  for (const char* path : {"/v1/responses", "/responses"}) {
    const Routed r = route(http::verb::post, path, R"({"input":"hi","max_output_tokens":4})", f.ctx());
    ASSERT_TRUE(std::holds_alternative<Completion>(r.action)) << path << ": " << reply_of(r).body;
    EXPECT_EQ(std::get<Completion>(r.action).id_prefix, "resp_") << path;
  }
}

TEST(HttpRouter, AResponseFormatSchemaBecomesTheRequestsGrammarOrA400NamingIt) {
  Fixture f;
  const std::string head = R"({"messages":[{"role":"user","content":"x"}],"response_format":)";
  Routed r = route(http::verb::post, "/v1/chat/completions",
                   head + R"({"type":"json_schema","json_schema":{"schema":{"type":"object"}}}})", f.ctx());
  ASSERT_TRUE(std::holds_alternative<Completion>(r.action));
  EXPECT_EQ(std::get<Completion>(r.action).request.sampling.grammar, R"(root ::= {"type":"object"})");
  r = route(http::verb::post, "/v1/chat/completions",
            head + R"({"type":"json_schema","json_schema":{"schema":{"$ref":"#/x"}}}})", f.ctx());
  ASSERT_TRUE(std::holds_alternative<Reply>(r.action));
  EXPECT_EQ(reply_of(r).status, 400u);
  EXPECT_EQ(json::parse(reply_of(r).body)["error"]["param"], "response_format");
  SchemaToGrammar none;
  Context without = f.ctx();
  without.schema_to_grammar = &none;
  r = route(http::verb::post, "/v1/chat/completions", head + R"({"type":"json_object"}})", without);
  EXPECT_EQ(reply_of(r).status, 400u) << "no converter: refused, never ignored";
}

TEST(HttpRouter, ANonUtf8PathGetsA404WithValidJson) {
  Fixture f;
  for (const char* target : {"/\xff\xfe", "/v1/\xff", "/\xc3"}) {
    const Routed r = route(http::verb::get, target, "", f.ctx());
    EXPECT_EQ(reply_of(r).status, 404u);
    const json body = json::parse(reply_of(r).body);  // throws if not valid JSON
    EXPECT_EQ(body["error"]["type"], "invalid_request_error");
    EXPECT_EQ(reply_of(route(http::verb::post, target, "{}", f.ctx())).status, 404u);
  }
}

TEST(HttpRouter, CompletionsBecomeRequestsAndBadBodiesCountedErrors) {
  Fixture f;
  Routed r = route(http::verb::post, "/v1/completions", R"({"prompt":"hi","max_tokens":5,"stop":["x"]})", f.ctx());
  ASSERT_TRUE(r.completion_endpoint);
  const Completion& c = std::get<Completion>(r.action);
  EXPECT_EQ(c.request.prompt, "hi");
  EXPECT_EQ(c.request.max_tokens, 5);
  EXPECT_EQ(c.request.stop, std::vector<std::string>{"x"});
  r = route(http::verb::post, "/v1/chat/completions", R"({"messages":[{"role":"user","content":"hey"}]})", f.ctx());
  const Completion& chat = std::get<Completion>(r.action);
  EXPECT_EQ(chat.request.prompt, "<user>hey");
  EXPECT_TRUE(chat.request.parse_special);
  EXPECT_EQ(chat.request.max_tokens, 0) << "not asked: the scheduler applies the daemon's default";
  r = route(http::verb::post, "/v1/completions", R"({"prompt":"x","max_tokens":100000})", f.ctx());
  EXPECT_EQ(std::get<Completion>(r.action).request.max_tokens, 100000) << "the context decides, not the edge";
  r = route(http::verb::post, "/v1/completions", R"({"prompt":"x","stream_options":{"include_usage":1}})", f.ctx());
  EXPECT_EQ(reply_of(r).status, 400u);
  EXPECT_EQ(reply_of(r).error, ErrorCode::kBadRequest);
  EXPECT_EQ(json::parse(reply_of(r).body)["error"]["param"], "stream_options.include_usage");
  ChatTemplate none;
  Context no_chat = f.ctx();
  no_chat.chat_template = &none;
  r = route(http::verb::post, "/v1/chat/completions", R"({"messages":[{"role":"user","content":"hey"}]})", no_chat);
  EXPECT_EQ(reply_of(r).status, 400u);
}

}  // namespace
}  // namespace uma::http_route
