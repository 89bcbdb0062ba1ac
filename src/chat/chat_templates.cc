// The bridge to llama.cpp's `common` chat code. Only this file sees its headers (and its vendored
// JSON library); everything crosses as strings and our own structs.
#include "chat/chat_templates.h"

#include "chat/generic_calls.h"
#include "chat/structured_output.h"

#include <algorithm>
#include <exception>
#include <random>
#include <regex>

#include "chat.h"
#include "json-schema-to-grammar.h"
#include "llama.h"

namespace uma {

namespace {

// llama.cpp's built-in template names (llama_chat_apply_template's fixed formats).
bool is_builtin_name(const std::string& s) {
  std::vector<const char*> names(static_cast<std::size_t>(llama_chat_builtin_templates(nullptr, 0)));
  llama_chat_builtin_templates(names.data(), names.size());
  for (const char* n : names) {
    if (s == n) return true;
  }
  return false;
}

common_chat_msg to_common(const ChatTurn& t) {
  common_chat_msg m;
  m.role = t.role;
  m.content = t.content;
  for (const ToolCall& c : t.tool_calls) m.tool_calls.push_back({c.name, c.arguments, c.id});
  m.tool_call_id = t.tool_call_id;
  m.tool_name = t.name;
  m.reasoning_content = t.reasoning;
  return m;
}

// OpenAI's tool-call ids: "call_" and 24 letters or digits.
std::string new_tool_call_id(std::mt19937_64& rng) {
  static constexpr char kChars[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id += kChars[rng() % (sizeof kChars - 1)];
  return id;
}

// The root rule's line in a GBNF text: [start, end), or start == npos.
std::pair<std::size_t, std::size_t> root_rule(const std::string& gbnf) {
  std::size_t root = gbnf.rfind("root ::= ", 0) == 0 ? 0 : gbnf.find("\nroot ::= ");
  if (root == std::string::npos) return {root, root};
  if (gbnf[root] == '\n') ++root;
  return {root, std::min(gbnf.find('\n', root), gbnf.size())};
}

// llama.cpp's tool grammars let the model write free text before its first call: the root rule
// holds an optional `until-N?` (everything up to the call marker). OpenAI's `required` means the
// answer is calls, so that preamble goes. A grammar of another shape is left as it is.
void drop_preamble(std::string* gbnf) {
  const auto [start, end] = root_rule(*gbnf);
  if (start == std::string::npos) return;
  static const std::regex kPreamble(R"( until-[0-9]+\?)");
  const std::string line = gbnf->substr(start, end - start);
  gbnf->replace(start, line.size(), std::regex_replace(line, kPreamble, ""));
}

// Without parallel calls OpenAI's model makes at most one; llama.cpp's grammar for families that
// wrap each call in markers (Qwen's <tool_call>) still allows `(call space)+` and leaves the count
// to a trained model's judgement. One call it is: `tool-calls ::= (X)+` becomes `tool-calls ::= X`.
void single_call(std::string* gbnf) {
  static const std::regex kRepeat(R"((^|\n)tool-calls ::= \((.*)\)\+(\n|$))");
  *gbnf = std::regex_replace(*gbnf, kRepeat, "$1tool-calls ::= $2$3");
}

// A non-lazy tool grammar's root starts with the template's generation prompt, which the prompt
// already ends with. llama.cpp feeds its tokens to the grammar first; that fails where the
// tokenizer adds a space before the text (SentencePiece vocabularies). Taking the literal out of
// the root rule gives the same grammar from the model's first token on. False: not found as such.
bool drop_root_prefix(std::string* gbnf, const std::string& generation_prompt) {
  const auto [start, end] = root_rule(*gbnf);
  if (start == std::string::npos || generation_prompt.empty()) return false;
  const std::string lead = "root ::= " + gbnf_format_literal(generation_prompt) + " ";
  if (gbnf->compare(start, lead.size(), lead) != 0) return false;
  gbnf->erase(start + 9, lead.size() - 9);
  return true;
}

// The generated text of one tool-enabled request, parsed as it grows with the family's parser
// (common_chat_parse over the whole text each time; llama-server does the same).
class CommonOutputParser final : public ChatOutputParser {
 public:
  CommonOutputParser(const common_chat_params& p, common_reasoning_format reasoning, bool tools)
      : params_(p), rng_(std::random_device{}()) {
    params_.parser.load(p.parser);
    params_.reasoning_format = reasoning;
    params_.parse_tool_calls = tools;
  }
  explicit CommonOutputParser(const common_chat_parser_params& p) : params_(p), rng_(std::random_device{}()) {}

  std::vector<ChatDelta> feed(std::string_view text, bool final) override {
    text_.append(text);
    common_chat_msg next;
    try {
      next = common_chat_parse(text_, !final, params_);
    } catch (const std::exception&) {
      if (!final) return {};  // not parseable yet: wait for more
      // The whole output does not parse as the family's syntax (cut by max_tokens, say): what was
      // not read as calls is content.
      next = msg_;
      if (msg_.tool_calls.empty()) next.content = text_;
    }
    if (next.empty() && !final) return {};
    next.set_tool_call_ids(ids_, [this] { return new_tool_call_id(rng_); });
    std::vector<common_chat_msg_diff> diffs;
    try {
      diffs = common_chat_msg_diff::compute_diffs(msg_, next);
    } catch (const std::exception&) {
      // The parse no longer extends what was sent (llama.cpp's diff refuses it): send nothing for
      // it; at the end the message is still whole for a non-streamed reply.
      if (final) adopt(std::move(next));
      return {};
    }
    std::vector<ChatDelta> out;
    for (const common_chat_msg_diff& d : diffs) {
      if (!d.reasoning_content_delta.empty()) out.push_back(ChatDelta{{}, -1, {}, {}, {}, d.reasoning_content_delta});
      if (!d.content_delta.empty()) out.push_back(ChatDelta{d.content_delta, -1, {}, {}, {}, {}});
      if (d.tool_call_index != std::string::npos) {
        out.push_back(ChatDelta{{}, static_cast<std::ptrdiff_t>(d.tool_call_index), d.tool_call_delta.id,
                                d.tool_call_delta.name, d.tool_call_delta.arguments, {}});
      }
    }
    adopt(std::move(next));
    return out;
  }

  void adopt(common_chat_msg next) {
    msg_ = std::move(next);
    calls_.clear();
    for (const common_chat_tool_call& c : msg_.tool_calls) calls_.push_back({c.id, c.name, c.arguments});
  }

  std::unique_ptr<ChatOutputParser> fresh() const override { return std::make_unique<CommonOutputParser>(params_); }
  const std::string& content() const override { return msg_.content; }
  const std::string& reasoning() const override { return msg_.reasoning_content; }
  const std::vector<ToolCall>& tool_calls() const override { return calls_; }

 private:
  common_chat_parser_params params_;
  std::string text_;
  common_chat_msg msg_;
  std::vector<std::string> ids_;
  std::vector<ToolCall> calls_;
  std::mt19937_64 rng_;
};

}  // namespace

struct ChatTemplates::Impl {
  common_chat_templates_ptr templates;
  bool jinja = true;  // false: a built-in name, rendered by llama_chat_apply_template
  common_reasoning_format reasoning = COMMON_REASONING_FORMAT_AUTO;
  std::optional<bool> default_thinking;
};

void ChatTemplates::set_default_thinking(std::optional<bool> on) { impl_->default_thinking = on; }

bool ChatTemplates::set_reasoning_format(const std::string& name) {
  if (name != "none" && name != "auto" && name != "deepseek" && name != "deepseek-legacy") return false;
  impl_->reasoning = common_reasoning_format_from_name(name);
  return true;
}

ChatTemplates::ChatTemplates(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ChatTemplates::~ChatTemplates() = default;

std::unique_ptr<ChatTemplates> ChatTemplates::load(const llama_model* model, const std::string& override_template,
                                                   Status* st) {
  if (override_template.empty() && (model == nullptr || llama_model_chat_template(model, nullptr) == nullptr)) {
    *st = Status(ErrorCode::kBadRequest, "the model has no chat template; start umad with --chat-template "
                                         "(a Jinja template or a llama.cpp name such as chatml)");
    return nullptr;
  }
  auto impl = std::make_unique<Impl>();
  impl->jinja = !is_builtin_name(override_template);
  try {
    impl->templates = common_chat_templates_init(model, override_template);
  } catch (const std::exception& e) {
    *st = Status(ErrorCode::kInvalidArgument, std::string("the chat template does not parse: ") + e.what());
    return nullptr;
  }
  *st = Status::Ok();
  return std::unique_ptr<ChatTemplates>(new ChatTemplates(std::move(impl)));
}

std::unique_ptr<ChatTemplates> ChatTemplates::chatml_fallback(const llama_model* model, Status* st) {
  auto impl = std::make_unique<Impl>();
  try {
    impl->templates = common_chat_templates_init(model, "");  // no template of its own: llama.cpp's chatml text
  } catch (const std::exception& e) {
    *st = Status(ErrorCode::kInternal, std::string("the chatml template does not parse: ") + e.what());
    return nullptr;
  }
  *st = Status::Ok();
  return std::unique_ptr<ChatTemplates>(new ChatTemplates(std::move(impl)));
}

std::unique_ptr<ChatTemplates> ChatTemplates::from_text(const std::string& source, const std::string& bos,
                                                        const std::string& eos, Status* st) {
  auto impl = std::make_unique<Impl>();
  impl->jinja = !is_builtin_name(source);
  try {
    impl->templates = common_chat_templates_init(nullptr, source, bos, eos);
  } catch (const std::exception& e) {
    *st = Status(ErrorCode::kInvalidArgument, std::string("the chat template does not parse: ") + e.what());
    return nullptr;
  }
  *st = Status::Ok();
  return std::unique_ptr<ChatTemplates>(new ChatTemplates(std::move(impl)));
}

Status ChatTemplates::render(const std::vector<ChatTurn>& turns, std::string* prompt) const {
  common_chat_templates_inputs in;
  in.messages.reserve(turns.size());
  for (const ChatTurn& t : turns) in.messages.push_back(to_common(t));
  in.add_generation_prompt = true;
  in.use_jinja = impl_->jinja;
  try {
    *prompt = common_chat_templates_apply(impl_->templates.get(), in).prompt;
  } catch (const std::exception& e) {
    return Status(ErrorCode::kBadRequest, std::string("the chat template refused the messages: ") + e.what(),
                  "messages");
  }
  return Status::Ok();
}

namespace {

// The request as llama.cpp's template engine takes it.
common_chat_templates_inputs template_inputs(const ChatRequest& request, common_reasoning_format reasoning,
                                             std::optional<bool> default_thinking, bool jinja) {
  common_chat_templates_inputs in;
  for (const ChatTurn& t : request.turns) in.messages.push_back(to_common(t));
  for (const ChatTool& t : request.tools) {
    in.tools.push_back({t.name, t.description, t.parameters.empty() ? std::string("{}") : t.parameters});
  }
  in.tool_choice = request.tool_choice == ToolChoice::kNone       ? COMMON_CHAT_TOOL_CHOICE_NONE
                   : request.tool_choice == ToolChoice::kRequired ? COMMON_CHAT_TOOL_CHOICE_REQUIRED
                                                                  : COMMON_CHAT_TOOL_CHOICE_AUTO;
  in.parallel_tool_calls = request.parallel_tool_calls;
  in.reasoning_format = reasoning;
  in.chat_template_kwargs = request.template_kwargs;
  const std::optional<bool> think = request.enable_thinking.has_value() ? request.enable_thinking : default_thinking;
  if (think.has_value()) {
    in.enable_thinking = *think;
    in.chat_template_kwargs["enable_thinking"] = *think ? "true" : "false";
  }
  in.add_generation_prompt = request.add_generation_prompt;
  in.continue_final_message = request.continuation == ChatContinuation::kAuto      ? COMMON_CHAT_CONTINUATION_AUTO
                              : request.continuation == ChatContinuation::kContent   ? COMMON_CHAT_CONTINUATION_CONTENT
                              : request.continuation == ChatContinuation::kReasoning ? COMMON_CHAT_CONTINUATION_REASONING
                                                                                     : COMMON_CHAT_CONTINUATION_NONE;
  in.use_jinja = jinja;
  return in;
}

// The words and patterns that start a lazy grammar, as the sampler chain takes them (regexes).
std::vector<std::string> grammar_triggers(const common_chat_params& p) {
  std::vector<std::string> triggers;
  for (const common_grammar_trigger& t : p.grammar_triggers) {
    switch (t.type) {
      case COMMON_GRAMMAR_TRIGGER_TYPE_PATTERN: triggers.push_back(t.value); break;
      case COMMON_GRAMMAR_TRIGGER_TYPE_PATTERN_FULL:
        triggers.push_back((t.value.empty() || t.value.front() != '^' ? "^" : "") + t.value +
                           (t.value.empty() || t.value.back() != '$' ? "$" : ""));
        break;
      default: triggers.push_back(regex_escape(t.value)); break;  // a word (or a token's text)
    }
  }
  return triggers;
}

}  // namespace

Status ChatTemplates::render(const ChatRequest& request, ChatPrompt* out) const {
  const common_chat_templates_inputs in = template_inputs(request, impl_->reasoning, impl_->default_thinking, impl_->jinja);
  const bool calls = !request.tools.empty() && request.tool_choice != ToolChoice::kNone;
  if (calls && !impl_->jinja) {
    return Status(ErrorCode::kBadRequest, "tools need a Jinja chat template (the model's own or --chat-template "
                                          "with a template text), not a built-in name", "tools");
  }
  common_chat_params p;
  try {
    p = common_chat_templates_apply(impl_->templates.get(), in);
    if (calls && !request.forced_tool.empty()) {
      // The prompt describes every tool; the grammar and parser come from the named one alone.
      common_chat_templates_inputs only = in;
      only.tools.clear();
      for (const common_chat_tool& t : in.tools) {
        if (t.name == request.forced_tool) only.tools.push_back(t);
      }
      if (only.tools.empty()) return Status(ErrorCode::kBadRequest, "tool_choice names no tool in 'tools'", "tool_choice");
      only.tool_choice = COMMON_CHAT_TOOL_CHOICE_REQUIRED;
      std::string prompt = std::move(p.prompt);
      p = common_chat_templates_apply(impl_->templates.get(), only);
      p.prompt = std::move(prompt);
    }
  } catch (const std::exception& e) {
    return Status(ErrorCode::kBadRequest, std::string("the chat template refused the request: ") + e.what(),
                  request.tools.empty() ? "messages" : "tools");
  }
  if (calls && p.grammar.empty() && request.tool_choice == ToolChoice::kRequired) {
    // The template cannot express calls and one is required: the generic JSON call (generic_calls.h).
    return render_generic_call(request, out);
  }
  out->text = std::move(p.prompt);
  const bool thinking = p.supports_thinking && impl_->reasoning != COMMON_REASONING_FORMAT_NONE && impl_->jinja;
  if (!calls) {
    if (thinking) out->parser = std::make_unique<CommonOutputParser>(p, impl_->reasoning, /*tools=*/false);
    return Status::Ok();
  }
  out->grammar = p.grammar;
  out->grammar_lazy = p.grammar_lazy;
  if ((request.tool_choice == ToolChoice::kRequired || !request.forced_tool.empty()) && !out->grammar_lazy) {
    drop_preamble(&out->grammar);
  }
  if (!request.parallel_tool_calls) single_call(&out->grammar);
  for (std::string& t : grammar_triggers(p)) out->grammar_triggers.push_back(std::move(t));
  if (!out->grammar.empty() && !out->grammar_lazy && !drop_root_prefix(&out->grammar, p.generation_prompt)) {
    out->grammar_prefill = p.generation_prompt;  // fed to the grammar as tokens (sampler_chain.cc)
  }
  out->stops = p.additional_stops;
  out->parser = std::make_unique<CommonOutputParser>(p, thinking ? impl_->reasoning : COMMON_REASONING_FORMAT_NONE, true);
  return Status::Ok();
}

Status ChatTemplates::render_generic_call(const ChatRequest& request, ChatPrompt* out) const {
  std::vector<ChatTurn> turns = request.turns;
  const std::string describe = generic_tools_prompt(request.tools);
  if (!turns.empty() && turns.front().role == "system") {
    turns.front().content += "\n\n" + describe;
  } else {
    turns.insert(turns.begin(), ChatTurn{"system", describe});
  }
  ChatRequest plain = request;
  plain.turns = std::move(turns);
  plain.tools.clear();
  ChatPrompt rendered;
  if (Status st = render(plain, &rendered); !st.ok()) return st;
  out->text = std::move(rendered.text);
  if (Status st = json_schema_to_gbnf(generic_call_schema(request.tools, request.forced_tool), &out->grammar); !st.ok()) {
    return Status(ErrorCode::kBadRequest, "a tool's parameters cannot be enforced: " + st.message(), "tools");
  }
  out->grammar_lazy = false;
  out->parser = generic_call_parser();
  return Status::Ok();
}

std::string ChatTemplates::source() const { return common_chat_templates_source(impl_->templates.get()); }

}  // namespace uma
