#include "ipc/json_messages.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "ipc/wire.h"

namespace uma {
namespace {

Status parse(const std::string& payload, ClientMessage* msg = nullptr, std::string* id = nullptr) {
  ClientMessage m;
  std::string i;
  RequestLimits limits{/*max_prompt_bytes=*/100};
  Status st = parse_client_message(payload, limits, msg ? msg : &m, id ? id : &i);
  return st;
}

TEST(JsonMessages, FullRequestParsesIntoTypedFieldsAndUnknownFieldsAreIgnored) {
  ClientMessage msg;
  std::string id;
  const Status st = parse(R"({"id":"r1","prompt":"hello","max_tokens":7,"temperature":0.5,"top_p":0.9,
      "top_k":40,"min_p":0.05,"repeat_penalty":1.1,"frequency_penalty":0.2,"presence_penalty":-0.3,"seed":42,
      "stop":["\n\n","END"],"stream":false,"keep_alive":true,"slo":{"target_ttft_ms":100,"target_tbt_ms":50},
      "metadata":{"tenant":"t1","n":[1,2]},"future_field":{"x":1}})", &msg, &id);
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ(id, "r1");
  const auto& r = std::get<WireRequest>(msg);
  EXPECT_EQ(r.prompt, "hello");
  EXPECT_EQ(r.max_tokens, 7);
  EXPECT_FLOAT_EQ(r.sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r.sampling.top_p, 0.9f);
  EXPECT_EQ(r.sampling.top_k, 40);
  EXPECT_FLOAT_EQ(r.sampling.presence_penalty, -0.3f);
  EXPECT_EQ(r.sampling.seed, 42u);
  EXPECT_EQ(r.stop, (std::vector<std::string>{"\n\n", "END"}));
  EXPECT_FALSE(r.stream);
  EXPECT_TRUE(r.keep_alive);
  EXPECT_DOUBLE_EQ(r.slo_ttft_ms, 100);
  EXPECT_DOUBLE_EQ(r.slo_tbt_ms, 50);
  EXPECT_EQ(r.metadata_json, R"({"tenant":"t1","n":[1,2]})") << "echoed in the client's key order";
}

TEST(JsonMessages, EncodeThenParseRoundTrips) {
  WireRequest r;
  r.id = "x";
  r.prompt = "p \xC3\xA9";
  r.max_tokens = 3;
  r.stop = {"a"};
  r.sampling.temperature = 0.25f;
  r.metadata_json = R"({"k":"v"})";
  ClientMessage msg;
  ASSERT_TRUE(parse(encode_request(r), &msg).ok());
  const auto& back = std::get<WireRequest>(msg);
  EXPECT_EQ(back.prompt, r.prompt);
  EXPECT_EQ(back.max_tokens, 3);
  EXPECT_EQ(back.stop, r.stop);
  EXPECT_FLOAT_EQ(back.sampling.temperature, 0.25f);
  EXPECT_EQ(back.metadata_json, r.metadata_json);

  WireRequest g = r;
  g.sampling.grammar = "root ::= \"yes\" | \"no\"";
  ASSERT_TRUE(parse(encode_request(g), &msg).ok());
  EXPECT_EQ(std::get<WireRequest>(msg).sampling.grammar, g.sampling.grammar);
  WireRequest js = r;
  js.json_schema = R"({"type":"object","properties":{"c":{"enum":["a"]}}})";
  ASSERT_TRUE(parse(encode_request(js), &msg).ok());
  EXPECT_EQ(std::get<WireRequest>(msg).json_schema, js.json_schema);
  EXPECT_EQ(std::get<WireRequest>(msg).sampling.logprobs, -1) << "none unless asked";
  WireRequest lp = r;
  lp.sampling.logprobs = 3;
  ASSERT_TRUE(parse(encode_request(lp), &msg).ok());
  EXPECT_EQ(std::get<WireRequest>(msg).sampling.logprobs, 3);
  EXPECT_TRUE(std::get<WireRequest>(msg).prediction.empty());
  WireRequest pr = r;
  pr.prediction = "the expected output";
  ASSERT_TRUE(parse(encode_request(pr), &msg).ok());
  EXPECT_EQ(std::get<WireRequest>(msg).prediction, pr.prediction);
}

// A value nested a few hundred thousand deep once killed umad: the metadata is echoed, and
// dump() recurses once per level (a stack overflow, not an exception).
TEST(JsonMessages, NestingDeeperThanTheBoundIsABadRequest) {
  const auto nested = [](std::size_t depth) {
    return R"({"id":"a","prompt":"hi","metadata":{"x":)" + std::string(depth, '[') + std::string(depth, ']') + "}}";
  };
  EXPECT_TRUE(parse(nested(wire::kMaxJsonDepth - 2)).ok());
  const Status st = parse(nested(200000));
  EXPECT_EQ(st.code(), ErrorCode::kBadRequest);
  EXPECT_NE(st.message().find("nest"), std::string::npos) << st.message();
  // Brackets inside strings are text, not nesting.
  EXPECT_TRUE(parse(R"({"id":"a","prompt":")" + std::string(90, '[') + R"("})").ok());
  EXPECT_TRUE(parse(R"({"id":"a","prompt":"\"[[[[","metadata":{"k":"]]]]\\"}})").ok());
}

TEST(JsonMessages, CancelAndMetrics) {
  ClientMessage msg;
  ASSERT_TRUE(parse(encode_cancel("abc"), &msg).ok());
  EXPECT_EQ(std::get<WireCancel>(msg).id, "abc");
  ASSERT_TRUE(parse(encode_metrics_request(), &msg).ok());
  EXPECT_TRUE(std::holds_alternative<WireMetricsRequest>(msg));
}

TEST(JsonMessages, InvalidJsonIsItsOwnError) {
  EXPECT_EQ(parse("{not json").code(), ErrorCode::kInvalidJson);
  EXPECT_EQ(parse("").code(), ErrorCode::kInvalidJson);
  EXPECT_EQ(parse("{\"id\":\"a\",\"prompt\":\"\xC3\x28\"}").code(), ErrorCode::kInvalidJson);  // bad UTF-8
  EXPECT_EQ(parse("[1,2]").code(), ErrorCode::kBadRequest);
}

TEST(JsonMessages, EachBadFieldIsNamed) {
  struct Case { const char* payload; const char* field; };
  const Case cases[] = {
      {R"({"prompt":"x"})", "id"},
      {R"({"id":7,"prompt":"x"})", "id"},
      {R"({"id":"a"})", "prompt"},
      {R"({"id":"a","prompt":5})", "prompt"},
      {R"({"id":"a","prompt":""})", "prompt"},
      {R"({"id":"a","prompt":"x\u0000y"})", "prompt"},
      {R"({"id":"a","prompt":"x","max_tokens":"9"})", "max_tokens"},
      {R"({"id":"a","prompt":"x","grammar":""})", "grammar"},
      {R"({"id":"a","prompt":"x","prediction":5})", "prediction"},
      {R"({"id":"a","prompt":"x","grammar":5})", "grammar"},
      {R"({"id":"a","prompt":"x","json_schema":"{}"})", "json_schema"},
      {R"({"id":"a","prompt":"x","grammar":"root ::= \"a\"","json_schema":{}})", "json_schema"},
      {R"({"id":"a","prompt":"x","max_tokens":0})", "max_tokens"},
      {R"({"id":"a","prompt":"x","max_tokens":1073741825})", "max_tokens"},
      {R"({"id":"a","prompt":"x","max_tokens":2.5})", "max_tokens"},
      {R"({"id":"a","prompt":"x","temperature":"hot"})", "temperature"},
      {R"({"id":"a","prompt":"x","temperature":-1})", "temperature"},
      {R"({"id":"a","prompt":"x","top_p":1.5})", "top_p"},
      {R"({"id":"a","prompt":"x","top_k":-1})", "top_k"},
      {R"({"id":"a","prompt":"x","min_p":true})", "min_p"},
      {R"({"id":"a","prompt":"x","repeat_penalty":0})", "repeat_penalty"},
      {R"({"id":"a","prompt":"x","frequency_penalty":3})", "frequency_penalty"},
      {R"({"id":"a","prompt":"x","presence_penalty":"no"})", "presence_penalty"},
      {R"({"id":"a","prompt":"x","seed":-1})", "seed"},
      {R"({"id":"a","prompt":"x","seed":4294967296})", "seed"},
      {R"({"id":"a","prompt":"x","stop":"END"})", "stop"},
      {R"({"id":"a","prompt":"x","stop":[1]})", "stop"},
      {R"({"id":"a","prompt":"x","stop":[""]})", "stop"},
      {R"({"id":"a","prompt":"x","stream":"yes"})", "stream"},
      {R"({"id":"a","prompt":"x","logprobs":21})", "logprobs"},
      {R"({"id":"a","prompt":"x","logprobs":true})", "logprobs"},
      {R"({"id":"a","prompt":"x","keep_alive":1})", "keep_alive"},
      {R"({"id":"a","prompt":"x","slo":5})", "slo"},
      {R"({"id":"a","prompt":"x","slo":{"target_ttft_ms":"soon"}})", "slo.target_ttft_ms"},
      {R"({"id":"a","prompt":"x","metadata":[1]})", "metadata"},
      {R"({"id":"a","event":"pause"})", "event"},
      {R"({"type":"reboot"})", "type"},
  };
  for (const Case& c : cases) {
    std::string id;
    ClientMessage msg;
    const Status st = parse(c.payload, &msg, &id);
    EXPECT_EQ(st.code(), ErrorCode::kBadRequest) << c.payload;
    EXPECT_NE(st.message().find(std::string("'") + c.field + "'"), std::string::npos) << c.payload << " -> " << st.message();
    EXPECT_EQ(st.param(), c.field) << c.payload;
  }
}

