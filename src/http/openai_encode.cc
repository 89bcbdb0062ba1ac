// openai.h's encoders: responses, stream chunks, errors in OpenAI's shapes. (Requests are read in
// openai.cc.)
#include <nlohmann/json.hpp>

#include "common/json_text.h"
#include "http/openai.h"

namespace uma::openai {
namespace {
using ojson = nlohmann::ordered_json;
}  // namespace

namespace {

ojson envelope(const CompletionRequest& r, std::string_view id, std::int64_t created, const char* object) {
  ojson j;
  j["id"] = id;
  j["object"] = object;
  j["created"] = created;
  j["model"] = r.model.empty() ? "umad" : r.model;
  return j;
}

ojson usage_json(const Usage& u) {
  ojson j = {{"prompt_tokens", u.prompt_tokens}, {"completion_tokens", u.completion_tokens},
             {"total_tokens", u.prompt_tokens + u.completion_tokens},
             {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
  if (u.prediction) {
    j["completion_tokens_details"] = {{"accepted_prediction_tokens", u.accepted_prediction_tokens},
                                      {"rejected_prediction_tokens", u.rejected_prediction_tokens}};
  }
  return j;
}

ojson token_json(const TokenLogprob& t) {
  return {{"token", t.text}, {"logprob", t.logprob}, {"bytes", byte_array<ojson>(t.text)}};
}

// OpenAI's chat shape: {"content": [{token, logprob, bytes, top_logprobs: [...]}, ...]}.
ojson chat_logprobs(std::span<const LogprobEntry> entries) {
  return {{"content", logprob_entries<ojson>(entries, "top_logprobs", token_json)}};
}

// The completions shape: tokens, token_logprobs, top_logprobs (token text -> logprob), text_offset.
ojson completion_logprobs(std::span<const LogprobEntry> entries, std::size_t offset) {
  ojson tokens = ojson::array(), lps = ojson::array(), tops = ojson::array(), offsets = ojson::array();
  for (const LogprobEntry& e : entries) {
    tokens.push_back(e.chosen.text);
    lps.push_back(e.chosen.logprob);
    ojson top = ojson::object();
    for (const TokenLogprob& t : e.top) {
      if (!top.contains(t.text)) top[t.text] = t.logprob;  // two tokens may share a text
    }
    tops.push_back(std::move(top));
    offsets.push_back(offset);
    offset += e.chosen.text.size();
  }
  return {{"tokens", tokens}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

}  // namespace

std::string chunk(const CompletionRequest& r, std::string_view id, std::int64_t created, std::string_view text,
                  std::string_view finish_reason, bool first, std::span<const LogprobEntry> logprobs,
                  std::size_t text_offset, std::size_t index, std::string_view stop_word) {
  ojson j = envelope(r, id, created, r.chat ? "chat.completion.chunk" : "text_completion");
  ojson c;
  c["index"] = index;
  if (r.chat) {
    ojson delta = ojson::object();
    if (first) delta["role"] = "assistant";
    if (!text.empty()) delta["content"] = text;
    else if (first) delta["content"] = nullptr;  // llama-server's opening delta, which its clients read
    c["delta"] = delta;
    if (r.logprobs >= 0) c["logprobs"] = chat_logprobs(logprobs);
  } else {
    c["text"] = text;
    c["logprobs"] = r.logprobs >= 0 ? completion_logprobs(logprobs, text_offset) : ojson(nullptr);
  }
  c["finish_reason"] = finish_reason.empty() ? ojson(nullptr) : ojson(finish_reason);
  if (!finish_reason.empty()) c["stop_reason"] = stop_word.empty() ? ojson(nullptr) : ojson(stop_word);
  j["choices"] = ojson::array({c});
  return to_json_text(j);
}

std::string delta_chunk(const CompletionRequest& r, std::string_view id, std::int64_t created, const ChatDelta& d,
                        bool first, std::span<const LogprobEntry> logprobs, std::size_t index) {
  ojson j = envelope(r, id, created, "chat.completion.chunk");
  ojson delta = ojson::object();
  if (first) delta["role"] = "assistant";
  if (!d.content.empty()) delta["content"] = d.content;
  else if (first && d.reasoning.empty() && d.tool_index < 0) delta["content"] = nullptr;
  if (!d.reasoning.empty()) delta["reasoning_content"] = d.reasoning;
  if (d.tool_index >= 0) {
    // OpenAI's shape: the first piece of a call carries its id, type and name; later pieces only
    // the index and more of the arguments.
    ojson call = {{"index", d.tool_index}};
    if (!d.tool_id.empty()) {
      call["id"] = d.tool_id;
      call["type"] = "function";
    }
    ojson fn = ojson::object();
    if (!d.tool_name.empty()) fn["name"] = d.tool_name;
    if (!d.tool_arguments.empty() || !d.tool_name.empty()) fn["arguments"] = d.tool_arguments;
    call["function"] = fn;
    delta["tool_calls"] = ojson::array({call});
  }
  ojson c = {{"index", index}, {"delta", delta}};
  if (r.logprobs >= 0) c["logprobs"] = chat_logprobs(logprobs);
  c["finish_reason"] = nullptr;
  j["choices"] = ojson::array({c});
  return to_json_text(j);
}

std::string usage_chunk(const CompletionRequest& r, std::string_view id, std::int64_t created, const Usage& u) {
  ojson j = envelope(r, id, created, r.chat ? "chat.completion.chunk" : "text_completion");
  j["choices"] = ojson::array();
  j["usage"] = usage_json(u);
  return to_json_text(j);
}

std::string response(const CompletionRequest& r, std::string_view id, std::int64_t created,
                     std::span<const Choice> choices, const Usage& u) {
  ojson j = envelope(r, id, created, r.chat ? "chat.completion" : "text_completion");
  ojson list = ojson::array();
  for (std::size_t i = 0; i < choices.size(); ++i) {
    const Choice& ch = choices[i];
    ojson c;
    c["index"] = i;
    if (r.chat) {
      c["message"] = {{"role", "assistant"},
                      {"content", ch.calls.empty() || !ch.text.empty() ? ojson(ch.text) : ojson(nullptr)}};
      if (!ch.reasoning.empty()) c["message"]["reasoning_content"] = ch.reasoning;
      if (!ch.calls.empty()) {
        ojson calls = ojson::array();
        for (const ToolCall& t : ch.calls) {
          calls.push_back({{"id", t.id}, {"type", "function"}, {"function", {{"name", t.name}, {"arguments", t.arguments}}}});
        }
        c["message"]["tool_calls"] = std::move(calls);
      }
      if (r.logprobs >= 0) c["logprobs"] = chat_logprobs(ch.logprobs);
    } else {
      c["text"] = ch.text;
      c["logprobs"] = r.logprobs >= 0 ? completion_logprobs(ch.logprobs, 0) : ojson(nullptr);
    }
    c["finish_reason"] = ch.finish_reason;
    c["stop_reason"] = ch.stop_word.empty() ? ojson(nullptr) : ojson(ch.stop_word);
    list.push_back(std::move(c));
  }
  j["choices"] = std::move(list);
  j["usage"] = usage_json(u);
  return to_json_text(j);
}

std::string models(std::string_view model_id, std::int64_t created) {
  ojson m = {{"id", model_id}, {"object", "model"}, {"created", created}, {"owned_by", "umad"}};
  return to_json_text(ojson{{"object", "list"}, {"data", ojson::array({m})}});
}

}  // namespace uma::openai
