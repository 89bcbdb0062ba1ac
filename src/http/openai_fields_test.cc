// The field policy and the extensions of vLLM and llama-server (http/openai_fields.cc): the bodies
// benchmark clients and front ends send are read with those servers' meaning.
#include <gtest/gtest.h>

#include <cmath>

#include "http/openai.h"

namespace uma::openai {
namespace {

Status parse(const std::string& body, bool chat, CompletionRequest* r, bool strict = false) {
  Limits limits{4000};
  limits.strict_fields = strict;
  return parse_request(body, chat, limits, SamplingParams{}, r);
}

TEST(OpenAiFields, UnknownFieldsAreIgnoredAndNamedUnlessStrict) {
  CompletionRequest r;
  ASSERT_TRUE(parse(R"({"prompt":"x","frobnicate":1,"mirostat":2,"typical_p":null})", false, &r).ok());
  EXPECT_EQ(r.ignored_fields, (std::vector<std::string>{"frobnicate", "mirostat"})) << "null is absent";
  const Status st = parse(R"({"prompt":"x","frobnicate":1})", false, &r, /*strict=*/true);
  EXPECT_EQ(st.code(), ErrorCode::kBadRequest);
  EXPECT_EQ(st.param(), "frobnicate");
  ASSERT_TRUE(parse(R"({"prompt":"x","top_k":40})", false, &r, /*strict=*/true).ok()) << "extensions are known fields";
  EXPECT_TRUE(r.ignored_fields.empty());
}

TEST(OpenAiFields, BenchmarkClientsFixedLengthsAreHonoured) {
  CompletionRequest r;
  // vllm bench serve's completions backend, guidellm, inference-perf, aiperf: their bodies' fields.
  ASSERT_TRUE(parse(R"({"model":"m","prompt":"x","max_tokens":64,"temperature":0.0,"repetition_penalty":1.0,
                        "ignore_eos":true,"min_tokens":64,"stream":true,"stream_options":{"include_usage":true},
                        "top_k":-1,"logprobs":null})", false, &r).ok());
  EXPECT_TRUE(r.sampling.ignore_eos);
  EXPECT_EQ(r.sampling.min_tokens, 64);
  EXPECT_FLOAT_EQ(r.sampling.repeat_penalty, 1.0f);
  EXPECT_EQ(r.sampling.top_k, 0) << "-1 is off";
  ASSERT_TRUE(parse(R"({"prompt":"x","ignore_eos":false})", false, &r).ok()) << "inference-perf sends false too";
  EXPECT_FALSE(r.sampling.ignore_eos);
  EXPECT_EQ(parse(R"({"prompt":"x","ignore_eos":1})", false, &r).param(), "ignore_eos");
  EXPECT_EQ(parse(R"({"prompt":"x","min_tokens":-1})", false, &r).param(), "min_tokens");
  EXPECT_EQ(parse(R"({"prompt":"x","repetition_penalty":0})", false, &r).param(), "repetition_penalty");
}

TEST(OpenAiFields, LogitBiasTakesTokenIdsAndTexts) {
  CompletionRequest r;
  ASSERT_TRUE(parse(R"({"prompt":"x","logit_bias":{"42":-100,"7":5.5,"hello":false}})", false, &r).ok());
  ASSERT_EQ(r.sampling.logit_bias.size(), 2u);
  EXPECT_EQ(r.sampling.logit_bias[0].token, 42);
  EXPECT_FLOAT_EQ(r.sampling.logit_bias[0].bias, -100.0f);
  ASSERT_EQ(r.sampling.text_bias.size(), 1u);
  EXPECT_EQ(r.sampling.text_bias[0].first, "hello");
  EXPECT_TRUE(std::isinf(r.sampling.text_bias[0].second));
  ASSERT_TRUE(parse(R"({"prompt":"x","logit_bias":[[15,1.0],["world",-2]]})", false, &r).ok());
  EXPECT_EQ(r.sampling.logit_bias.size(), 1u);
  EXPECT_EQ(r.sampling.text_bias.size(), 1u);
  EXPECT_EQ(parse(R"({"prompt":"x","logit_bias":{"1":"a"}})", false, &r).param(), "logit_bias");
  EXPECT_EQ(parse(R"({"prompt":"x","logit_bias":{"-3":1}})", false, &r).param(), "logit_bias");
}

TEST(OpenAiFields, StopsStopTokenIdsAndPrompts) {
  CompletionRequest r;
  std::string stops = "[";
  for (int i = 0; i < 16; ++i) stops += std::string(i ? "," : "") + "\"s" + std::to_string(i) + "\"";
  ASSERT_TRUE(parse(R"({"prompt":"x","stop":)" + stops + R"(],"stop_token_ids":[2,13]})", false, &r).ok());
  EXPECT_EQ(r.stop.size(), 16u) << "Continue sends more than 4";
  EXPECT_EQ(r.sampling.stop_token_ids, (std::vector<std::int32_t>{2, 13}));
  ASSERT_TRUE(parse(R"({"prompt":[1,2,3]})", false, &r).ok());
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_EQ(r.prompts[0].tokens, (std::vector<std::int32_t>{1, 2, 3}));
  ASSERT_TRUE(parse(R"({"prompt":["a","b"],"n":2})", false, &r).ok());
  ASSERT_EQ(r.prompts.size(), 2u);
  EXPECT_EQ(r.prompts[1].text, "b");
  ASSERT_TRUE(parse(R"({"prompt":[[5,6],[7]]})", false, &r).ok());
  EXPECT_EQ(r.prompts[1].tokens, std::vector<std::int32_t>{7});
  EXPECT_EQ(parse(R"({"prompt":["a","b"],"n":9})", false, &r).param(), "prompt") << "18 choices";
  EXPECT_EQ(parse(R"({"prompt":[[]]})", false, &r).param(), "prompt");
  // llama-server's: ids and text mixed in one prompt (pieces in turn), a prompt object.
  ASSERT_TRUE(parse(R"({"prompt":[1,2,"a",3]})", false, &r).ok());
  ASSERT_EQ(r.prompts.size(), 1u);
  ASSERT_EQ(r.prompts[0].mixed.size(), 3u);
  EXPECT_EQ(r.prompts[0].mixed[0].tokens, (std::vector<std::int32_t>{1, 2}));
  EXPECT_EQ(r.prompts[0].mixed[1].text, "a");
  EXPECT_EQ(r.prompts[0].mixed[2].tokens, std::vector<std::int32_t>{3});
  ASSERT_TRUE(parse(R"({"prompt":[{"prompt_string":"p"},[4,"b"],"c"]})", false, &r).ok());
  ASSERT_EQ(r.prompts.size(), 3u);
  EXPECT_EQ(r.prompts[0].text, "p");
  EXPECT_EQ(r.prompts[1].mixed.size(), 2u);
  EXPECT_EQ(parse(R"({"prompt":[1,{}]})", false, &r).param(), "prompt");
  EXPECT_EQ(parse(R"({"prompt":[1,""]})", false, &r).param(), "prompt");
  EXPECT_EQ(parse(R"({"prompt":[1,2.5]})", false, &r).param(), "prompt");
  EXPECT_EQ(parse(R"({"prompt":{"prompt_string":5}})", false, &r).param(), "prompt.prompt_string");
  EXPECT_EQ(parse(R"({"prompt":{"prompt_string":"x","images":[]}})", false, &r).param(), "prompt.images");
  EXPECT_EQ(parse(R"({"prompt":{"prompt_string":"x","multimodal_data":["aGk="]}})", false, &r).param(), "prompt.multimodal_data")
      << "bytes that are no image";
  // A GIF header of 2x2 pixels: an image the edge takes (the projector decodes it later).
  ASSERT_TRUE(parse(R"({"prompt":{"prompt_string":"<__media__> x","multimodal_data":["R0lGODlhAgACAAAAACw="]}})", false, &r).ok());
  EXPECT_EQ(r.prompts.at(0).images.size(), 1u);
  EXPECT_EQ(parse(R"({"prompt":[-1]})", false, &r).param(), "prompt");
  EXPECT_EQ(parse(R"({"prompt":"x","stop_token_ids":[1.5]})", false, &r).param(), "stop_token_ids");
}

TEST(OpenAiFields, GrammarsSchemasAndLlamaServersNames) {
  CompletionRequest r;
  ASSERT_TRUE(parse(R"({"prompt":"x","grammar":"root ::= \"a\"","n_predict":9,"n_probs":3,"cache_prompt":true})", false, &r).ok());
  EXPECT_EQ(r.grammar, "root ::= \"a\"");
  EXPECT_EQ(r.max_tokens, 9);
  EXPECT_EQ(r.logprobs, 3);
  EXPECT_EQ(r.sampling.logprobs, 3);
  ASSERT_TRUE(parse(R"({"prompt":"x","n_predict":-1})", false, &r).ok());
  EXPECT_FALSE(r.max_tokens.has_value());
  ASSERT_TRUE(parse(R"({"prompt":"x","json_schema":{"type":"object"}})", false, &r).ok());
  EXPECT_EQ(r.json_schema, R"({"type":"object"})");
  EXPECT_EQ(parse(R"({"prompt":"x","grammar":"g","json_schema":{}})", false, &r).param(), "grammar");
  // json_object with a schema (llama-server): the schema holds; a schema that is not an object is a 400.
  ASSERT_TRUE(parse(R"({"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_object","schema":{"type":"array"}}})", true, &r).ok());
  EXPECT_EQ(r.json_schema, R"({"type":"array"})");
  EXPECT_EQ(parse(R"({"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_object","schema":123}})", true, &r).param(),
            "response_format.schema");
  EXPECT_EQ(parse(R"({"prompt":"x","skip_special_tokens":false})", false, &r).param(), "skip_special_tokens");
}

TEST(OpenAiFields, GenerationPromptAndContinuationAsLlamaServerTakesThem) {
  const std::string user = R"({"role":"user","content":"x"})", assistant = R"({"role":"assistant","content":"y"})";
  CompletionRequest r;
  ASSERT_TRUE(parse(R"({"messages":[)" + user + R"(]})", true, &r).ok());
  EXPECT_TRUE(r.add_generation_prompt);
  EXPECT_EQ(r.continuation, ChatContinuation::kNone);
  // A last assistant message is continued (llama-server's prefill) unless the request says otherwise.
  r = {};
  ASSERT_TRUE(parse(R"({"messages":[)" + user + "," + assistant + R"(]})", true, &r).ok());
  EXPECT_FALSE(r.add_generation_prompt);
  EXPECT_EQ(r.continuation, ChatContinuation::kAuto);
  r = {};
  ASSERT_TRUE(parse(R"({"messages":[)" + user + "," + assistant + R"(],"add_generation_prompt":true})", true, &r).ok());
  EXPECT_TRUE(r.add_generation_prompt);
  EXPECT_EQ(r.continuation, ChatContinuation::kNone);
  r = {};
  ASSERT_TRUE(parse(R"({"messages":[)" + user + "," + assistant + R"(],"continue_final_message":"reasoning_content"})", true, &r).ok());
  EXPECT_EQ(r.continuation, ChatContinuation::kReasoning);
  r = {};
  ASSERT_TRUE(parse(R"({"messages":[)" + user + R"(],"add_generation_prompt":false})", true, &r).ok());
  EXPECT_FALSE(r.add_generation_prompt);
  EXPECT_EQ(parse(R"({"messages":[)" + user + R"(],"continue_final_message":true})", true, &r).param(), "continue_final_message")
      << "nothing to continue";
  EXPECT_EQ(parse(R"({"messages":[)" + user + "," + assistant + R"(],"continue_final_message":true,"add_generation_prompt":true})",
                  true, &r).param(), "continue_final_message");
  EXPECT_EQ(parse(R"({"messages":[)" + user + "," + assistant + "," + assistant + R"(]})", true, &r).param(), "messages");
  EXPECT_EQ(parse(R"({"messages":[)" + user + R"(],"continue_final_message":"maybe"})", true, &r).param(), "continue_final_message");
}

TEST(OpenAiFields, ThinkingSwitches) {
  CompletionRequest r;
  ASSERT_TRUE(parse(R"({"messages":[{"role":"user","content":"x"}],"chat_template_kwargs":{"enable_thinking":false,"x":[1]}})", true, &r).ok());
  EXPECT_EQ(r.enable_thinking, std::optional<bool>(false));
  EXPECT_EQ(r.template_kwargs.at("x"), "[1]");
  ASSERT_TRUE(parse(R"({"messages":[{"role":"user","content":"x"}],"reasoning_effort":"none"})", true, &r).ok());
  EXPECT_EQ(r.enable_thinking, std::optional<bool>(false));
  ASSERT_TRUE(parse(R"({"messages":[{"role":"user","content":"x"}],"reasoning_effort":"high"})", true, &r).ok());
  EXPECT_EQ(r.enable_thinking, std::optional<bool>(true));
  EXPECT_EQ(r.template_kwargs.at("reasoning_effort"), "\"high\"");
  EXPECT_EQ(parse(R"({"messages":[{"role":"user","content":"x"}],"chat_template_kwargs":{"enable_thinking":"no"}})", true, &r).param(),
            "chat_template_kwargs.enable_thinking");
}

}  // namespace
}  // namespace uma::openai
