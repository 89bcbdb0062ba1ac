#include "http/responses_api.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>

#include "common/json_text.h"
#include "http/openai_json.h"

namespace uma::responses {
namespace {

using openai::detail::bad;     // the request readers' shared helpers (openai_json.h)
using openai::detail::json;
using openai::detail::member;

// A message item's content: a string, or input_text / output_text parts.
Status content_text(const json& c, std::string* out) {
  if (c.is_string()) {
    *out = c.get<std::string>();
    return Status::Ok();
  }
  if (!c.is_array()) return bad("input[].content", "must be a string or an array of text parts");
  for (const json& part : c) {
    const json* type = member(part, "type");
    const json* text = member(part, "text");
    if (type == nullptr || (*type != "input_text" && *type != "output_text" && *type != "text") || text == nullptr ||
        !text->is_string()) {
      return bad("input[].content", "supports input_text and output_text parts only");
    }
    *out += text->get_ref<const std::string&>();
  }
  return Status::Ok();
}

// A message item's content for the chat body: its text parts, and input_image parts (image_url, a
// data URL) as OpenAI image_url parts, which the chat parser checks.
Status message_content(const json& c, json* out) {
  const auto image = [](const json& part) {
    const json* type = member(part, "type");
    return type != nullptr && *type == "input_image";
  };
  if (!c.is_array() || std::none_of(c.begin(), c.end(), image)) {
    std::string text;
    if (Status st = content_text(c, &text); !st.ok()) return st;
    *out = std::move(text);
    return Status::Ok();
  }
  *out = json::array();
  for (const json& part : c) {
    if (!image(part)) {
      std::string text;
      if (Status st = content_text(json::array({part}), &text); !st.ok()) return st;
      out->push_back({{"type", "text"}, {"text", std::move(text)}});
      continue;
    }
    const json* url = member(part, "image_url");
    if (url == nullptr || !url->is_string()) return bad("input[].content[].image_url", "must be a data URL (file_id is not supported)");
    out->push_back({{"type", "image_url"}, {"image_url", {{"url", *url}}}});
  }
  return Status::Ok();
}

Status input_items(const json& input, json* msgs) {
  if (input.is_string()) {
    msgs->push_back({{"role", "user"}, {"content", input}});
    return Status::Ok();
  }
  if (!input.is_array() || input.empty()) return bad("input", "must be a string or a non-empty array of items");
  for (const json& item : input) {
    const json* type = member(item, "type");
    const std::string t = type != nullptr && type->is_string() ? type->get<std::string>() : std::string("message");
    if (t == "message") {
      const json* role = member(item, "role");
      const json* content = member(item, "content");
      if (role == nullptr || !role->is_string() || content == nullptr) return bad("input[]", "messages need a role and content");
      json parts;
      if (Status st = message_content(*content, &parts); !st.ok()) return st;
      const std::string r = *role == "developer" ? std::string("system") : role->get<std::string>();
      msgs->push_back({{"role", r}, {"content", std::move(parts)}});
    } else if (t == "function_call") {
      const json* id = member(item, "call_id");
      const json* name = member(item, "name");
      const json* args = member(item, "arguments");
      if (id == nullptr || !id->is_string() || name == nullptr || !name->is_string() || (args != nullptr && !args->is_string())) {
        return bad("input[]", "function_call items need a call_id, a name and string arguments");
      }
      const json call = {{"id", *id}, {"type", "function"},
                         {"function", {{"name", *name}, {"arguments", args != nullptr ? *args : json("{}")}}}};
      // Consecutive calls are one assistant turn.
      if (!msgs->empty() && msgs->back()["role"] == "assistant" && msgs->back().contains("tool_calls")) {
        msgs->back()["tool_calls"].push_back(call);
      } else {
        msgs->push_back({{"role", "assistant"}, {"content", ""}, {"tool_calls", json::array({call})}});
      }
    } else if (t == "function_call_output") {
      const json* id = member(item, "call_id");
      const json* output = member(item, "output");
      if (id == nullptr || !id->is_string() || output == nullptr) return bad("input[]", "function_call_output items need a call_id and output");
      std::string text;
      if (Status st = content_text(*output, &text); !st.ok()) return st;
      msgs->push_back({{"role", "tool"}, {"tool_call_id", *id}, {"content", text}});
    } else if (t == "reasoning") {
      continue;
    } else {
      return bad("input[].type", "'" + t + "' is not supported by umad (message, function_call, function_call_output)");
    }
  }
  return Status::Ok();
}

}  // namespace

Status to_chat_body(std::string_view body, std::string* chat_body, std::vector<std::string>* ignored) {
  const json j = json::parse(body, nullptr, false);
  if (j.is_discarded()) return Status(ErrorCode::kInvalidJson, "the request body is not valid JSON");
  if (!j.is_object()) return Status(ErrorCode::kBadRequest, "the request body must be a JSON object");
  json out = json::object();
  json msgs = json::array();
  std::string instructions;
  for (const auto& [key, v] : j.items()) {
    if (v.is_null()) continue;
    if (key == "model" || key == "temperature" || key == "top_p" || key == "stream" || key == "parallel_tool_calls" ||
        key == "user" || key == "metadata" || key == "top_logprobs") {
      if (key != "top_logprobs") out[key] = v;
    } else if (key == "max_output_tokens") {
      out["max_tokens"] = v;
    } else if (key == "instructions") {
      if (!v.is_string()) return bad("instructions", "must be a string");
      instructions = v.get<std::string>();
    } else if (key == "input") {
      if (Status st = input_items(v, &msgs); !st.ok()) return st;
    } else if (key == "tools") {
      if (!v.is_array()) return bad("tools", "must be an array");
      json tools = json::array();
      for (const json& t : v) {
        if (member(t, "type") == nullptr || *member(t, "type") != "function") return bad("tools[].type", "only function tools are supported by umad");
        json fn = {{"name", member(t, "name") != nullptr ? *member(t, "name") : json(nullptr)}};
        if (const json* d = member(t, "description")) fn["description"] = *d;
        if (const json* p = member(t, "parameters")) fn["parameters"] = *p;
        tools.push_back({{"type", "function"}, {"function", fn}});
      }
      out["tools"] = tools;
    } else if (key == "tool_choice") {
      if (v.is_string()) out["tool_choice"] = v;
      else if (member(v, "type") != nullptr && *member(v, "type") == "function" && member(v, "name") != nullptr) {
        out["tool_choice"] = {{"type", "function"}, {"function", {{"name", *member(v, "name")}}}};
      } else {
        return bad("tool_choice", "must be none, auto, required or {\"type\": \"function\", \"name\": ...}");
      }
    } else if (key == "text") {
      const json* format = member(v, "format");
      if (format == nullptr) continue;
      const json* type = member(*format, "type");
      if (type == nullptr || !type->is_string()) return bad("text.format.type", "must be text, json_object or json_schema");
      if (*type == "json_schema") {
        json js = {{"name", member(*format, "name") != nullptr ? *member(*format, "name") : json("output")}};
        if (const json* s = member(*format, "schema")) js["schema"] = *s;
        out["response_format"] = {{"type", "json_schema"}, {"json_schema", js}};
      } else if (*type == "json_object" || *type == "text") {
        out["response_format"] = {{"type", *type}};
      } else {
        return bad("text.format.type", "must be text, json_object or json_schema");
      }
    } else if (key == "reasoning") {
      if (const json* e = member(v, "effort")) out["reasoning_effort"] = *e;
    } else if (key == "previous_response_id" || key == "conversation") {
      return bad(key, "needs responses kept by the server; umad keeps none (send the whole input)");
    } else if (key == "store" || key == "background") {
      if (v.is_boolean() && v.get<bool>()) return bad(key, "cannot be true: umad keeps no responses");
    } else if (key == "truncation" || key == "include" || key == "service_tier" || key == "prompt_cache_key" ||
               key == "safety_identifier" || key == "stream_options") {
      continue;
    } else {
      ignored->push_back(key);
    }
  }
  if (!j.contains("input") || j["input"].is_null()) return bad("input", "is required");
  if (!instructions.empty()) msgs.insert(msgs.begin(), json{{"role", "system"}, {"content", instructions}});
  out["messages"] = std::move(msgs);
  *chat_body = to_json_text(out);
  return Status::Ok();
}

}  // namespace uma::responses

