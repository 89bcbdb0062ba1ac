// The chat layer's plain data, shared by the front ends (which fill and read it) and chat/
// (which renders and parses it with llama.cpp's `common`). Header-only and free of llama.cpp, so
// a front end that knows these types links nothing of `common`.
//
// A chat request is turns (with the tool calls an assistant made and the tool results that answer
// them), the tools the model may call, and how it must call them. Rendering it gives a ChatPrompt:
// the prompt text plus, when tools are in play, what constrains and reads the model's output (the
// grammar, its triggers, extra stop strings, and a parser for the family's tool-call syntax).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace uma {

struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // JSON text, as the model wrote it
};

struct ChatTurn {
  std::string role;     // system, user, assistant, tool (any role the template accepts)
  std::string content;
  std::vector<ToolCall> tool_calls{};  // assistant turns: the calls it made
  std::string tool_call_id{};        // tool turns: the call this answers
  std::string name{};                // tool turns: the tool's name (when the client gives it)
  std::string reasoning{};           // assistant turns: their thinking, for templates that render it
};

struct ChatTool {  // a function the model may call
  std::string name;
  std::string description;
  std::string parameters;  // JSON schema text of its arguments ({} when it takes none)
};

enum class ToolChoice {
  kAuto,      // the model may answer or call
  kNone,      // tools are described to the model but it must not call them
  kRequired,  // it must call at least one (a named choice is this with only that tool)
};

enum class ChatContinuation : std::uint8_t { kNone, kAuto, kContent, kReasoning };

struct ChatRequest {
  std::vector<ChatTurn> turns;
  std::vector<ChatTool> tools;
  ToolChoice tool_choice = ToolChoice::kAuto;
  // A named choice: the model must call this tool (kRequired). The prompt still describes every
  // tool; the grammar and the parser know only this one.
  std::string forced_tool;
  bool parallel_tool_calls = true;
  std::string model;  // the request's `model` (a gateway renders with that model's template)
  // chat_template_kwargs (values as JSON text), and whether a thinking template thinks (unset: its default).
  std::map<std::string, std::string> template_kwargs{};
  std::optional<bool> enable_thinking{};
  // llama-server's add_generation_prompt and continue_final_message: the prompt ends with the
  // assistant's opening, or continues the last (assistant) message, its content or its reasoning.
  bool add_generation_prompt = true;
  ChatContinuation continuation = ChatContinuation::kNone;
};

// What the output of a tool-enabled request turned into so far, as increments: text for the
// message's content, or a piece of tool call `index` (its id and name come with its first piece).
struct ChatDelta {
  std::string content;
  std::ptrdiff_t tool_index = -1;  // >= 0: a tool-call piece
  std::string tool_id{}, tool_name{}, tool_arguments{};
  std::string reasoning{};  // a thinking model's reasoning (reasoning_content), apart from content
};

// Reads a model family's tool-call syntax out of the generated text as it grows. One per request.
// Thread-safety: none; used by the one connection that owns the request.
class ChatOutputParser {
 public:
  virtual ~ChatOutputParser() = default;
  // Appends `text` (the generated text's next bytes) and says what changed. Text that may still
  // turn out to be part of a call is held back until it is clear. `final`: the generation ended;
  // the rest comes out (text that does not parse as a call is content).
  virtual std::vector<ChatDelta> feed(std::string_view text, bool final) = 0;
  // A parser for another output of the same request (another choice), from the start.
  virtual std::unique_ptr<ChatOutputParser> fresh() const = 0;
  // The whole message so far.
  virtual const std::string& content() const = 0;
  virtual const std::string& reasoning() const = 0;
  virtual const std::vector<ToolCall>& tool_calls() const = 0;
};

struct ChatPrompt {
  std::string text;  // the prompt, with the template's control tokens (tokenized with specials)
  // Only when tools are in play (otherwise empty / false / null):
  std::string grammar;                    // GBNF the output must match
  bool grammar_lazy = false;              // only once a trigger pattern matched the output
  std::vector<std::string> grammar_triggers;  // regexes over the output
  std::string grammar_prefill;            // text the grammar's root starts with, already in the prompt
  std::vector<std::string> stops;         // extra stop strings the family needs
  std::unique_ptr<ChatOutputParser> parser;
};

}  // namespace uma
