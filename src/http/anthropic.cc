#include "http/anthropic.h"

#include <nlohmann/json.hpp>

#include "common/json_text.h"
#include "http/openai_json.h"

namespace uma::anthropic {
namespace {

using openai::detail::bad;     // the request readers' shared helpers (openai_json.h)
using openai::detail::json;
using openai::detail::member;

// Text blocks' text, joined (a string is its own text). Other block types are refused.
Status text_of(const json& content, const char* field, std::string* out) {
  if (content.is_string()) {
    *out += content.get_ref<const std::string&>();
    return Status::Ok();
  }
  if (!content.is_array()) return bad(field, "must be a string or an array of content blocks");
  for (const json& b : content) {
    const json* type = member(b, "type");
    const json* text = member(b, "text");
    if (type == nullptr || *type != "text" || text == nullptr || !text->is_string()) {
      return bad(field, "supports text blocks only here");
    }
    *out += text->get_ref<const std::string&>();
  }
  return Status::Ok();
}

// An image block ({"source": {"type": "base64", "data": ...}}; a "url" source is refused, as
// nothing is fetched) as an OpenAI image_url part, which the chat parser checks.
Status image_block(const json& b, json* parts) {
  const json* source = member(b, "source");
  const json* kind = source != nullptr ? member(*source, "type") : nullptr;
  if (kind == nullptr || !kind->is_string()) return bad("messages[].content[].source", "must be an object with a type");
  const json* data = member(*source, *kind == "url" ? "url" : "data");
  if (data == nullptr || !data->is_string()) return bad("messages[].content[].source.data", "must be a string");
  const std::string url = *kind == "url" ? data->get<std::string>() : "data:application/octet-stream;base64," + data->get<std::string>();
  parts->push_back({{"type", "image_url"}, {"image_url", {{"url", url}}}});
  return Status::Ok();
}

// One Anthropic message as OpenAI chat messages: tool_result blocks become tool turns (before the
// user's text), tool_use blocks the assistant's tool_calls, thinking blocks its reasoning_content (the
// template renders what the model needs of its past turns).
Status messages(const json& m, json* out) {
  const json* role = member(m, "role");
  if (role == nullptr || !role->is_string() || (*role != "user" && *role != "assistant")) {
    return bad("messages[].role", "must be user or assistant");
  }
  const json* content = member(m, "content");
  if (content == nullptr) return bad("messages[].content", "is required");
  if (content->is_string()) {
    out->push_back({{"role", *role}, {"content", *content}});
    return Status::Ok();
  }
  if (!content->is_array()) return bad("messages[].content", "must be a string or an array of content blocks");
  std::string text, thinking;
  json calls = json::array();
  json parts = json::array();  // a user's text and images in order, once an image came
  for (const json& b : *content) {
    const json* type = member(b, "type");
    if (type == nullptr || !type->is_string()) return bad("messages[].content[].type", "must be a string");
    const std::string& t = type->get_ref<const std::string&>();
    if (t == "text") {
      const json* tx = member(b, "text");
      if (tx == nullptr || !tx->is_string()) return bad("messages[].content[].text", "must be a string");
      text += tx->get_ref<const std::string&>();
      if (!parts.empty()) parts.push_back({{"type", "text"}, {"text", *tx}});
    } else if (t == "image" && *role == "user") {
      if (parts.empty() && !text.empty()) parts.push_back({{"type", "text"}, {"text", text}});
      if (Status st = image_block(b, &parts); !st.ok()) return st;
    } else if (t == "tool_use" && *role == "assistant") {
      const json* id = member(b, "id");
      const json* name = member(b, "name");
      const json* input = member(b, "input");
      if (id == nullptr || !id->is_string() || name == nullptr || !name->is_string() || (input != nullptr && !input->is_object())) {
        return bad("messages[].content[]", "tool_use blocks need a string id and name and an object input");
      }
      calls.push_back({{"id", *id}, {"type", "function"},
                       {"function", {{"name", *name}, {"arguments", to_json_text(input != nullptr ? *input : json::object())}}}});
    } else if (t == "tool_result" && *role == "user") {
      const json* id = member(b, "tool_use_id");
      if (id == nullptr || !id->is_string()) return bad("messages[].content[].tool_use_id", "must be a string");
      std::string result;
      if (const json* c = member(b, "content")) {
        if (Status st = text_of(*c, "messages[].content[].content", &result); !st.ok()) return st;
      }
      if (const json* err = member(b, "is_error"); err != nullptr && err->is_boolean() && err->get<bool>()) result = "Error: " + result;
      out->push_back({{"role", "tool"}, {"tool_call_id", *id}, {"content", result}});
    } else if (t == "thinking" && *role == "assistant") {
      // Given back as the template's reasoning_content: templates that render past thinking (a
      // tool-use loop's) see it, and count_tokens counts it.
      const json* th = member(b, "thinking");
      if (th == nullptr || !th->is_string()) return bad("messages[].content[].thinking", "must be a string");
      thinking += th->get_ref<const std::string&>();
    } else if (t == "thinking" || t == "redacted_thinking") {
      continue;  // redacted: encrypted by Anthropic, nothing a local template can render
    } else {
      return bad("messages[].content[].type", "'" + t + "' is not supported by umad (text, image, tool_use, tool_result)");
    }
  }
  if (*role == "assistant") {
    json msg = {{"role", "assistant"}, {"content", text}};
    if (!calls.empty()) msg["tool_calls"] = calls;
    if (!thinking.empty()) msg["reasoning_content"] = thinking;
    out->push_back(std::move(msg));
  } else if (!parts.empty()) {
    out->push_back({{"role", "user"}, {"content", std::move(parts)}});
  } else if (!text.empty() || out->empty() || out->back()["role"] != "tool") {
    out->push_back({{"role", "user"}, {"content", text}});
  }
  return Status::Ok();
}

}  // namespace

static Status translate(std::string_view body, bool counting, std::string* chat_body, std::vector<std::string>* ignored) {
  const json j = json::parse(body, nullptr, false);
  if (j.is_discarded()) return Status(ErrorCode::kInvalidJson, "the request body is not valid JSON");
  if (!j.is_object()) return Status(ErrorCode::kBadRequest, "the request body must be a JSON object");
  json out = json::object();
  json msgs = json::array();
  for (const auto& [key, v] : j.items()) {
    if (v.is_null()) continue;
    if (key == "model" || key == "temperature" || key == "top_p" || key == "top_k" || key == "stream") {
      out[key] = v;
    } else if (key == "max_tokens") {
      out["max_tokens"] = v;
    } else if (key == "stop_sequences") {
      out["stop"] = v;
    } else if (key == "metadata") {
      if (const json* user = member(v, "user_id"); user != nullptr && user->is_string()) out["user"] = *user;
    } else if (key == "tools") {
      if (!v.is_array()) return bad("tools", "must be an array");
      json tools = json::array();
      for (const json& t : v) {
        const json* name = member(t, "name");
        const json* type = member(t, "type");
        if (type != nullptr && *type != "custom") return bad("tools[].type", "server tools are not supported by umad");
        if (name == nullptr || !name->is_string()) return bad("tools[].name", "must be a string");
        json fn = {{"name", *name}};
        if (const json* d = member(t, "description")) fn["description"] = *d;
        if (const json* s = member(t, "input_schema")) fn["parameters"] = *s;
        tools.push_back({{"type", "function"}, {"function", fn}});
      }
      out["tools"] = tools;
    } else if (key == "tool_choice") {
      const json* type = member(v, "type");
      if (type == nullptr || !type->is_string()) return bad("tool_choice", "must be {\"type\": auto | any | tool | none}");
      if (*type == "auto") out["tool_choice"] = "auto";
      else if (*type == "any") out["tool_choice"] = "required";
      else if (*type == "none") out["tool_choice"] = "none";
      else if (*type == "tool" && member(v, "name") != nullptr) out["tool_choice"] = {{"type", "function"}, {"function", {{"name", *member(v, "name")}}}};
      else return bad("tool_choice", "must be {\"type\": auto | any | tool (with name) | none}");
      if (const json* p = member(v, "disable_parallel_tool_use"); p != nullptr && p->is_boolean()) {
        out["parallel_tool_calls"] = !p->get<bool>();
      }
    } else if (key == "thinking") {
      const json* type = member(v, "type");
      if (type == nullptr || (*type != "enabled" && *type != "disabled")) return bad("thinking", "must be {\"type\": enabled | disabled}");
      out["chat_template_kwargs"] = {{"enable_thinking", *type == "enabled"}};
    } else if (key == "system") {
      std::string text;
      if (Status st = text_of(v, "system", &text); !st.ok()) return st;
      msgs.insert(msgs.begin(), json{{"role", "system"}, {"content", text}});
    } else if (key == "messages") {
      if (!v.is_array() || v.empty()) return bad("messages", "must be a non-empty array");
      json turns = json::array();
      for (const json& m : v) {
        if (Status st = messages(m, &turns); !st.ok()) return st;
      }
      msgs.insert(msgs.end(), turns.begin(), turns.end());
    } else if (key == "service_tier" || key == "container" || key == "context_management") {
      continue;  // nothing to do with one model here
    } else {
      ignored->push_back(key);
    }
  }
  if (!j.contains("messages") || j["messages"].is_null()) return bad("messages", "is required");
  if (!counting && (!j.contains("max_tokens") || j["max_tokens"].is_null())) return bad("max_tokens", "is required");
  out["messages"] = std::move(msgs);
  *chat_body = to_json_text(out);
  return Status::Ok();
}

Status to_chat_body(std::string_view body, std::string* chat_body, std::vector<std::string>* ignored) {
  return translate(body, false, chat_body, ignored);
}

Status count_body_to_chat_body(std::string_view body, std::string* chat_body) {
  std::vector<std::string> ignored;
  return translate(body, true, chat_body, &ignored);
}

}  // namespace uma::anthropic