namespace uma {
namespace {

using json = nlohmann::ordered_json;

class ResponsesWriter final : public ReplyWriter {
 public:
  ResponsesWriter(const openai::CompletionRequest& r, std::string id, std::int64_t created)
      : r_(r), id_(std::move(id)), created_(created) {}

  void open(std::size_t, std::string& out) override {
    event(out, "response.created", {{"response", response("in_progress", {})}});
    event(out, "response.in_progress", {{"response", response("in_progress", {})}});
  }

  void delta(std::size_t, const ChatDelta& d, std::span<const LogprobEntry>, std::size_t, std::string& out) override {
    if (!d.reasoning.empty()) {
      item(out, "reasoning", -1, {{"type", "reasoning"}, {"summary", json::array()}});
      items_.back()["_text"] = items_.back()["_text"].get<std::string>() + d.reasoning;
      event(out, "response.reasoning_text.delta", {{"item_id", items_.back()["id"]}, {"output_index", items_.size() - 1},
                                                   {"content_index", 0}, {"delta", d.reasoning}});
    }
    if (!d.content.empty()) {
      if (item(out, "message", -1, {{"type", "message"}, {"status", "in_progress"}, {"role", "assistant"}, {"content", json::array()}})) {
        event(out, "response.content_part.added", {{"item_id", items_.back()["id"]}, {"output_index", items_.size() - 1},
                                                   {"content_index", 0}, {"part", text_part("")}});
      }
      items_.back()["_text"] = items_.back()["_text"].get<std::string>() + d.content;
      event(out, "response.output_text.delta", {{"item_id", items_.back()["id"]}, {"output_index", items_.size() - 1},
                                                {"content_index", 0}, {"delta", d.content}, {"logprobs", json::array()}});
    }
    if (d.tool_index >= 0) {
      item(out, "function_call", d.tool_index,
           {{"type", "function_call"}, {"status", "in_progress"}, {"call_id", d.tool_id}, {"name", d.tool_name}, {"arguments", ""}});
      if (!d.tool_arguments.empty()) {
        items_.back()["_text"] = items_.back()["_text"].get<std::string>() + d.tool_arguments;
        event(out, "response.function_call_arguments.delta",
              {{"item_id", items_.back()["id"]}, {"output_index", items_.size() - 1}, {"delta", d.tool_arguments}});
      }
    }
  }

