#include "http/openai.h"

#include "common/json_fields.h"

#include <algorithm>
#include <limits>

#include "common/json_text.h"
#include "http/openai_json.h"

namespace uma::openai {
namespace {

using namespace detail;  // json, bad, member, number, ...

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

// One image part: {"type":"image_url","image_url":{"url":"data:..."}} (or the URL as a string).
Status image_part(const json& part, const ImageLimits& limits, std::vector<std::string>* images) {
  const char* field = "messages[].content[].image_url";
  const auto u = part.find("image_url");
  const json* url = u == part.end() ? nullptr : u->is_object() ? member(*u, "url") : &*u;
  if (url == nullptr || !url->is_string()) return bad(field, "must be {\"url\": \"data:image/...;base64,...\"}");
  if (Status st = room_for_image(images->size(), field, limits); !st.ok()) return st;
  std::string bytes;
  if (Status st = image_from_url(url->get_ref<const std::string&>(), field, limits, &bytes); !st.ok()) return st;
  images->push_back(std::move(bytes));
  return Status::Ok();
}

// A message's content: a string, or parts: text, and images, each put in the text as kImageMarker
// where it stood (the prepare stage puts its embeddings there).
Status message_content(const json& m, const ImageLimits& limits, std::string* out, std::vector<std::string>* images) {
  auto it = m.find("content");
  if (it == m.end() || it->is_null()) return Status::Ok();
  if (it->is_string()) {
    *out = it->get<std::string>();
    return Status::Ok();
  }
  if (!it->is_array()) return bad("messages[].content", "must be a string or an array of text and image_url parts");
  for (const json& part : *it) {  // [{"type":"text","text":"..."}, {"type":"image_url",...}]
    // Every read type-checked: a client's JSON must never reach a throwing accessor.
    const auto type = part.is_object() ? part.find("type") : part.end();
    if (type != part.end() && type->is_string() && *type == "image_url") {
      if (Status st = image_part(part, limits, images); !st.ok()) return st;
      *out += kImageMarker;
      continue;
    }
    const auto text = part.is_object() ? part.find("text") : part.end();
    if (type == part.end() || !type->is_string() || *type != "text" || text == part.end() || !text->is_string()) {
      return bad("messages[].content", "supports text and image_url parts");
    }
    *out += text->get_ref<const std::string&>();
  }
  return Status::Ok();
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
    // llama-server's extension: a schema beside json_object is the one the object must match.
    const auto given = v.find("schema");
    if (given != v.end() && !given->is_null() && !given->is_object()) return bad("response_format.schema", "must be a JSON schema object");
    *schema = given != v.end() && given->is_object() ? to_json_text(*given) : std::string(R"({"type":"object"})");
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

// tools: [{"type":"function","function":{"name","description"?,"parameters"?,"strict"?}}]
Status tools(const json& v, std::vector<ChatTool>* out) {
  if (!v.is_array()) return bad("tools", "must be an array of function tools");
  for (const json& t : v) {
    const json* type = member(t, "type");
    const json* fn = member(t, "function");
    if (type == nullptr || *type != "function" || fn == nullptr || !fn->is_object()) {
      return bad("tools", "entries must be {\"type\": \"function\", \"function\": {...}}");
    }
    const json* name = member(*fn, "name");
    if (name == nullptr || !name->is_string() || name->get_ref<const std::string&>().empty()) {
      return bad("tools[].function.name", "must be a non-empty string");
    }
    ChatTool tool{name->get<std::string>(), {}, "{}"};
    if (const json* d = member(*fn, "description")) {
      if (!d->is_string()) return bad("tools[].function.description", "must be a string");
      tool.description = d->get<std::string>();
    }
    if (const json* params = member(*fn, "parameters")) {
      if (!params->is_object()) return bad("tools[].function.parameters", "must be a JSON schema object");
      tool.parameters = to_json_text(*params);
    }
    if (const json* strict = member(*fn, "strict"); strict != nullptr && !strict->is_boolean()) {
      return bad("tools[].function.strict", "must be a boolean");
    }
    for (const ChatTool& other : *out) {
      if (other.name == tool.name) return bad("tools", "names '" + tool.name + "' twice");
    }
    out->push_back(std::move(tool));
  }
  return Status::Ok();
}

// tool_choice: "none" | "auto" | "required" | {"type":"function","function":{"name":...}}.
Status tool_choice(const json& v, CompletionRequest* r) {
  if (v.is_string()) {
    if (v == "none") r->tool_choice = ToolChoice::kNone;
    else if (v == "auto") r->tool_choice = ToolChoice::kAuto;
    else if (v == "required") r->tool_choice = ToolChoice::kRequired;
    else return bad("tool_choice", "must be none, auto, required or a named function");
  } else {
    const json* fn = member(v, "function");
    const json* name = fn != nullptr ? member(*fn, "name") : nullptr;
    if (member(v, "type") == nullptr || *member(v, "type") != "function" || name == nullptr || !name->is_string()) {
      return bad("tool_choice", "must be none, auto, required or {\"type\": \"function\", \"function\": {\"name\": ...}}");
    }
    r->forced_tool = name->get<std::string>();
    r->tool_choice = ToolChoice::kRequired;
  }
  if (r->tools.empty() && r->tool_choice != ToolChoice::kNone) {
    // Asking for a call without tools to call: OpenAI refuses it too ("auto" asks for nothing).
    if (r->tool_choice == ToolChoice::kAuto) return Status::Ok();
    return bad("tool_choice", "needs 'tools'");
  }
  if (!r->forced_tool.empty()) {
    bool known = false;
    for (const ChatTool& t : r->tools) known = known || t.name == r->forced_tool;
    if (!known) return bad("tool_choice", "names '" + r->forced_tool + "', which is not in 'tools'");
  }
  return Status::Ok();
}

// An assistant turn's tool_calls: [{"id","type":"function","function":{"name","arguments"}}].
Status message_tool_calls(const json& v, std::vector<ToolCall>* out) {
  if (!v.is_array()) return bad("messages[].tool_calls", "must be an array");
  for (const json& c : v) {
    const json* fn = member(c, "function");
    const json* name = fn != nullptr ? member(*fn, "name") : nullptr;
    const json* args = fn != nullptr ? member(*fn, "arguments") : nullptr;
    const json* id = member(c, "id");
    if (name == nullptr || !name->is_string() || (args != nullptr && !args->is_string()) ||
        (id != nullptr && !id->is_string())) {
      return bad("messages[].tool_calls", "entries must be {\"id\": string, \"type\": \"function\", "
                                          "\"function\": {\"name\": string, \"arguments\": string}}");
    }
    out->push_back({id != nullptr ? id->get<std::string>() : std::string(), name->get<std::string>(),
                    args != nullptr ? args->get<std::string>() : std::string("{}")});
  }
  return Status::Ok();
}

Status gateway_options(const json& g, std::int32_t n, GatewayOptions* out) {
  if (!g.is_object()) return bad("uma", "must be an object");
  for (const auto& [key, v] : g.items()) {
    if (key == "token_ids") {
      if (!v.is_boolean()) return bad("uma.token_ids", "must be a boolean");
      out->token_ids = v.get<bool>();
    } else if (key == "resume") {
      if (!json_token_ids(v, &out->resume)) return bad("uma.resume", "must be an array of token ids");
      if (n != 1) return bad("uma.resume", "needs n = 1");
    } else if (key == "prompt_tokens") {
      if (!json_token_ids(v, &out->prompt_tokens)) return bad("uma.prompt_tokens", "must be an array of token ids");
    } else if (key == "id") {
      if (!v.is_string() || v.get_ref<const std::string&>().size() > 128) return bad("uma.id", "must be a string of at most 128 bytes");
      out->id = v.get<std::string>();
    } else if (key == "created") {
      if (!v.is_number_integer() || v.get<std::int64_t>() < 0) return bad("uma.created", "must be an integer >= 0");
      out->created = v.get<std::int64_t>();
    } else {
      return bad("uma." + key, "is not a field of uma (token_ids, resume, id, created, prompt_tokens)");
    }
  }
  return Status::Ok();
}

// llama-server's multimodal_data: base64 images, one per image marker in prompt_string.
Status multimodal_data(const json& v, const ImageLimits& limits, std::vector<std::string>* images) {
  const std::string field = "prompt.multimodal_data";
  if (!v.is_array()) return bad(field, "must be an array of base64 images");
  for (const json& e : v) {
    if (Status st = room_for_image(images->size(), field, limits); !st.ok()) return st;
    if (!e.is_string()) return bad(field, "must be an array of base64 images");
    std::string bytes;
    if (Status st = image_from_base64(e.get_ref<const std::string&>(), field, limits, &bytes); !st.ok()) return st;
    images->push_back(std::move(bytes));
  }
  return Status::Ok();
}

// prompt: a string, token ids, or an array of either (one choice set each; OpenAI allows all four);
// and llama-server's: token ids and strings mixed in one prompt, {"prompt_string": ...}.
Status prompts(const json& v, const ImageLimits& limits, std::vector<PromptInput>* out) {
  const char* what = "must be a string, an array of token ids (strings may be mixed in), {\"prompt_string\": ...}, "
                     "or an array of those";
  auto text = [&](const json& e, std::string* t) -> Status {
    *t = e.get<std::string>();
    if (t->empty()) return bad("prompt", "must not be empty");
    return t->find('\0') != std::string::npos ? nul_inside("prompt") : Status::Ok();
  };
  // An array of token ids, or of ids and strings in turn.
  auto sequence = [&](const json& a, PromptInput* p) -> Status {
    if (json_token_ids(a, &p->tokens)) return p->tokens.empty() ? bad("prompt", "must not be empty") : Status::Ok();
    p->tokens.clear();
    for (const json& e : a) {
      if (e.is_string()) {
        p->mixed.emplace_back();
        if (Status st = text(e, &p->mixed.back().text); !st.ok()) return st;
        continue;
      }
      std::int64_t id = 0;
      if (!json_integer(e, 0, std::numeric_limits<std::int32_t>::max(), &id)) return bad("prompt", what);
      if (p->mixed.empty() || !p->mixed.back().text.empty()) p->mixed.emplace_back();
      p->mixed.back().tokens.push_back(static_cast<std::int32_t>(id));
    }
    return p->mixed.empty() ? bad("prompt", "must not be empty") : Status::Ok();
  };
  auto one = [&](const json& e) -> Status {
    PromptInput p;
    if (e.is_string()) {
      if (Status st = text(e, &p.text); !st.ok()) return st;
    } else if (e.is_object()) {
      const auto s = e.find("prompt_string");
      if (s == e.end() || !s->is_string()) return bad("prompt.prompt_string", "must be a string");
      for (const auto& [key, value] : e.items()) {
        if (key == "multimodal_data") {
          if (Status st = multimodal_data(value, limits, &p.images); !st.ok()) return st;
        } else if (key != "prompt_string") {
          return bad("prompt." + key, "is not a field of a prompt object");
        }
      }
      if (Status st = text(*s, &p.text); !st.ok()) return st;
    } else if (!e.is_array()) {
      return bad("prompt", what);
    } else if (Status st = sequence(e, &p); !st.ok()) {
      return st;
    }
    out->push_back(std::move(p));
    return Status::Ok();
  };
  if (v.is_string() || v.is_object()) return one(v);
  if (!v.is_array() || v.empty()) return bad("prompt", what);
  // One prompt of token ids (strings may be mixed in) when any element is a number.
  if (std::any_of(v.begin(), v.end(), [](const json& e) { return e.is_number(); })) return one(v);
  if (v.size() > static_cast<std::size_t>(kMaxChoices)) return bad("prompt", "holds more than 16 prompts");
  for (const json& e : v) {
    if (Status st = one(e); !st.ok()) return st;
  }
  return Status::Ok();
}

}  // namespace

namespace {

// messages: each turn's role, content (text and images), tool calls and results, reasoning.
Status read_chat_messages(const json& j, const Limits& limits, CompletionRequest* r, std::size_t* bytes) {
  auto it = j.find("messages");
  if (it == j.end() || !it->is_array() || it->empty()) return bad("messages", "must be a non-empty array");
  for (const json& m : *it) {
    const auto role = m.is_object() ? m.find("role") : m.end();
    if (role == m.end() || !role->is_string()) return bad("messages[].role", "must be a string");
    ChatMessage msg{role->get<std::string>(), {}, {}, {}, {}, {}};
    if (Status st = message_content(m, limits.images, &msg.content, &r->images); !st.ok()) return st;
    if (const json* calls = member(m, "tool_calls")) {
      if (Status st = message_tool_calls(*calls, &msg.tool_calls); !st.ok()) return st;
    }
    if (const json* id = member(m, "tool_call_id")) {
      if (!id->is_string()) return bad("messages[].tool_call_id", "must be a string");
      msg.tool_call_id = id->get<std::string>();
    }
    if (const json* name = member(m, "name")) {
      if (!name->is_string()) return bad("messages[].name", "must be a string");
      msg.name = name->get<std::string>();
    }
    // llama-server's and vLLM's: an assistant turn's thinking, given back for the template.
    if (const json* reasoning = member(m, "reasoning_content")) {
      if (!reasoning->is_string()) return bad("messages[].reasoning_content", "must be a string");
      msg.reasoning = reasoning->get<std::string>();
      *bytes += msg.reasoning.size();
    }
    // A NUL would silently cut the message where the chat template copies C strings.
    if (msg.role.find('\0') != std::string::npos) return nul_inside("messages[].role");
    if (msg.content.find('\0') != std::string::npos) return nul_inside("messages[].content");
    *bytes += msg.content.size();
    r->messages.push_back(std::move(msg));
  }
  return Status::Ok();
}

Status read_prompt_field(const json& j, const Limits& limits, CompletionRequest* r, std::size_t* bytes) {
  auto it = j.find("prompt");
  if (it == j.end()) return bad("prompt", "is required");
  if (Status st = prompts(*it, limits.images, &r->prompts); !st.ok()) return st;
  for (const PromptInput& p : r->prompts) {
    *bytes += p.text.size() + 4 * p.tokens.size();
    for (const PromptPiece& m : p.mixed) *bytes += m.text.size() + 4 * m.tokens.size();
  }
  return Status::Ok();
}

Status read_max_tokens(const json& j, CompletionRequest* r) {
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
  return Status::Ok();
}

// The sampling numbers, the seed and n (choices of each prompt).
Status read_sampling_numbers(const json& j, bool chat, CompletionRequest* r) {
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
    // -1 (vLLM) and 0 (llama-server): off.
    if (!it->is_number_integer() || it->get<std::int64_t>() < -1 || it->get<std::int64_t>() > 1'000'000) {
      return bad("top_k", "must be an integer >= -1 (-1 or 0: off)");
    }
    s.top_k = static_cast<std::int32_t>(std::max<std::int64_t>(0, it->get<std::int64_t>()));
  }
  if (auto it = j.find("seed"); it != j.end() && !it->is_null()) {
    if (!it->is_number_integer()) return bad("seed", "must be an integer");
    s.seed = static_cast<std::uint32_t>(it->get<std::int64_t>());
  }
  if (auto it = j.find("n"); it != j.end() && !it->is_null()) {
    if (!it->is_number_integer() || it->get<std::int64_t>() < 1 || it->get<std::int64_t>() > kMaxChoices) {
      return bad("n", "must be an integer from 1 to " + std::to_string(kMaxChoices));
    }
    r->n = static_cast<std::int32_t>(it->get<std::int64_t>());
  }
  if (!chat && static_cast<std::size_t>(r->n) * r->prompts.size() > kMaxChoices) {
    return bad("prompt", "asks for " + std::to_string(r->n * r->prompts.size()) + " choices (prompts x n); at most " +
                             std::to_string(kMaxChoices));
  }
  return Status::Ok();
}

// stop, stream and stream_options.
Status read_stop_and_stream(const json& j, CompletionRequest* r) {
  if (auto it = j.find("stop"); it != j.end() && !it->is_null()) {
    if (it->is_string()) {
      r->stop.push_back(it->get<std::string>());
    } else if (it->is_array() && it->size() <= kMaxStops) {
      for (const json& e : *it) {
        if (!e.is_string()) return bad("stop", "must be a string or an array of up to 16 strings");
        r->stop.push_back(e.get<std::string>());
      }
    } else {
      return bad("stop", "must be a string or an array of up to 16 strings");
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
  return Status::Ok();
}

// response_format, tools, tool_choice, parallel_tool_calls.
Status read_output_shape(const json& j, CompletionRequest* r) {
  if (auto it = j.find("response_format"); it != j.end() && !it->is_null()) {
    if (Status st = response_format(*it, &r->json_schema); !st.ok()) return st;
  }
  if (const json* t = member(j, "tools")) {
    if (Status st = tools(*t, &r->tools); !st.ok()) return st;
  }
  if (const json* c = member(j, "tool_choice")) {
    if (Status st = tool_choice(*c, r); !st.ok()) return st;
  } else if (!r->tools.empty()) {
    r->tool_choice = ToolChoice::kAuto;
  }
  if (const json* par = member(j, "parallel_tool_calls")) {
    if (!par->is_boolean()) return bad("parallel_tool_calls", "must be a boolean");
    r->parallel_tool_calls = par->get<bool>();
  }
  return Status::Ok();
}

}  // namespace

Status parse_request(std::string_view body, bool chat, const Limits& limits, const SamplingParams& defaults,
                     CompletionRequest* r) {
  const json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Status(ErrorCode::kInvalidJson, "the request body is not valid JSON");
  if (!j.is_object()) return Status(ErrorCode::kBadRequest, "the request body must be a JSON object");
  *r = CompletionRequest{};
  if (Status st = check_fields(j, chat, limits.strict_fields, &r->ignored_fields); !st.ok()) return st;
  r->chat = chat;
  r->sampling = defaults;
  if (Status st = optional_string(j, "model", &r->model); !st.ok()) return st;
  std::size_t bytes = 0;
  Status st = chat ? read_chat_messages(j, limits, r, &bytes) : read_prompt_field(j, limits, r, &bytes);
  if (!st.ok()) return st;
  if (bytes > limits.max_prompt_bytes) {
    return Status(ErrorCode::kPromptTooLarge, "prompt of " + std::to_string(bytes) + " bytes is over the limit of " +
                                                  std::to_string(limits.max_prompt_bytes));
  }
  if (!(st = read_max_tokens(j, r)).ok() || !(st = read_sampling_numbers(j, chat, r)).ok()) return st;
  if (!(st = read_stop_and_stream(j, r)).ok()) return st;
  if (!(st = optional_string(j, "user", &r->user)).ok()) return st;
  if (!(st = logprobs(j, chat, &r->logprobs)).ok()) return st;
  if (!(st = read_output_shape(j, r)).ok()) return st;
  if (const json* g = member(j, "uma")) {
    if (!(st = gateway_options(*g, r->n, &r->uma)).ok()) return st;
  }
  if (!(st = read_extensions(j, chat, r)).ok()) return st;
  r->sampling.logprobs = r->logprobs;
  const bool calls = !r->tools.empty() && r->tool_choice != ToolChoice::kNone;
  if (calls && !r->json_schema.empty()) {
    return bad("response_format", "cannot be combined with tools the model may call (use tool_choice: none)");
  }
  if (calls && !r->grammar.empty()) return bad("grammar", "cannot be combined with tools the model may call");
  return Status::Ok();
}

}  // namespace uma::openai
