// ChatTemplates: a model's chat template(s) rendered the way the model ships them, through
// llama.cpp's `common` library (its Jinja engine and common_chat_templates_*), built from the same
// pinned source as libllama. llama_chat_apply_template alone knows a fixed list of formats; this
// runs the template text itself, so any model family's template renders as its authors wrote it.
//
// The override (--chat-template) is either a Jinja template text or one of llama.cpp's built-in
// names (`chatml`, `llama3`, ...), which are rendered by llama_chat_apply_template's fixed code.
// Without a template in the model and without an override there is nothing to render with:
// load() says so and the HTTP front end answers chat requests with a 400 naming --chat-template.
//
// This header includes nothing of llama.cpp's `common` (its vendored JSON library is another
// version than ours): the bridge lives in chat_templates.cc alone.
// Thread-safety: render() is const and keeps no state between calls; one object may be used by
// one thread at a time (umad: the I/O thread, after the compute thread built it before starting).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "serve/chat_types.h"
#include "common/status.h"

struct llama_model;

namespace uma {

class ChatTemplates {
 public:
  ~ChatTemplates();
  // The model's own template (its `tokenizer.chat_template`, and a `tool_use` variant when it has
  // one), or `override_template` when that is not empty. Null with *st set when there is none or
  // it does not parse.
  static std::unique_ptr<ChatTemplates> load(const llama_model* model, const std::string& override_template, Status* st);
  // For a model without a template, as llama-server does: chatml as a Jinja text (llama.cpp's), so
  // tools are described to the model and read back in llama.cpp's generic format.
  static std::unique_ptr<ChatTemplates> chatml_fallback(const llama_model* model, Status* st);
  // A template text (or built-in name) without a model; bos/eos are what the template's
  // bos_token / eos_token variables hold. For tests and tools.
  static std::unique_ptr<ChatTemplates> from_text(const std::string& source, const std::string& bos,
                                                  const std::string& eos, Status* st);

  // The prompt for `turns` followed by the assistant's turn. A template that prints a date (Llama
  // 3.x's "Today Date") gets today's, local time: llama.cpp reads the system clock itself. A
  // template that refuses the conversation (roles that do not alternate, say) is a kBadRequest
  // naming `messages`; never throws.
  Status render(const std::vector<ChatTurn>& turns, std::string* prompt) const;
  // The same for a whole chat request: with a thinking template (Qwen 3's, DeepSeek R1's, ...), a
  // parser that splits the reasoning from the answer (the request's enable_thinking, else the
  // template's default, says whether the model thinks); with tools, also the grammar that holds the model to the
  // family's tool-call syntax and the tools' schemas (lazy under kAuto: it starts at the family's
  // call marker), and the parser that reads calls back out. kRequired makes the output start with
  // a call: llama.cpp's grammar lets a model write text before its first call, which OpenAI's
  // `required` does not, so umad takes that optional preamble out of the grammar's root rule.
  // Bad tools (a parameters schema that is not a JSON schema) are a kBadRequest naming `tools`. A
  // required call with a template that has no call syntax (a plain chatml one) falls back to
  // llama-server's generic JSON call (chat/generic_calls.h).
  Status render(const ChatRequest& request, ChatPrompt* out) const;
  // The default template's source text (or built-in name).
  std::string source() const;
  // How a thinking model's reasoning is told apart from its answer (--reasoning-format, as
  // llama-server's): "auto" / "deepseek" (default: a thinking template's reasoning becomes
  // reasoning_content, streamed as its own deltas), "deepseek-legacy", or "none" (left in the
  // content). Set before the object is shared; false for an unknown name.
  bool set_reasoning_format(const std::string& name);
  // Whether a thinking template thinks when a request does not say (--reasoning on|off, as
  // llama-server's; unset: the template's default). Set before the object is shared.
  void set_default_thinking(std::optional<bool> on);

 private:
  struct Impl;
  explicit ChatTemplates(std::unique_ptr<Impl> impl);
  // A required call where the template has no call syntax: the generic JSON call (generic_calls.h).
  Status render_generic_call(const ChatRequest& request, ChatPrompt* out) const;
  std::unique_ptr<Impl> impl_;
};

}  // namespace uma
