#include "http/openai.h"

#include <nlohmann/json.hpp>

#include <limits>

#include "common/json_text.h"

namespace uma::openai {
namespace {

// Requests are read in their own key order: a JSON schema's property order is the output's.
using json = nlohmann::ordered_json;
using ojson = nlohmann::ordered_json;

Status bad(std::string_view field, std::string_view what) {
  return Status(ErrorCode::kBadRequest, "'" + std::string(field) + "' " + std::string(what), std::string(field));
}

template <typename T>
Status number(const json& j, const char* key, double lo, double hi, T* out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return Status::Ok();
  if (!it->is_number()) return bad(key, "must be a number");
  const double v = it->get<double>();
  if (v < lo || v > hi) return bad(key, "is out of range");
  *out = static_cast<T>(v);
  return Status::Ok();
}

Status nul_inside(std::string_view field) {
  return Status(ErrorCode::kContainsNul, "'" + std::string(field) + "' must not contain NUL", std::string(field));
}

// An optional string field: absent or null leaves *out as it is; any other type is an error.
Status optional_string(const json& j, const char* key, std::string* out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return Status::Ok();
  if (!it->is_string()) return bad(key, "must be a string");
  *out = it->get<std::string>();
  return Status::Ok();
}

Status text_content(const json& m, std::string* out) {
  auto it = m.find("content");
  if (it == m.end() || it->is_null()) return Status::Ok();
  if (it->is_string()) {
    *out = it->get<std::string>();
    return Status::Ok();
  }
  if (!it->is_array()) return bad("messages[].content", "must be a string or an array of text parts");
  for (const json& part : *it) {  // [{"type":"text","text":"..."}]
    // Every read type-checked: a client's JSON must never reach a throwing accessor.
    const auto type = part.is_object() ? part.find("type") : part.end();
    const auto text = part.is_object() ? part.find("text") : part.end();
    if (type == part.end() || !type->is_string() || *type != "text" || text == part.end() || !text->is_string()) {
      return bad("messages[].content", "supports text parts only");
    }
    *out += text->get_ref<const std::string&>();
  }
  return Status::Ok();
}

// Every field a request may carry, and what umad does with it. A field we do not implement is a
// 400 naming it (an app that asks for JSON mode or tools and silently gets neither fails far from
// the cause); a field that asks for nothing (logprobs false, n 1, an empty tools list, ...) or
// changes nothing about the output (user, metadata, store, ...) is accepted. null is absent.
enum class Use : std::uint8_t {
  kParsed,    // read into the request below
  kHarmless,  // accepted, changes nothing about the output
  kNoOpOnly,  // accepted only with the value that asks for nothing (is_noop)
};
struct FieldRule {
  const char* name;
  Use use;
  bool chat, completions;  // on which endpoint it exists
};
constexpr FieldRule kFields[] = {
    {"model", Use::kParsed, true, true},
    {"messages", Use::kParsed, true, false},
    {"prompt", Use::kParsed, false, true},
    {"max_tokens", Use::kParsed, true, true},
    {"max_completion_tokens", Use::kParsed, true, false},
    {"temperature", Use::kParsed, true, true},
    {"top_p", Use::kParsed, true, true},
    {"top_k", Use::kParsed, true, true},           // extensions, as llama-server and vLLM take them
    {"min_p", Use::kParsed, true, true},
    {"repeat_penalty", Use::kParsed, true, true},
    {"presence_penalty", Use::kParsed, true, true},
    {"frequency_penalty", Use::kParsed, true, true},
    {"seed", Use::kParsed, true, true},
    {"n", Use::kParsed, true, true},
    {"stop", Use::kParsed, true, true},
    {"stream", Use::kParsed, true, true},
    {"stream_options", Use::kParsed, true, true},
    {"user", Use::kParsed, true, true},
    {"metadata", Use::kHarmless, true, true},
    {"store", Use::kHarmless, true, true},
    {"service_tier", Use::kHarmless, true, true},
    {"prompt_cache_key", Use::kHarmless, true, true},
    {"safety_identifier", Use::kHarmless, true, true},
    {"logprobs", Use::kParsed, true, true},
    {"top_logprobs", Use::kParsed, true, false},
    {"logit_bias", Use::kNoOpOnly, true, true},
    {"response_format", Use::kParsed, true, false},
    {"tools", Use::kNoOpOnly, true, false},
    {"tool_choice", Use::kNoOpOnly, true, false},
    {"parallel_tool_calls", Use::kNoOpOnly, true, false},
    {"functions", Use::kNoOpOnly, true, false},
    {"function_call", Use::kNoOpOnly, true, false},
    {"modalities", Use::kNoOpOnly, true, false},
    {"audio", Use::kNoOpOnly, true, false},
    {"prediction", Use::kNoOpOnly, true, false},
    {"reasoning_effort", Use::kNoOpOnly, true, false},
    {"verbosity", Use::kNoOpOnly, true, false},
    {"web_search_options", Use::kNoOpOnly, true, false},
    {"echo", Use::kNoOpOnly, false, true},
    {"best_of", Use::kNoOpOnly, false, true},
    {"suffix", Use::kNoOpOnly, false, true},
};

// The value of a kNoOpOnly field that asks for nothing beyond what umad does anyway.
bool is_noop(std::string_view name, const json& v, const json& request) {
  const auto no_tools = [&] {
    const auto t = request.find("tools");
    return t == request.end() || t->is_null() || (t->is_array() && t->empty());
  };
  if (name == "logit_bias") return v.is_object() && v.empty();
  if (name == "tools" || name == "functions") return v.is_array() && v.empty();
  if (name == "tool_choice") return no_tools() && v.is_string() && (v == "none" || v == "auto");
  if (name == "parallel_tool_calls") return no_tools() && v.is_boolean();
  if (name == "modalities") return v.is_array() && v.size() == 1 && v[0] == "text";
  if (name == "echo") return v.is_boolean() && !v.get<bool>();
  if (name == "best_of") return v.is_number_integer() && v.get<std::int64_t>() == 1;
  if (name == "suffix") return v.is_string() && v.get_ref<const std::string&>().empty();
  return false;  // function_call, audio, prediction, reasoning_effort, ...: only null asks for nothing
}

// response_format: {"type":"text"}, {"type":"json_object"} or {"type":"json_schema",
// "json_schema":{"name":..., "schema":{...}, "strict":...}} (the schema is always enforced: a
// grammar cannot be loose).
Status response_format(const json& v, std::string* schema) {
  const char* field = "response_format";
  const auto type = v.is_object() ? v.find("type") : v.end();
  if (type == v.end() || !type->is_string()) return bad(field, "must be an object with a string 'type'");
  if (*type == "text") return Status::Ok();
  if (*type == "json_object") {
    *schema = R"({"type":"object"})";
    return Status::Ok();
  }
  if (*type != "json_schema") return bad(field, "type must be text, json_object or json_schema");
  const auto js = v.find("json_schema");
  if (js == v.end() || !js->is_object()) return bad("response_format.json_schema", "must be an object");
  const auto name = js->find("name");
  if (name != js->end() && !name->is_null() && !name->is_string()) return bad("response_format.json_schema.name", "must be a string");
  const auto strict = js->find("strict");
  if (strict != js->end() && !strict->is_null() && !strict->is_boolean()) return bad("response_format.json_schema.strict", "must be a boolean");
  const auto s = js->find("schema");
  if (s == js->end() || !s->is_object()) return bad("response_format.json_schema.schema", "must be a JSON schema object");
  *schema = to_json_text(*s);
  return Status::Ok();
}

// chat: logprobs (boolean) and top_logprobs (0..20, only with logprobs); completions: logprobs
// (the number of alternatives, 0..20). *out: -1 none, else the alternatives wanted.
Status logprobs(const json& j, bool chat, std::int32_t* out) {
  const auto lp = j.find("logprobs");
  const auto top = chat ? j.find("top_logprobs") : j.end();
  const bool has_top = top != j.end() && !top->is_null();
  if (has_top && (!top->is_number_integer() || top->get<std::int64_t>() < 0 || top->get<std::int64_t>() > kMaxTopLogprobs)) {
    return bad("top_logprobs", "must be an integer from 0 to 20");
  }
  if (lp == j.end() || lp->is_null()) {
    if (has_top) return bad("top_logprobs", "needs logprobs: true");
    return Status::Ok();
  }
  if (chat) {
    if (!lp->is_boolean()) return bad("logprobs", "must be a boolean");
    if (!lp->get<bool>()) {
      if (has_top && top->get<std::int64_t>() > 0) return bad("top_logprobs", "needs logprobs: true");
      return Status::Ok();
    }
    *out = has_top ? static_cast<std::int32_t>(top->get<std::int64_t>()) : 0;
    return Status::Ok();
  }
  if (lp->is_boolean() && !lp->get<bool>()) return Status::Ok();
  if (!lp->is_number_integer() || lp->get<std::int64_t>() < 0 || lp->get<std::int64_t>() > kMaxTopLogprobs) {
    return bad("logprobs", "must be an integer from 0 to 20");
  }
  *out = static_cast<std::int32_t>(lp->get<std::int64_t>());
  return Status::Ok();
}

Status check_fields(const json& j, bool chat) {
  for (const auto& [key, value] : j.items()) {
    if (value.is_null()) continue;
    const FieldRule* rule = nullptr;
    for (const FieldRule& r : kFields) {
      if (key == r.name && (chat ? r.chat : r.completions)) rule = &r;
    }
    if (rule == nullptr) {
      return bad(key, std::string("is not a field of ") + (chat ? "/v1/chat/completions" : "/v1/completions") +
                          " that umad knows (docs/PROTOCOL.md lists them)");
    }
    if (rule->use == Use::kNoOpOnly && !is_noop(key, value, j)) {
      return Status(ErrorCode::kBadRequest,
                    "'" + key + "' is not supported by umad yet (only the value that asks for nothing is accepted)",
                    key);
    }
  }
  return Status::Ok();
}

}  // namespace

Status parse_request(std::string_view body, bool chat, const Limits& limits, const SamplingParams& defaults,
                     CompletionRequest* r) {
  const json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Status(ErrorCode::kInvalidJson, "the request body is not valid JSON");
  if (!j.is_object()) return Status(ErrorCode::kBadRequest, "the request body must be a JSON object");
  if (Status st = check_fields(j, chat); !st.ok()) return st;
  r->chat = chat;
  r->sampling = defaults;
  if (Status st = optional_string(j, "model", &r->model); !st.ok()) return st;
  std::size_t bytes = 0;
  if (chat) {
    auto it = j.find("messages");
    if (it == j.end() || !it->is_array() || it->empty()) return bad("messages", "must be a non-empty array");
    for (const json& m : *it) {
      const auto role = m.is_object() ? m.find("role") : m.end();
      if (role == m.end() || !role->is_string()) return bad("messages[].role", "must be a string");
      ChatMessage msg{role->get<std::string>(), {}};
      if (Status st = text_content(m, &msg.content); !st.ok()) return st;
      // A NUL would silently cut the message where the chat template copies C strings.
      if (msg.role.find('\0') != std::string::npos) return nul_inside("messages[].role");
      if (msg.content.find('\0') != std::string::npos) return nul_inside("messages[].content");
      bytes += msg.content.size();
      r->messages.push_back(std::move(msg));
    }
  } else {
    auto it = j.find("prompt");
    if (it == j.end()) return bad("prompt", "is required");
    if (it->is_array() && it->size() == 1 && (*it)[0].is_string()) {
      r->prompt = (*it)[0].get<std::string>();
    } else if (it->is_string()) {
      r->prompt = it->get<std::string>();
    } else {
      return bad("prompt", "must be a string (or an array of one string)");
    }
    if (r->prompt.empty()) return bad("prompt", "must not be empty");
    if (r->prompt.find('\0') != std::string::npos) return nul_inside("prompt");
    bytes = r->prompt.size();
  }
  if (bytes > limits.max_prompt_bytes) {
    return Status(ErrorCode::kPromptTooLarge, "prompt of " + std::to_string(bytes) + " bytes is over the limit of " +
                                                  std::to_string(limits.max_prompt_bytes));
  }
  for (const char* key : {"max_tokens", "max_completion_tokens"}) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) continue;
    // Any positive count: whether the prompt plus this fits the context is the scheduler's to say
    // (it knows the prompt's tokens); the bound here only keeps the sum far from overflow.
    if (!it->is_number_integer() || it->get<std::int64_t>() < 1 || it->get<std::int64_t>() > kMaxTokensField) {
      return bad(key, "must be a positive integer");
    }
    r->max_tokens = static_cast<std::int32_t>(it->get<std::int64_t>());
  }
  SamplingParams& s = r->sampling;
  Status st;
  if (!(st = number(j, "temperature", 0.0, 2.0, &s.temperature)).ok()) return st;
  if (!(st = number(j, "top_p", 0.0, 1.0, &s.top_p)).ok()) return st;
  if (!(st = number(j, "presence_penalty", -2.0, 2.0, &s.presence_penalty)).ok()) return st;
  if (!(st = number(j, "frequency_penalty", -2.0, 2.0, &s.frequency_penalty)).ok()) return st;
  if (!(st = number(j, "min_p", 0.0, 1.0, &s.min_p)).ok()) return st;
  if (!(st = number(j, "repeat_penalty", 0.0, 10.0, &s.repeat_penalty)).ok()) return st;
  if (s.repeat_penalty == 0.0f) return bad("repeat_penalty", "must be greater than 0");
  if (auto it = j.find("top_k"); it != j.end() && !it->is_null()) {
    if (!it->is_number_integer() || it->get<std::int64_t>() < 0 || it->get<std::int64_t>() > 1'000'000) {
      return bad("top_k", "must be an integer >= 0");
    }
    s.top_k = static_cast<std::int32_t>(it->get<std::int64_t>());
  }
  if (auto it = j.find("seed"); it != j.end() && !it->is_null()) {
    if (!it->is_number_integer()) return bad("seed", "must be an integer");
    s.seed = static_cast<std::uint32_t>(it->get<std::int64_t>());
  }
  if (auto it = j.find("n"); it != j.end() && !it->is_null()) {
    if (!it->is_number_integer() || it->get<std::int64_t>() != 1) return bad("n", "must be 1 (one choice per request)");
  }
  if (auto it = j.find("stop"); it != j.end() && !it->is_null()) {
    if (it->is_string()) {
      r->stop.push_back(it->get<std::string>());
    } else if (it->is_array() && it->size() <= 4) {
      for (const json& e : *it) {
        if (!e.is_string()) return bad("stop", "must be a string or an array of up to 4 strings");
        r->stop.push_back(e.get<std::string>());
      }
    } else {
      return bad("stop", "must be a string or an array of up to 4 strings");
    }
    for (const std::string& x : r->stop) {
      if (x.empty()) return bad("stop", "must not hold empty strings");
    }
  }
  if (auto it = j.find("stream"); it != j.end() && !it->is_null()) {
    if (!it->is_boolean()) return bad("stream", "must be a boolean");
    r->stream = it->get<bool>();
  }
  if (auto it = j.find("stream_options"); it != j.end() && !it->is_null()) {
    if (!it->is_object()) return bad("stream_options", "must be an object");
    if (auto u = it->find("include_usage"); u != it->end() && !u->is_null()) {
      if (!u->is_boolean()) return bad("stream_options.include_usage", "must be a boolean");
      r->include_usage = u->get<bool>();
    }
  }
  if (Status st = optional_string(j, "user", &r->user); !st.ok()) return st;
  if (Status st = logprobs(j, chat, &r->logprobs); !st.ok()) return st;
  r->sampling.logprobs = r->logprobs;
  if (auto it = j.find("response_format"); it != j.end() && !it->is_null()) {
    if (Status st = response_format(*it, &r->json_schema); !st.ok()) return st;
  }
  return Status::Ok();
}

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
  return {{"prompt_tokens", u.prompt_tokens}, {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens}};
}