  void finish(std::size_t, const ChoiceEnd& end, std::span<const LogprobEntry>, std::size_t, std::string& out) override {
    close_item(out);
    incomplete_ = end.reason == "length";
  }

  void close(const openai::Usage& u, std::string& out) override {
    json output = json::array();
    for (const json& it : items_) output.push_back(done_item(it));
    event(out, incomplete_ ? "response.incomplete" : "response.completed",
          {{"response", response(incomplete_ ? "incomplete" : "completed", output, &u)}});
  }

  void fail(const Status& st, std::string& out) override {
    event(out, "error", {{"code", error_code_name(st.code())}, {"message", st.message()},
                         {"param", st.param().empty() ? json(nullptr) : json(st.param())}});
  }

  std::string whole(std::span<const WholeChoice> choices, const openai::Usage& u) override {
    const WholeChoice& c = choices.front();
    json output = json::array();
    if (!c.reasoning.empty()) {
      output.push_back(done_item({{"id", next_id("rs_")}, {"type", "reasoning"}, {"summary", json::array()}, {"_text", c.reasoning}}));
    }
    if (!c.text.empty() || c.calls.empty()) {
      output.push_back(done_item({{"id", next_id("msg_")}, {"type", "message"}, {"role", "assistant"}, {"_text", c.text}}));
    }
    for (const ToolCall& call : c.calls) {
      output.push_back(done_item({{"id", next_id("fc_")}, {"type", "function_call"}, {"call_id", call.id},
                                  {"name", call.name}, {"_text", call.arguments}}));
    }
    incomplete_ = c.end.reason == "length";
    return to_json_text(response(incomplete_ ? "incomplete" : "completed", output, &u));
  }

  std::string error_body(const Status& st) const override { return http_error_body(st); }

 private:
  static json text_part(const std::string& text) {
    return {{"type", "output_text"}, {"text", text}, {"annotations", json::array()}, {"logprobs", json::array()}};
  }

  std::string next_id(const char* prefix) { return prefix + id_ + "_" + std::to_string(items_made_++); }

