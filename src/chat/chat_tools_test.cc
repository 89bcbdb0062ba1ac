// Tools through real model families' templates (the pinned llama.cpp source's models/templates):
// the tools and tool turns rendered into the prompt, the grammar that forces a call, and the
// family's call syntax read back out of the output as it streams.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "chat/chat_templates.h"

namespace uma {
namespace {

std::unique_ptr<ChatTemplates> family(const std::string& name, const std::string& bos, const std::string& eos) {
  std::ifstream f(std::string(UMA_LLAMA_TEMPLATES) + "/" + name + ".jinja");
  std::stringstream s;
  s << f.rdbuf();
  Status st;
  auto t = ChatTemplates::from_text(s.str(), bos, eos, &st);
  EXPECT_TRUE(t != nullptr) << name << ": " << st.to_string();
  return t;
}

std::unique_ptr<ChatTemplates> qwen25() { return family("Qwen-Qwen2.5-7B-Instruct", "", "<|im_end|>"); }

const ChatTool kWeather{"get_weather", "Get the weather",
                        R"({"type":"object","properties":{"city":{"type":"string","enum":["Paris","Rome"]}},"required":["city"]})"};
const ChatTool kTime{"get_time", "Get the time", R"({"type":"object","properties":{"zone":{"type":"string"}}})"};

ChatRequest ask(std::vector<ChatTool> tools, ToolChoice choice, bool parallel = true) {
  ChatRequest r;
  r.turns = {{"user", "Weather in Paris?"}};
  r.tools = std::move(tools);
  r.tool_choice = choice;
  r.parallel_tool_calls = parallel;
  return r;
}

std::string rule(const std::string& gbnf, const std::string& name) {  // "name ::= ..." without the name
  const std::string head = name + " ::= ";
  const std::size_t at = gbnf.rfind(head, 0) == 0 ? 0 : gbnf.find("\n" + head);
  if (at == std::string::npos) return "(none)";
  const std::size_t from = at + (at == 0 ? 0 : 1) + head.size();
  return gbnf.substr(from, gbnf.find('\n', from) - from);
}

// Feeds `text` in pieces of `step` bytes, then the end; all deltas in order.
std::vector<ChatDelta> stream(ChatOutputParser& p, const std::string& text, std::size_t step) {
  std::vector<ChatDelta> all;
  for (std::size_t i = 0; i < text.size(); i += step) {
    for (ChatDelta& d : p.feed(text.substr(i, step), false)) all.push_back(std::move(d));
  }
  for (ChatDelta& d : p.feed("", true)) all.push_back(std::move(d));
  return all;
}

TEST(ChatTools, QwenDescribesTheToolsAndARequiredCallStartsAtOnce) {
  auto t = qwen25();
  ChatPrompt p;
  ASSERT_TRUE(t->render(ask({kWeather}, ToolChoice::kRequired, false), &p).ok());
  EXPECT_NE(p.text.find("<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": "
                        "\"Get the weather\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": "
                        "{\"type\": \"string\", \"enum\": [\"Paris\", \"Rome\"]}}, \"required\": [\"city\"]}}}\n</tools>"),
            std::string::npos) << p.text;
  EXPECT_TRUE(p.text.ends_with("<|im_start|>user\nWeather in Paris?<|im_end|>\n<|im_start|>assistant\n")) << p.text;
  EXPECT_FALSE(p.grammar_lazy);
  // No text before the call (llama.cpp allows it; OpenAI's `required` does not), the template's
  // generation prompt taken out of the root (the prompt already ends with it), and one call.
  EXPECT_EQ(rule(p.grammar, "root"), "space tool-calls") << p.grammar;
  EXPECT_EQ(rule(p.grammar, "tool-calls"), "tool-call space") << p.grammar;
  EXPECT_TRUE(p.grammar_prefill.empty());
  ASSERT_TRUE(p.parser != nullptr);
}

TEST(ChatTools, ParallelCallsKeepTheRepeat) {
  ChatPrompt p;
  ASSERT_TRUE(qwen25()->render(ask({kWeather}, ToolChoice::kRequired, true), &p).ok());
  EXPECT_EQ(rule(p.grammar, "tool-calls"), "(tool-call space)+") << p.grammar;
}

TEST(ChatTools, AutoIsLazyOnTheCallMarker) {
  ChatPrompt p;
  ASSERT_TRUE(qwen25()->render(ask({kWeather}, ToolChoice::kAuto), &p).ok());
  EXPECT_TRUE(p.grammar_lazy);
  ASSERT_EQ(p.grammar_triggers.size(), 1u);
  EXPECT_EQ(p.grammar_triggers[0], "<tool_call>\n");  // the marker as the family writes it
}

TEST(ChatTools, NoneDescribesTheToolsButConstrainsAndParsesNothing) {
  ChatPrompt p;
  ASSERT_TRUE(qwen25()->render(ask({kWeather}, ToolChoice::kNone), &p).ok());
  EXPECT_NE(p.text.find("get_weather"), std::string::npos);
  EXPECT_TRUE(p.grammar.empty());
  EXPECT_TRUE(p.parser == nullptr);
}

TEST(ChatTools, AStreamedCallComesOutAsIdNameThenArgumentPieces) {
  ChatPrompt p;
  ASSERT_TRUE(qwen25()->render(ask({kWeather}, ToolChoice::kRequired), &p).ok());
  const std::string out = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
  for (std::size_t step : {1u, 5u, 200u}) {
    ChatPrompt fresh;
    ASSERT_TRUE(qwen25()->render(ask({kWeather}, ToolChoice::kRequired), &fresh).ok());
    const std::vector<ChatDelta> deltas = stream(*fresh.parser, out, step);
    ASSERT_FALSE(deltas.empty());
    EXPECT_EQ(deltas[0].tool_index, 0);
    EXPECT_EQ(deltas[0].tool_name, "get_weather");
    EXPECT_TRUE(deltas[0].tool_id.starts_with("call_")) << deltas[0].tool_id;
    std::string args;
    for (const ChatDelta& d : deltas) {
      EXPECT_EQ(d.tool_index, 0);
      EXPECT_TRUE(d.content.empty()) << d.content;
      if (&d != &deltas[0]) {
        EXPECT_TRUE(d.tool_id.empty() && d.tool_name.empty());
      }
      args += d.tool_arguments;
    }
    EXPECT_EQ(args, "{\"city\": \"Paris\"}") << "step " << step;
    ASSERT_EQ(fresh.parser->tool_calls().size(), 1u);
    EXPECT_EQ(fresh.parser->tool_calls()[0].id, deltas[0].tool_id);
    EXPECT_EQ(fresh.parser->tool_calls()[0].arguments, args);
    EXPECT_TRUE(fresh.parser->content().empty());
  }
}

TEST(ChatTools, UnderAutoTextIsContentAndACallAfterItIsACall) {
  ChatPrompt p;
  ASSERT_TRUE(qwen25()->render(ask({kWeather}, ToolChoice::kAuto), &p).ok());
  std::string content;
  for (const ChatDelta& d : stream(*p.parser, "It is sunny in Paris.", 3)) {
    EXPECT_EQ(d.tool_index, -1);
    content += d.content;
  }
  EXPECT_EQ(content, "It is sunny in Paris.");
  EXPECT_TRUE(p.parser->tool_calls().empty());

  ChatPrompt q;
  ASSERT_TRUE(qwen25()->render(ask({kWeather, kTime}, ToolChoice::kAuto), &q).ok());
  stream(*q.parser, "Let me look.\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"zone\": \"CET\"}}\n</tool_call>", 4);
  EXPECT_EQ(q.parser->content(), "Let me look.\n");
  ASSERT_EQ(q.parser->tool_calls().size(), 1u);
  EXPECT_EQ(q.parser->tool_calls()[0].name, "get_time");
  EXPECT_EQ(q.parser->tool_calls()[0].arguments, "{\"zone\": \"CET\"}");
}

TEST(ChatTools, ACallCutShortIsKeptAsFarAsItGot) {
  ChatPrompt p;
  ASSERT_TRUE(qwen25()->render(ask({kWeather}, ToolChoice::kRequired), &p).ok());
  stream(*p.parser, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Pa", 7);
  ASSERT_EQ(p.parser->tool_calls().size(), 1u);
  EXPECT_EQ(p.parser->tool_calls()[0].name, "get_weather");
}

TEST(ChatTools, ANamedChoiceDescribesEveryToolAndForcesThatOne) {
  ChatRequest r = ask({kWeather, kTime}, ToolChoice::kRequired, false);
  r.forced_tool = "get_time";
  ChatPrompt p;
  ASSERT_TRUE(qwen25()->render(r, &p).ok());
  EXPECT_NE(p.text.find("\"name\": \"get_weather\""), std::string::npos);
  EXPECT_NE(p.text.find("\"name\": \"get_time\""), std::string::npos);
  EXPECT_NE(p.grammar.find("get_time"), std::string::npos);
  EXPECT_EQ(p.grammar.find("get_weather"), std::string::npos) << p.grammar;
  EXPECT_EQ(rule(p.grammar, "root"), "space tool-calls");
}

TEST(ChatTools, ToolCallsAndResultsRenderBackInTheFamilysSyntax) {
  ChatRequest r = ask({kWeather}, ToolChoice::kAuto);
  ChatTurn call{"assistant", ""};
  call.tool_calls = {{"call_1", "get_weather", R"({"city":"Paris"})"}};
  ChatTurn result{"tool", "21 C"};
  result.tool_call_id = "call_1";
  r.turns.push_back(call);
  r.turns.push_back(result);
  ChatPrompt p;
  ASSERT_TRUE(qwen25()->render(r, &p).ok());
  EXPECT_NE(p.text.find("<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                        "{\"city\": \"Paris\"}}\n</tool_call><|im_end|>\n"
                        "<|im_start|>user\n<tool_response>\n21 C\n</tool_response><|im_end|>\n<|im_start|>assistant\n"),
            std::string::npos) << p.text;
}

TEST(ChatTools, OtherFamiliesGiveAGrammarAndAParser) {
  for (const auto& [name, bos, eos] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"meta-llama-Llama-3.1-8B-Instruct", "<|begin_of_text|>", "<|eot_id|>"},
           {"mistralai-Mistral-Nemo-Instruct-2407", "<s>", "</s>"},
           {"Qwen-Qwen3-0.6B", "", "<|im_end|>"}}) {
    auto t = family(name, bos, eos);
    ASSERT_TRUE(t != nullptr);
    ChatPrompt p;
    const Status st = t->render(ask({kWeather}, ToolChoice::kRequired), &p);
    ASSERT_TRUE(st.ok()) << name << ": " << st.to_string();
    EXPECT_NE(p.text.find("get_weather"), std::string::npos) << name;
    EXPECT_FALSE(p.grammar.empty()) << name;
    EXPECT_TRUE(p.parser != nullptr) << name;
  }
}

TEST(ChatTools, ABuiltInNameCannotCallToolsAndABadSchemaIsNamed) {
  Status st;
  auto chatml = ChatTemplates::from_text("chatml", "", "", &st);
  ASSERT_TRUE(chatml != nullptr);
  ChatPrompt p;
  st = chatml->render(ask({kWeather}, ToolChoice::kAuto), &p);
  EXPECT_EQ(st.code(), ErrorCode::kBadRequest);
  EXPECT_EQ(st.param(), "tools");
  ChatTool bad{"f", "", R"({"type":"object","properties":{"a":{"$ref":"#/nowhere"}}})"};
  st = qwen25()->render(ask({bad}, ToolChoice::kRequired), &p);
  EXPECT_EQ(st.code(), ErrorCode::kBadRequest);
  EXPECT_EQ(st.param(), "tools");
}

// A Jinja template with no tool syntax (plain chatml): a required call falls back to the generic
// JSON call, as llama-server's generic format: described in a system message, held by a grammar
// to the named tool's schema, read back as the call.
TEST(ChatTools, ARequiredCallWithATemplateThatHasNoToolSyntaxIsAGenericJsonCall) {
  Status st;
  auto t = ChatTemplates::from_text(
      "{%- for message in messages -%}{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' -}}"
      "{%- endfor -%}{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}",
      "", "<|im_end|>", &st);
  ASSERT_TRUE(t != nullptr) << st.to_string();
  ChatRequest r = ask({kWeather, kTime}, ToolChoice::kRequired);
  r.forced_tool = "get_weather";
  ChatPrompt p;
  ASSERT_TRUE(t->render(r, &p).ok());
  EXPECT_NE(p.text.find("<|im_start|>system\nYou can call these tools"), std::string::npos) << p.text;
  EXPECT_NE(p.text.find("get_time"), std::string::npos) << "every tool is described";
  EXPECT_FALSE(p.grammar.empty());
  EXPECT_FALSE(p.grammar_lazy) << "from the first token";
  EXPECT_NE(p.grammar.find("get_weather"), std::string::npos) << p.grammar;
  EXPECT_EQ(p.grammar.find("get_time"), std::string::npos) << "only the named tool may be called";
  ASSERT_TRUE(p.parser != nullptr);
  const std::vector<ChatDelta> d = stream(*p.parser, R"({"name": "get_weather", "arguments": {"city": "Paris"}})", 5);
  ASSERT_EQ(p.parser->tool_calls().size(), 1u);
  EXPECT_EQ(p.parser->tool_calls()[0].name, "get_weather");
  EXPECT_EQ(p.parser->tool_calls()[0].arguments, R"({"city":"Paris"})");
  EXPECT_EQ(p.parser->tool_calls()[0].id.rfind("call_", 0), 0u);
  // auto stays free text with such a template: nothing forces or reads a call.
  ChatPrompt free;
  ASSERT_TRUE(t->render(ask({kWeather}, ToolChoice::kAuto), &free).ok());
  EXPECT_TRUE(free.grammar.empty());
}

}  // namespace
}  // namespace uma