ojson token_json(const TokenLogprob& t) {
  ojson bytes = ojson::array();
  for (unsigned char ch : t.text) bytes.push_back(ch);
  return {{"token", t.text}, {"logprob", t.logprob}, {"bytes", bytes}};
}

// OpenAI's chat shape: {"content": [{token, logprob, bytes, top_logprobs: [...]}, ...]}.
ojson chat_logprobs(std::span<const LogprobEntry> entries) {
  ojson content = ojson::array();
  for (const LogprobEntry& e : entries) {
    ojson x = token_json(e.chosen);
    ojson top = ojson::array();
    for (const TokenLogprob& t : e.top) top.push_back(token_json(t));
    x["top_logprobs"] = top;
    content.push_back(std::move(x));
  }
  return {{"content", content}};
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
                  std::size_t text_offset) {
  ojson j = envelope(r, id, created, r.chat ? "chat.completion.chunk" : "text_completion");
  ojson c;
  c["index"] = 0;
  if (r.chat) {
    ojson delta = ojson::object();
    if (first) delta["role"] = "assistant";
    if (!text.empty()) delta["content"] = text;
    c["delta"] = delta;
    if (r.logprobs >= 0) c["logprobs"] = chat_logprobs(logprobs);
  } else {
    c["text"] = text;
    c["logprobs"] = r.logprobs >= 0 ? completion_logprobs(logprobs, text_offset) : ojson(nullptr);
  }
  c["finish_reason"] = finish_reason.empty() ? ojson(nullptr) : ojson(finish_reason);
  j["choices"] = ojson::array({c});
  return to_json_text(j);
}

