// Chat templates as real model families ship them (the template files that come with the pinned
// llama.cpp source, models/templates/), rendered through llama.cpp's Jinja engine, byte-exact
// against the prompt text each template is written to produce.
#include "chat/chat_templates.h"

#include <gtest/gtest.h>

#include <ctime>
#include <fstream>
#include <sstream>

namespace uma {
namespace {

std::string read_template(const std::string& name) {
  std::ifstream f(std::string(UMA_LLAMA_TEMPLATES) + "/" + name + ".jinja");
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// Today's date as Llama 3.x's template prints it (llama.cpp reads the system clock, local time).
std::string today() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%d %b %Y", std::localtime(&t));
  return buf;
}

const std::vector<ChatTurn> kConversation = {
    {"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello!"}, {"user", "Bye"}};
const std::vector<ChatTurn> kNoSystem = {{"user", "Hi"}, {"assistant", "Hello!"}, {"user", "Bye"}};

std::string render(const std::string& file, const std::vector<ChatTurn>& turns, const std::string& bos,
                   const std::string& eos) {
  const std::string src = read_template(file);
  EXPECT_FALSE(src.empty()) << file << " not found under " << UMA_LLAMA_TEMPLATES;
  Status st;
  auto t = ChatTemplates::from_text(src, bos, eos, &st);
  EXPECT_TRUE(t != nullptr) << st.to_string();
  if (t == nullptr) return "";
  std::string out;
  st = t->render(turns, &out);
  EXPECT_TRUE(st.ok()) << st.to_string();
  return out;
}

TEST(ChatTemplates, Llama31) {
  const auto expected = [](const std::string& date) {
    return "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
           "Cutting Knowledge Date: December 2023\nToday Date: " + date + "\n\nBe brief.<|eot_id|>"
           "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
           "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>"
           "<|start_header_id|>user<|end_header_id|>\n\nBye<|eot_id|>"
           "<|start_header_id|>assistant<|end_header_id|>\n\n";
  };
  const std::string before = today();
  const std::string got = render("meta-llama-Llama-3.1-8B-Instruct", kConversation, "<|begin_of_text|>", "<|eot_id|>");
  const std::string after = today();  // the render may straddle midnight
  EXPECT_TRUE(got == expected(before) || got == expected(after)) << got;
}

TEST(ChatTemplates, Qwen25AndQwen3) {
  const std::string chatml =
      "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
      "<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n";
  EXPECT_EQ(render("Qwen-Qwen2.5-7B-Instruct", kConversation, "", "<|im_end|>"), chatml);
  EXPECT_EQ(render("Qwen-Qwen3-0.6B", kConversation, "", "<|im_end|>"), chatml);
  // Without a system message Qwen 2.5 brings its own.
  EXPECT_EQ(render("Qwen-Qwen2.5-7B-Instruct", {{"user", "Hi"}}, "", "<|im_end|>"),
            "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}

// llama-server's switches: no assistant opening (add_generation_prompt false), and the last
// assistant message continued where it stops (continue_final_message: a prefill).
TEST(ChatTemplates, TheGenerationPromptCanBeLeftOutAndALastAssistantMessageContinued) {
  Status st;
  auto t = ChatTemplates::from_text(read_template("Qwen-Qwen2.5-7B-Instruct"), "", "<|im_end|>", &st);
  ASSERT_TRUE(t != nullptr) << st.to_string();
  ChatRequest r;
  r.turns = {{"system", "Be brief."}, {"user", "Hi"}};
  r.add_generation_prompt = false;
  ChatPrompt p;
  ASSERT_TRUE(t->render(r, &p).ok());
  EXPECT_EQ(p.text, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n");
  r.turns.push_back({"assistant", "Hel"});
  r.continuation = ChatContinuation::kAuto;
  ASSERT_TRUE(t->render(r, &p).ok());
  EXPECT_EQ(p.text, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHel");
}

TEST(ChatTemplates, MistralNemo) {
  EXPECT_EQ(render("mistralai-Mistral-Nemo-Instruct-2407", kConversation, "<s>", "</s>"),
            "<s>[INST]Hi[/INST]Hello!</s>[INST]Be brief.\n\nBye[/INST]");
}

TEST(ChatTemplates, Gemma2) {
  EXPECT_EQ(render("google-gemma-2-2b-it", kNoSystem, "<bos>", "<eos>"),
            "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\nHello!<end_of_turn>\n"
            "<start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n");
}

TEST(ChatTemplates, ASystemMessageGoesIntoTheFirstUserTurnWhereTheTemplateHasNoSystemRole) {
  // Gemma 2's template raises on a system message; llama.cpp's common (as llama-server) joins it
  // to the first user turn with one newline instead (chat.cpp, system_message_not_supported).
  EXPECT_EQ(render("google-gemma-2-2b-it", kConversation, "<bos>", "<eos>"),
            "<bos><start_of_turn>user\nBe brief.\nHi<end_of_turn>\n<start_of_turn>model\nHello!<end_of_turn>\n"
            "<start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n");
}

TEST(ChatTemplates, Phi35) {
  EXPECT_EQ(render("microsoft-Phi-3.5-mini-instruct", kConversation, "<s>", "<|endoftext|>"),
            "<|system|>\nBe brief.<|end|>\n<|user|>\nHi<|end|>\n<|assistant|>\nHello!<|end|>\n"
            "<|user|>\nBye<|end|>\n<|assistant|>\n");
}

TEST(ChatTemplates, ATemplateThatRefusesTheConversationIsABadRequestNamingMessages) {
  Status st;
  auto t = ChatTemplates::from_text(read_template("google-gemma-2-2b-it"), "<bos>", "<eos>", &st);
  ASSERT_TRUE(t != nullptr) << st.to_string();
  std::string out;
  st = t->render({{"user", "Hi"}, {"user", "Again"}}, &out);
  EXPECT_EQ(st.code(), ErrorCode::kBadRequest) << out;
  EXPECT_EQ(st.param(), "messages");
  EXPECT_NE(st.message().find("must alternate"), std::string::npos) << st.message();
}

TEST(ChatTemplates, ABuiltInNameRendersWithLlamaCppsFixedFormat) {
  Status st;
  auto t = ChatTemplates::from_text("chatml", "", "", &st);
  ASSERT_TRUE(t != nullptr) << st.to_string();
  std::string out;
  ASSERT_TRUE(t->render({{"user", "Hi"}}, &out).ok());
  EXPECT_EQ(out, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplates, AModelWithoutATemplateAndNoOverrideSaysWhatToDo) {
  Status st;
  EXPECT_EQ(ChatTemplates::load(nullptr, "", &st), nullptr);
  EXPECT_EQ(st.code(), ErrorCode::kBadRequest);
  EXPECT_NE(st.message().find("--chat-template"), std::string::npos);
}

// Qwen 3's template (a thinking model): its reasoning, in <think> tags, is split from the answer
// as the text streams, in whatever pieces it arrives.
// A tool-use loop's past thinking goes back to the template (Anthropic's thinking blocks, OpenAI's
// reasoning_content), which renders it after the last user query.
TEST(ChatTemplates, AnAssistantTurnsThinkingIsRenderedWhereTheTemplateKeepsIt) {
  Status st;
  auto t = ChatTemplates::from_text(read_template("Qwen-Qwen3-0.6B"), "", "<|im_end|>", &st);
  ASSERT_TRUE(t != nullptr) << st.to_string();
  ChatRequest r;
  ChatTurn call{"assistant", ""};
  call.tool_calls = {{"call_1", "calc", R"({"x":2})"}};
  call.reasoning = "I should use the calculator.";
  ChatTurn result{"tool", "4"};
  result.tool_call_id = "call_1";
  r.turns = {{"user", "What is 2+2?"}, call, result};
  ChatPrompt with, without;
  ASSERT_TRUE(t->render(r, &with).ok());
  EXPECT_NE(with.text.find("<think>\nI should use the calculator.\n</think>"), std::string::npos) << with.text;
  r.turns[1].reasoning.clear();
  ASSERT_TRUE(t->render(r, &without).ok());
  EXPECT_EQ(without.text.find("I should use the calculator."), std::string::npos) << without.text;
  std::string plain;
  ASSERT_TRUE(t->render(std::vector<ChatTurn>{{"user", "What is 2+2?"}, call, result}, &plain).ok());
  EXPECT_NE(plain.find("I should use the calculator."), std::string::npos) << "the plain render takes it too";
}

TEST(ChatTemplates, AThinkingTemplatesReasoningIsSplitFromTheAnswer) {
  Status st;
  auto t = ChatTemplates::from_text(read_template("Qwen-Qwen3-0.6B"), "", "<|im_end|>", &st);
  ASSERT_TRUE(t != nullptr) << st.to_string();
  ChatRequest r;
  r.turns = {{"user", "Hi"}};
  ChatPrompt p;
  ASSERT_TRUE(t->render(r, &p).ok());
  ASSERT_TRUE(p.parser != nullptr) << "a thinking template gets a parser without tools";
  EXPECT_TRUE(p.grammar.empty());
  const std::string out = "<think>\nLet me think.\n</think>\n\nHello!";
  for (std::size_t step : {1u, 3u, 100u}) {
    auto parser = p.parser->fresh();
    std::string reasoning, content;
    for (std::size_t i = 0; i < out.size(); i += step) {
      for (const ChatDelta& d : parser->feed(out.substr(i, step), false)) {
        reasoning += d.reasoning;
        content += d.content;
      }
    }
    for (const ChatDelta& d : parser->feed("", true)) {
      reasoning += d.reasoning;
      content += d.content;
    }
    // llama.cpp's parser keeps the newline before </think> (as llama-server answers).
    EXPECT_EQ(reasoning, "Let me think.\n") << "pieces of " << step;
    EXPECT_EQ(content, "Hello!") << "pieces of " << step;
    EXPECT_EQ(parser->reasoning(), "Let me think.\n");
    EXPECT_EQ(parser->content(), "Hello!");
  }
  // enable_thinking false: the template closes an empty think block in the prompt.
  r.enable_thinking = false;
  ChatPrompt off;
  ASSERT_TRUE(t->render(r, &off).ok());
  EXPECT_NE(off.text.find("<think>\n\n</think>"), std::string::npos) << off.text;
  // --reasoning off: the same for a request that does not say; one that does wins.
  r.enable_thinking.reset();
  t->set_default_thinking(false);
  ChatPrompt server_off;
  ASSERT_TRUE(t->render(r, &server_off).ok());
  EXPECT_EQ(server_off.text, off.text);
  r.enable_thinking = true;
  ChatPrompt asked_on;
  ASSERT_TRUE(t->render(r, &asked_on).ok());
  EXPECT_EQ(asked_on.text.find("<think>\n\n</think>"), std::string::npos) << asked_on.text;
  t->set_default_thinking(std::nullopt);
  // --reasoning-format none: the reasoning stays in the content (no parser).
  ASSERT_TRUE(t->set_reasoning_format("none"));
  EXPECT_FALSE(t->set_reasoning_format("sideways"));
  r.enable_thinking.reset();
  ChatPrompt raw;
  ASSERT_TRUE(t->render(r, &raw).ok());
  EXPECT_EQ(raw.parser, nullptr);
}

}  // namespace
}  // namespace uma