namespace uma {
namespace {

using json = nlohmann::ordered_json;

// Anthropic counts cached prompt tokens apart from input_tokens (what was computed).
json usage_json(const openai::Usage& u) {
  return {{"input_tokens", u.prompt_tokens - u.cached_tokens}, {"cache_creation_input_tokens", 0},
          {"cache_read_input_tokens", u.cached_tokens}, {"output_tokens", u.completion_tokens}};
}

const char* error_type(ErrorCode code) {
  switch (http_status(code)) {
    case 400: return "invalid_request_error";
    case 401: return "authentication_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503: return "overloaded_error";
    default: return "api_error";
  }
}

class AnthropicWriter final : public ReplyWriter {
 public:
  AnthropicWriter(const openai::CompletionRequest& r, std::string id) : r_(r), id_(std::move(id)) {}

  void prompt_known(std::int32_t prompt_tokens, std::int32_t cached_tokens) override {
    prompt_ = {prompt_tokens, cached_tokens};
  }

  void open(std::size_t, std::string& out) override {
    json usage = {{"input_tokens", prompt_.first - prompt_.second}, {"cache_creation_input_tokens", 0},
                  {"cache_read_input_tokens", prompt_.second}, {"output_tokens", 0}};
    json message = {{"id", id_}, {"type", "message"}, {"role", "assistant"}, {"model", model()},
                    {"content", json::array()}, {"stop_reason", nullptr}, {"stop_sequence", nullptr},
                    {"usage", std::move(usage)}};
    event(out, "message_start", {{"type", "message_start"}, {"message", message}});
  }