  // An item as it ends (the private `_text` becomes its text, content or arguments).
  static json done_item(const json& it) {
    json d = it;
    const std::string text = d.value("_text", std::string());
    d.erase("_text");
    d.erase("_tool");
    if (d["type"] == "message") {
      d["status"] = "completed";
      d["content"] = json::array({text_part(text)});
    } else if (d["type"] == "function_call") {
      d["status"] = "completed";
      d["arguments"] = text;
    } else {
      d["content"] = json::array({{{"type", "reasoning_text"}, {"text", text}}});
    }
    return d;
  }

  // The item a piece belongs to; true when a new one was opened.
  bool item(std::string& out, const char* type, std::ptrdiff_t tool, json fresh) {
    if (open_ && items_.back()["type"] == type && items_.back()["_tool"] == tool) return false;
    close_item(out);
    const char* prefix = std::string_view(type) == "message" ? "msg_" : std::string_view(type) == "reasoning" ? "rs_" : "fc_";
    json it = {{"id", next_id(prefix)}};
    for (auto& [k, v] : fresh.items()) it[k] = v;
    event(out, "response.output_item.added", {{"output_index", items_.size()}, {"item", it}});
    it["_text"] = "";
    it["_tool"] = tool;
    items_.push_back(std::move(it));
    open_ = true;
    return true;
  }

  void close_item(std::string& out) {
    if (!open_) return;
    open_ = false;
    const json& it = items_.back();
    const std::size_t at = items_.size() - 1;
    const std::string text = it["_text"].get<std::string>();
    if (it["type"] == "message") {
      event(out, "response.output_text.done", {{"item_id", it["id"]}, {"output_index", at}, {"content_index", 0}, {"text", text}, {"logprobs", json::array()}});
      event(out, "response.content_part.done", {{"item_id", it["id"]}, {"output_index", at}, {"content_index", 0}, {"part", text_part(text)}});
    } else if (it["type"] == "function_call") {
      event(out, "response.function_call_arguments.done", {{"item_id", it["id"]}, {"output_index", at}, {"arguments", text}});
    } else {
      event(out, "response.reasoning_text.done", {{"item_id", it["id"]}, {"output_index", at}, {"content_index", 0}, {"text", text}});
    }
    event(out, "response.output_item.done", {{"output_index", at}, {"item", done_item(it)}});
  }

  json response(const char* status, json output, const openai::Usage* u = nullptr) const {
    json r = {{"id", id_}, {"object", "response"}, {"created_at", created_}, {"status", status}, {"error", nullptr},
              {"incomplete_details", std::string_view(status) == "incomplete" ? json{{"reason", "max_output_tokens"}} : json(nullptr)},
              {"model", r_.model.empty() ? "umad" : r_.model}, {"output", std::move(output)},
              {"parallel_tool_calls", r_.parallel_tool_calls}, {"previous_response_id", nullptr}, {"store", false},
              {"temperature", r_.sampling.temperature}, {"top_p", r_.sampling.top_p},
              {"max_output_tokens", r_.max_tokens ? json(*r_.max_tokens) : json(nullptr)}, {"truncation", "disabled"},
              {"tools", json::array()}, {"tool_choice", "auto"}, {"metadata", json::object()}};
    r["usage"] = u == nullptr ? json(nullptr)
                              : json{{"input_tokens", u->prompt_tokens}, {"input_tokens_details", {{"cached_tokens", u->cached_tokens}}},
                                     {"output_tokens", u->completion_tokens}, {"output_tokens_details", {{"reasoning_tokens", 0}}},
                                     {"total_tokens", u->prompt_tokens + u->completion_tokens}};
    return r;
  }

  void event(std::string& out, const char* type, json j) {
    json e = {{"type", type}, {"sequence_number", sequence_++}};
    for (auto& [k, v] : j.items()) e[k] = std::move(v);
    sse_event(out, to_json_text(e), type);
  }

  const openai::CompletionRequest& r_;
  std::string id_;
  std::int64_t created_;
  std::vector<json> items_;  // output items so far, with their text in `_text`
  bool open_ = false;        // the last item still grows
  bool incomplete_ = false;
  std::int64_t sequence_ = 0;
  std::int64_t items_made_ = 0;
};

}  // namespace

std::unique_ptr<ReplyWriter> responses_writer(const openai::CompletionRequest& r, std::string id, std::int64_t created) {
  return std::make_unique<ResponsesWriter>(r, std::move(id), created);
}

}  // namespace uma
