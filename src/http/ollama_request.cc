// Ollama's requests as umad's OpenAI bodies (ollama_api.h).
#include "http/ollama_request.h"

#include "common/json_text.h"
#include "http/image_input.h"
#include "http/openai_json.h"

namespace uma::ollama {
namespace {

using openai::detail::bad;
using openai::detail::json;
using openai::detail::member;

Status not_supported(const std::string& field, std::string_view what) {
  return Status(ErrorCode::kNotSupported, "'" + field + "' " + std::string(what), field);
}

// options: Ollama's runtime settings. Sampling ones become the OpenAI (llama-server) fields umad
// reads; those that size or place the model change nothing per request here and are named.
Status options(const json& o, json* out, std::vector<std::string>* ignored) {
  if (!o.is_object()) return bad("options", "must be an object");
  static const char* const kSame[] = {"temperature", "top_k", "top_p", "min_p", "seed", "stop", "repeat_penalty",
                                      "presence_penalty", "frequency_penalty", "typical_p", "repeat_last_n"};
  for (const auto& [key, value] : o.items()) {
    bool same = false;
    for (const char* k : kSame) same = same || key == k;
    if (same) {
      (*out)[key] = value;
    } else if (key == "num_predict") {
      // -1: until the model stops, -2: until the context is full; both are umad's default.
      if (!value.is_number_integer() || value.get<std::int64_t>() < -2 || value.get<std::int64_t>() == 0) {
        return bad("options.num_predict", "must be a positive integer, -1 or -2");
      }
      if (value.get<std::int64_t>() > 0) (*out)["max_tokens"] = value;
    } else {
      ignored->push_back("options." + key);
    }
  }
  return Status::Ok();
}

// format: "json" (any object) or a JSON schema.
Status format(const json& f, json* out) {
  if (f.is_string() && f.get_ref<const std::string&>().empty()) return Status::Ok();
  if (f == "json") {
    (*out)["response_format"] = {{"type", "json_object"}};
  } else if (f.is_object()) {
    (*out)["response_format"] = {{"type", "json_schema"}, {"json_schema", {{"name", "format"}, {"schema", f}}}};
  } else {
    return bad("format", "must be \"json\" or a JSON schema object");
  }
  return Status::Ok();
}

// think: true/false, or a level ("low", "medium", "high": thinking on).
Status think(const json& t, json* out) {
  bool on = false;
  if (t.is_boolean()) {
    on = t.get<bool>();
  } else if (t == "low" || t == "medium" || t == "high") {
    on = true;
  } else {
    return bad("think", "must be a boolean or low, medium, high");
  }
  (*out)["chat_template_kwargs"] = {{"enable_thinking", on}};
  return Status::Ok();
}

// Ollama's images (bare base64) as OpenAI image_url parts with data URLs, which the chat parser
// checks (http/image_input.h); the images go before the text, as Ollama's own prompts put them.
Status image_parts(const json& o, const char* field, json* parts, json* base64) {
  const json* images = member(o, "images");
  if (images == nullptr || images->is_null()) return Status::Ok();
  if (!images->is_array()) return bad(field, "must be an array of base64 images");
  for (const json& i : *images) {
    if (!i.is_string()) return bad(field, "must be an array of base64 images");
    parts->push_back({{"type", "image_url"},
                      {"image_url", {{"url", "data:application/octet-stream;base64," + i.get<std::string>()}}}});
    base64->push_back(i);
  }
  return Status::Ok();
}

// One Ollama message as an OpenAI one: tool_calls' arguments objects become JSON text, a tool
// turn keeps the tool's name.
Status message(const json& m, std::size_t index, json* out) {
  const json* role = member(m, "role");
  if (role == nullptr || !role->is_string()) return bad("messages[].role", "must be a string");
  const json* content = member(m, "content");
  if (content != nullptr && !content->is_string()) return bad("messages[].content", "must be a string");
  json parts = json::array(), base64 = json::array();
  if (Status st = image_parts(m, "messages[].images", &parts, &base64); !st.ok()) return st;
  json msg = {{"role", *role}, {"content", content != nullptr ? *content : json("")}};
  if (!parts.empty()) {
    if (content != nullptr && !content->get_ref<const std::string&>().empty()) parts.push_back({{"type", "text"}, {"text", *content}});
    msg["content"] = std::move(parts);
  }
  if (const json* calls = member(m, "tool_calls")) {
    if (!calls->is_array()) return bad("messages[].tool_calls", "must be an array");
    json openai_calls = json::array();
    for (const json& c : *calls) {
      const json* fn = member(c, "function");
      const json* name = fn != nullptr ? member(*fn, "name") : nullptr;
      if (name == nullptr || !name->is_string()) return bad("messages[].tool_calls[].function.name", "must be a string");
      const json* args = member(*fn, "arguments");
      const std::string arguments = args == nullptr ? "{}" : args->is_string() ? args->get<std::string>() : to_json_text(*args);
      openai_calls.push_back({{"id", "call_" + std::to_string(index) + "_" + std::to_string(openai_calls.size())},
                              {"type", "function"},
                              {"function", {{"name", *name}, {"arguments", arguments}}}});
    }
    if (!openai_calls.empty()) msg["tool_calls"] = std::move(openai_calls);
  }
  if (const json* tool = member(m, "tool_name"); tool != nullptr && tool->is_string()) msg["name"] = *tool;
  out->push_back(std::move(msg));
  return Status::Ok();
}

// What /api/chat and /api/generate share: model, stream (Ollama's default: true), options,
// format, think, keep_alive.
Status common(const json& j, json* out, std::vector<std::string>* ignored) {
  const json* model = member(j, "model");
  if (model == nullptr || !model->is_string()) return bad("model", "is required");
  (*out)["model"] = *model;
  const json* stream = member(j, "stream");
  if (stream != nullptr && !stream->is_boolean()) return bad("stream", "must be a boolean");
  (*out)["stream"] = stream == nullptr || stream->get<bool>();
  if (const json* o = member(j, "options")) {
    if (Status st = options(*o, out, ignored); !st.ok()) return st;
  }
  if (const json* f = member(j, "format")) {
    if (Status st = format(*f, out); !st.ok()) return st;
  }
  if (const json* t = member(j, "think")) {
    if (Status st = think(*t, out); !st.ok()) return st;
  }
  if (member(j, "keep_alive") != nullptr) ignored->push_back("keep_alive");  // one model, always loaded
  return Status::Ok();
}

Status parse_object(std::string_view body, json* j) {
  *j = json::parse(body, nullptr, false);
  if (j->is_discarded()) return Status(ErrorCode::kInvalidJson, "the request body is not valid JSON");
  if (!j->is_object()) return Status(ErrorCode::kBadRequest, "the request body must be a JSON object");
  return Status::Ok();
}

}  // namespace

Status chat_body(std::string_view body, std::string* out, std::vector<std::string>* ignored) {
  json j;
  if (Status st = parse_object(body, &j); !st.ok()) return st;
  json o = json::object();
  if (Status st = common(j, &o, ignored); !st.ok()) return st;
  const json* messages = member(j, "messages");
  if (messages == nullptr || !messages->is_array()) return bad("messages", "must be an array");
  json openai_messages = json::array();
  for (std::size_t i = 0; i < messages->size(); ++i) {
    if (Status st = message((*messages)[i], i, &openai_messages); !st.ok()) return st;
  }
  o["messages"] = std::move(openai_messages);
  if (const json* tools = member(j, "tools")) {
    if (!tools->is_array()) return bad("tools", "must be an array");
    if (!tools->empty()) o["tools"] = *tools;  // Ollama's tools are OpenAI's
  }
  for (const auto& [key, value] : j.items()) {
    static const char* const kKnown[] = {"model", "messages", "tools", "stream", "options", "format", "think", "keep_alive"};
    bool known = false;
    for (const char* k : kKnown) known = known || key == k;
    if (!known) ignored->push_back(key);
  }
  *out = to_json_text(o);
  return Status::Ok();
}

Status generate_body(std::string_view body, Generate* out, std::vector<std::string>* ignored) {
  json j;
  if (Status st = parse_object(body, &j); !st.ok()) return st;
  json o = json::object();
  if (Status st = common(j, &o, ignored); !st.ok()) return st;
  json parts = json::array(), base64 = json::array();
  if (Status st = image_parts(j, "images", &parts, &base64); !st.ok()) return st;
  const json* tmpl = member(j, "template");
  if (tmpl != nullptr && !(tmpl->is_string() && tmpl->get_ref<const std::string&>().empty())) {
    return not_supported("template", "is not supported: the model's own template renders the prompt");
  }
  if (const json* suffix = member(j, "suffix")) {
    if (!suffix->is_string()) return bad("suffix", "must be a string");
    out->suffix = suffix->get<std::string>();
  }
  const json* prompt = member(j, "prompt");
  if (prompt != nullptr && !prompt->is_string()) return bad("prompt", "must be a string");
  const json* system = member(j, "system");
  if (system != nullptr && !system->is_string()) return bad("system", "must be a string");
  const json* raw = member(j, "raw");
  if (raw != nullptr && !raw->is_boolean()) return bad("raw", "must be a boolean");
  out->model = o["model"].get<std::string>();
  out->load_only = (prompt == nullptr || prompt->get_ref<const std::string&>().empty()) && out->suffix.empty();
  if (prompt != nullptr) out->prompt = prompt->get<std::string>();
  out->raw = raw != nullptr && raw->get<bool>();
  if (out->load_only) return Status::Ok();
  if (out->raw && base64.empty()) {
    o["prompt"] = *prompt;
  } else if (out->raw) {  // llama-server's prompt object: the images' markers before the text
    std::string text;
    for (std::size_t i = 0; i < base64.size(); ++i) text += kImageMarker;
    o["prompt"] = {{"prompt_string", text + prompt->get<std::string>()}, {"multimodal_data", std::move(base64)}};
  } else {
    json messages = json::array();
    if (system != nullptr && !system->get_ref<const std::string&>().empty()) messages.push_back({{"role", "system"}, {"content", *system}});
    if (!parts.empty()) parts.push_back({{"type", "text"}, {"text", *prompt}});
    messages.push_back({{"role", "user"}, {"content", parts.empty() ? json(*prompt) : std::move(parts)}});
    o["messages"] = std::move(messages);
  }
  for (const auto& [key, value] : j.items()) {
    static const char* const kKnown[] = {"model", "prompt", "system", "raw", "stream", "options", "format", "think",
                                         "keep_alive", "suffix", "template", "images"};
    bool known = false;
    for (const char* k : kKnown) known = known || key == k;
    if (!known) ignored->push_back(key);  // context: umad keeps no conversation state between requests
  }
  out->body = to_json_text(o);
  return Status::Ok();
}

Status embed_body(std::string_view body, bool legacy, std::string* out, std::vector<std::string>* ignored) {
  json j;
  if (Status st = parse_object(body, &j); !st.ok()) return st;
  const json* model = member(j, "model");
  if (model == nullptr || !model->is_string()) return bad("model", "is required");
  const char* field = legacy ? "prompt" : "input";
  const json* input = member(j, field);
  if (input == nullptr) return bad(field, "is required");
  if (legacy && !input->is_string()) return bad(field, "must be a string");
  json o = {{"model", *model}, {"input", *input}};
  for (const auto& [key, value] : j.items()) {
    if (key != "model" && key != field) ignored->push_back(key);  // truncate, options, keep_alive, dimensions
  }
  *out = to_json_text(o);
  return Status::Ok();
}

}  // namespace uma::ollama