std::string usage_chunk(const CompletionRequest& r, std::string_view id, std::int64_t created, const Usage& u) {
  ojson j = envelope(r, id, created, r.chat ? "chat.completion.chunk" : "text_completion");
  j["choices"] = ojson::array();
  j["usage"] = usage_json(u);
  return to_json_text(j);
}

std::string response(const CompletionRequest& r, std::string_view id, std::int64_t created, std::string_view text,
                     std::string_view finish_reason, const Usage& u, std::span<const LogprobEntry> logprobs) {
  ojson j = envelope(r, id, created, r.chat ? "chat.completion" : "text_completion");
  ojson c;
  c["index"] = 0;
  if (r.chat) {
    c["message"] = {{"role", "assistant"}, {"content", text}};
    if (r.logprobs >= 0) c["logprobs"] = chat_logprobs(logprobs);
  } else {
    c["text"] = text;
    c["logprobs"] = r.logprobs >= 0 ? completion_logprobs(logprobs, 0) : ojson(nullptr);
  }
  c["finish_reason"] = finish_reason;
  j["choices"] = ojson::array({c});
  j["usage"] = usage_json(u);
  return to_json_text(j);
}

std::string models(std::string_view model_id, std::int64_t created) {
  ojson m = {{"id", model_id}, {"object", "model"}, {"created", created}, {"owned_by", "umad"}};
  return to_json_text(ojson{{"object", "list"}, {"data", ojson::array({m})}});
}

unsigned http_status(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidJson:
    case ErrorCode::kBadRequest:
    case ErrorCode::kInvalidArgument:
    case ErrorCode::kInvalidUtf8:
    case ErrorCode::kContainsNul:
    case ErrorCode::kEmptyPrompt:
    case ErrorCode::kContextExceeded: return 400;
    case ErrorCode::kPromptTooLarge:
    case ErrorCode::kFrameTooLarge: return 413;
    case ErrorCode::kOverloaded:
    case ErrorCode::kTooManySessions:
    case ErrorCode::kBusy: return 429;
    case ErrorCode::kShuttingDown:
    case ErrorCode::kModelLoad: return 503;
    default: return 500;
  }
}

std::string error_body(ErrorCode code, std::string_view message, std::string_view param) {
  const unsigned status = http_status(code);
  const char* type = status == 400 || status == 413 ? "invalid_request_error"
                     : status == 429                ? "rate_limit_error"
                     : status == 503                ? "service_unavailable"
                                                    : "server_error";
  ojson e = {{"message", message}, {"type", type}, {"param", nullptr}, {"code", error_code_name(code)}};
  if (!param.empty()) e["param"] = param;
  return to_json_text(ojson{{"error", e}});
}

}  // namespace uma::openai