  void delta(std::size_t, const ChatDelta& d, std::span<const LogprobEntry>, std::size_t, std::string& out) override {
    if (!d.reasoning.empty()) {
      block(out, "thinking", -1, {{"type", "thinking"}, {"thinking", ""}});
      event(out, "content_block_delta", {{"type", "content_block_delta"}, {"index", index_},
                                         {"delta", {{"type", "thinking_delta"}, {"thinking", d.reasoning}}}});
    }
    if (!d.content.empty()) {
      block(out, "text", -1, {{"type", "text"}, {"text", ""}});
      event(out, "content_block_delta", {{"type", "content_block_delta"}, {"index", index_},
                                         {"delta", {{"type", "text_delta"}, {"text", d.content}}}});
    }
    if (d.tool_index >= 0) {
      block(out, "tool_use", d.tool_index,
            {{"type", "tool_use"}, {"id", d.tool_id}, {"name", d.tool_name}, {"input", json::object()}});
      if (!d.tool_arguments.empty()) {
        event(out, "content_block_delta", {{"type", "content_block_delta"}, {"index", index_},
                                           {"delta", {{"type", "input_json_delta"}, {"partial_json", d.tool_arguments}}}});
      }
    }
  }

  void finish(std::size_t, const ChoiceEnd& end, std::span<const LogprobEntry>, std::size_t, std::string& out) override {
    close_block(out);
    stop_reason_ = stop_reason(end);
    stop_word_ = end.stop_word;
  }