TEST(JsonMessages, ErrorEventsCarryTheFieldAtFault) {
  WireEvent e;
  ASSERT_TRUE(parse_event(encode_error_event("r1", ErrorCode::kContextExceeded, "too long", "max_tokens"), &e).ok());
  EXPECT_EQ(e.param, "max_tokens");
  ASSERT_TRUE(parse_event(encode_error_event("r1", ErrorCode::kOverloaded, "busy"), &e).ok());
  EXPECT_EQ(e.param, "") << "no field at fault: no param";
  EXPECT_EQ(e.raw.find("param"), std::string::npos);
}

TEST(JsonMessages, PromptOverTheLimitIsALimitErrorWithTheId) {
  std::string id;
  ClientMessage msg;
  const Status st = parse(R"({"id":"big","prompt":")" + std::string(101, 'x') + "\"}", &msg, &id);
  EXPECT_EQ(st.code(), ErrorCode::kPromptTooLarge);
  EXPECT_EQ(id, "big");
}

TEST(JsonMessages, EventsRoundTripThroughTheClientParser) {
  WireEvent e;
  ASSERT_TRUE(parse_event(encode_token_event("r", "t\"x\n", 12), &e).ok());
  EXPECT_EQ(e.kind, WireEvent::Kind::kToken);
  EXPECT_EQ(e.text, "t\"x\n");
  EXPECT_EQ(e.token_id, 12);
  std::string full = "all of it";
  EosFields f{"length", 3, 4, 1.5, 20.0, 99.0, &full, R"({"a":1})"};
  f.bytes_per_token = 1.5e9;
  ASSERT_TRUE(parse_event(encode_eos_event("r", f), &e).ok());
  EXPECT_DOUBLE_EQ(e.bytes_per_token, 1.5e9);
  EXPECT_EQ(e.kind, WireEvent::Kind::kEos);
  EXPECT_EQ(e.reason, "length");
  EXPECT_EQ(e.text, "all of it");
  EXPECT_EQ(e.completion_tokens, 4);
  EXPECT_DOUBLE_EQ(e.ttft_ms, 20.0);
  EXPECT_EQ(e.metadata_json, R"({"a":1})");
  EXPECT_EQ(e.accepted_prediction_tokens, -1) << "only for a request with a prediction";
  f.prediction = true;
  f.accepted_prediction_tokens = 3;
  f.rejected_prediction_tokens = 1;
  ASSERT_TRUE(parse_event(encode_eos_event("r", f), &e).ok());
  EXPECT_EQ(e.accepted_prediction_tokens, 3);
  EXPECT_EQ(e.rejected_prediction_tokens, 1);
  const std::vector<LogprobEntry> lp = {{{7, "\xe2\x82", -0.5f}, {{7, "\xe2\x82", -0.5f}, {9, "a", -1.25f}}}};
  ASSERT_TRUE(parse_event(encode_token_event("r", "x", 7, lp), &e).ok());
  ASSERT_EQ(e.logprobs.size(), 1u);
  EXPECT_EQ(e.logprobs[0].chosen.text, "\xe2\x82") << "a token's exact bytes, even part of a code point";
  EXPECT_FLOAT_EQ(e.logprobs[0].chosen.logprob, -0.5f);
  ASSERT_EQ(e.logprobs[0].top.size(), 2u);
  EXPECT_EQ(e.logprobs[0].top[1].token, 9);
  EXPECT_EQ(nlohmann::json::parse(encode_token_event("r", "x", 7)).count("logprobs"), 0u) << "only when asked";
  ASSERT_TRUE(parse_event(encode_error_event("r", ErrorCode::kContextExceeded, "too long"), &e).ok());
  EXPECT_EQ(e.code, "E_LIMIT_CONTEXT");
  ASSERT_TRUE(parse_event(encode_metrics_event(R"({"x":1})"), &e).ok());
  EXPECT_EQ(e.kind, WireEvent::Kind::kMetrics);
}

}  // namespace
}  // namespace uma