  void close(const openai::Usage& u, std::string& out) override {
    event(out, "message_delta", {{"type", "message_delta"},
                                 {"delta", {{"stop_reason", stop_reason_}, {"stop_sequence", stop_sequence(stop_reason_, stop_word_)}}},
                                 {"usage", usage_json(u)}});
    event(out, "message_stop", {{"type", "message_stop"}});
  }

  void fail(const Status& st, std::string& out) override { sse_event(out, error_body(st), "error"); }

  std::string whole(std::span<const WholeChoice> choices, const openai::Usage& u) override {
    const WholeChoice& c = choices.front();  // Anthropic's API has one choice
    json content = json::array();
    if (!c.reasoning.empty()) content.push_back({{"type", "thinking"}, {"thinking", c.reasoning}, {"signature", ""}});
    if (!c.text.empty() || c.calls.empty()) content.push_back({{"type", "text"}, {"text", c.text}});
    for (const ToolCall& call : c.calls) {
      json input = json::parse(call.arguments, nullptr, false);
      if (input.is_discarded() || !input.is_object()) input = json::object();
      content.push_back({{"type", "tool_use"}, {"id", call.id}, {"name", call.name}, {"input", input}});
    }
    const std::string reason = stop_reason(c.end);
    return to_json_text(json{{"id", id_}, {"type", "message"}, {"role", "assistant"}, {"model", model()},
                             {"content", content}, {"stop_reason", reason},
                             {"stop_sequence", stop_sequence(reason, c.end.stop_word)},
                             {"usage", usage_json(u)}});
  }

  std::string error_body(const Status& st) const override {
    return to_json_text(json{{"type", "error"}, {"error", {{"type", error_type(st.code())}, {"message", st.message()}}}});
  }

 private:
  std::string model() const { return r_.model.empty() ? "umad" : r_.model; }

  // Anthropic's stop reasons: a stop string the client gave is stop_sequence (the template's own
  // end markers are the turn's end).
  std::string stop_reason(const ChoiceEnd& end) const {
    if (end.reason == "length") return "max_tokens";
    if (end.reason == "tool_calls") return "tool_use";
    for (const std::string& s : r_.stop) {
      if (!end.stop_word.empty() && s == end.stop_word) return "stop_sequence";
    }
    return "end_turn";
  }
  static json stop_sequence(const std::string& reason, std::string_view word) {
    return reason == "stop_sequence" ? json(word) : json(nullptr);
  }

  void event(std::string& out, const char* name, const json& j) { sse_event(out, to_json_text(j), name); }

  // The content block a piece belongs to: a new one starts when the kind (or the tool call) changes.
  void block(std::string& out, const char* kind, std::ptrdiff_t tool, const json& start) {
    if (open_ && kind_ == kind && tool_ == tool) return;
    close_block(out);
    ++index_;
    open_ = true;
    kind_ = kind;
    tool_ = tool;
    event(out, "content_block_start", {{"type", "content_block_start"}, {"index", index_}, {"content_block", start}});
  }
  void close_block(std::string& out) {
    if (!open_) return;
    open_ = false;
    event(out, "content_block_stop", {{"type", "content_block_stop"}, {"index", index_}});
  }

  const openai::CompletionRequest& r_;
  std::pair<std::int32_t, std::int32_t> prompt_{0, 0};  // tokens, of them cached (prompt_known)
  std::string id_;
  std::int64_t index_ = -1;  // the current content block
  bool open_ = false;
  std::string kind_;
  std::ptrdiff_t tool_ = -1;
  std::string stop_reason_ = "end_turn";
  std::string stop_word_;
};

}  // namespace

std::unique_ptr<ReplyWriter> anthropic_writer(const openai::CompletionRequest& r, std::string id, std::int64_t) {
  return std::make_unique<AnthropicWriter>(r, std::move(id));
}

}  // namespace uma
