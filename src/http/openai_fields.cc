// The field policy of the OpenAI endpoints and the extensions peer servers define (openai_json.h).
// Every field a request may carry, and what umad does with it:
//   - OpenAI's fields umad honours, and the extensions of vLLM and llama-server that benchmark
//     clients and front ends send (ignore_eos, min_tokens, repetition_penalty, logit_bias, ...),
//     with those servers' meaning;
//   - OpenAI's fields umad cannot honour: a 400 naming them unless the value asks for nothing (an
//     app that asks for audio or `echo` and silently gets neither fails far from the cause);
//   - fields no one defined: ignored, as every peer server does, and named (the response header
//     X-Uma-Ignored-Fields, /metrics); --strict-fields makes them a 400.
// docs/PROTOCOL.md lists every field's status.
#include <cmath>
#include <limits>

#include "common/json_fields.h"
#include "common/json_text.h"
#include "http/openai_json.h"

namespace uma::openai::detail {
namespace {

enum class Use : std::uint8_t {
  kParsed,    // read into the request
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
    {"logit_bias", Use::kParsed, true, true},
    {"response_format", Use::kParsed, true, false},
    {"tools", Use::kParsed, true, false},
    {"tool_choice", Use::kParsed, true, false},
    {"parallel_tool_calls", Use::kParsed, true, false},
    {"reasoning_effort", Use::kParsed, true, false},
    {"functions", Use::kNoOpOnly, true, false},
    {"function_call", Use::kNoOpOnly, true, false},
    {"modalities", Use::kNoOpOnly, true, false},
    {"audio", Use::kNoOpOnly, true, false},
    {"verbosity", Use::kNoOpOnly, true, false},
    {"web_search_options", Use::kNoOpOnly, true, false},
    {"echo", Use::kNoOpOnly, false, true},
    {"best_of", Use::kNoOpOnly, false, true},
    {"suffix", Use::kNoOpOnly, false, true},
    // Extensions (vLLM, llama-server), with their meaning.
    {"top_k", Use::kParsed, true, true},
    {"min_p", Use::kParsed, true, true},
    {"repeat_penalty", Use::kParsed, true, true},
    {"repetition_penalty", Use::kParsed, true, true},
    {"ignore_eos", Use::kParsed, true, true},
    {"min_tokens", Use::kParsed, true, true},
    {"stop_token_ids", Use::kParsed, true, true},
    {"n_predict", Use::kParsed, true, true},
    {"n_probs", Use::kParsed, true, true},
    {"response_fields", Use::kParsed, true, true},
    {"verbose", Use::kParsed, true, true},
    {"return_progress", Use::kParsed, true, true},
    {"grammar", Use::kParsed, true, true},
    {"json_schema", Use::kParsed, true, true},
    {"chat_template_kwargs", Use::kParsed, true, false},
    {"add_generation_prompt", Use::kParsed, true, false},
    {"continue_final_message", Use::kParsed, true, false},
    {"cache_prompt", Use::kHarmless, true, true},  // umad's prefix cache is always on
    {"skip_special_tokens", Use::kNoOpOnly, true, true},
    {"uma", Use::kParsed, true, true},  // umad's own: what a gateway asks for (GatewayOptions)
    {"speculative", Use::kParsed, true, true},  // umad's own: speculative decoding on or off
    {"prediction", Use::kParsed, true, true},   // OpenAI's predicted outputs (umad takes it on completions too)
};

// The value of a kNoOpOnly field that asks for nothing beyond what umad does anyway.
bool is_noop(std::string_view name, const json& v) {
  if (name == "functions") return v.is_array() && v.empty();
  if (name == "modalities") return v.is_array() && v.size() == 1 && v[0] == "text";
  if (name == "echo") return v.is_boolean() && !v.get<bool>();
  if (name == "best_of") return v.is_number_integer() && v.get<std::int64_t>() == 1;
  if (name == "suffix") return v.is_string() && v.get_ref<const std::string&>().empty();
  if (name == "skip_special_tokens") return v.is_boolean() && v.get<bool>();  // umad's text never has them
  return false;  // function_call, audio, ...: only null asks for nothing
}

constexpr std::size_t kMaxIgnoredNamed = 16;
constexpr std::size_t kMaxPredictionBytes = 256 * 1024;

// OpenAI's predicted outputs: {"type": "content", "content": "text" or [{"type": "text", "text": ...}]}.
Status prediction(const json& p, std::string* out) {
  const char* field = "prediction";
  const json* type = member(p, "type");
  const json* content = member(p, "content");
  if (type == nullptr || *type != "content" || content == nullptr) {
    return bad(field, "must be {\"type\": \"content\", \"content\": text or text parts}");
  }
  if (content->is_string()) {
    *out = content->get<std::string>();
  } else if (content->is_array()) {
    for (const json& part : *content) {
      const json* text = member(part, "text");
      const json* part_type = member(part, "type");
      if (part_type == nullptr || *part_type != "text" || text == nullptr || !text->is_string()) {
        return bad(field, "content parts must be {\"type\": \"text\", \"text\": ...}");
      }
      *out += text->get_ref<const std::string&>();
      if (out->size() > kMaxPredictionBytes) break;
    }
  } else {
    return bad(field, "content must be a string or an array of text parts");
  }
  if (out->size() > kMaxPredictionBytes) return bad(field, "content is over 256 KiB");
  return Status::Ok();
}

// logit_bias: OpenAI's {"TOKEN_ID": bias}; llama-server's also [[TOKEN_ID or "text", bias], ...]
// and a key that is text; `false` as the bias: never (-inf). Bias in [-100, 100].
Status logit_bias(const json& v, SamplingParams* s) {
  const char* field = "logit_bias";
  auto add = [&](const std::string* text, std::int64_t token, const json& b) -> Status {
    float bias = 0.0f;
    if (b.is_boolean() && !b.get<bool>()) {
      bias = -std::numeric_limits<float>::infinity();
    } else if (b.is_number() && b.get<double>() >= -100.0 && b.get<double>() <= 100.0) {
      bias = static_cast<float>(b.get<double>());
    } else {
      return bad(field, "biases must be numbers from -100 to 100 (or false: never)");
    }
    if (s->logit_bias.size() + s->text_bias.size() >= kMaxLogitBias) return bad(field, "has too many entries");
    if (text != nullptr) {
      if (text->empty() || text->find('\0') != std::string::npos) return bad(field, "texts must be non-empty, without NUL");
      s->text_bias.emplace_back(*text, bias);
    } else {
      if (token < 0 || token > INT32_MAX) return bad(field, "token ids must be integers >= 0");
      s->logit_bias.push_back({static_cast<std::int32_t>(token), bias});
    }
    return Status::Ok();
  };
  if (v.is_object()) {
    for (const auto& [key, b] : v.items()) {
      std::size_t used = 0;
      std::int64_t id = -1;
      try {
        id = std::stoll(key, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      Status st = used == key.size() && !key.empty() ? add(nullptr, id, b) : add(&key, 0, b);
      if (!st.ok()) return st;
    }
    return Status::Ok();
  }
  if (!v.is_array()) return bad(field, "must be an object of token id -> bias (or llama-server's array of pairs)");
  for (const json& pair : v) {
    if (!pair.is_array() || pair.size() != 2) return bad(field, "array entries must be [token id or text, bias]");
    Status st = pair[0].is_string()            ? add(&pair[0].get_ref<const std::string&>(), 0, pair[1])
                : pair[0].is_number_integer() ? add(nullptr, pair[0].get<std::int64_t>(), pair[1])
                                              : bad(field, "array entries must be [token id or text, bias]");
    if (!st.ok()) return st;
  }
  return Status::Ok();
}

}  // namespace

Status check_fields(const json& j, bool chat, bool strict, std::vector<std::string>* ignored) {
  for (const auto& [key, value] : j.items()) {
    if (value.is_null()) continue;
    const FieldRule* rule = nullptr;
    bool elsewhere = false;  // a field of the other endpoint
    for (const FieldRule& r : kFields) {
      if (key != r.name) continue;
      if (chat ? r.chat : r.completions) rule = &r;
      else elsewhere = true;
    }
    if (rule == nullptr) {
      if (strict || elsewhere) {
        return bad(key, std::string("is not a field of ") + (chat ? "/v1/chat/completions" : "/v1/completions") +
                            " that umad knows (docs/PROTOCOL.md lists them)");
      }
      if (ignored->size() < kMaxIgnoredNamed) ignored->push_back(key);
      continue;
    }
    if (rule->use == Use::kNoOpOnly && !is_noop(key, value)) {
      return Status(ErrorCode::kBadRequest,
                    "'" + key + "' is not supported by umad yet (only the value that asks for nothing is accepted)",
                    key);
    }
  }
  return Status::Ok();
}

namespace {

// vLLM's and others' sampling extensions: ignore_eos, min_tokens, stop_token_ids, logit_bias, ...
Status read_sampling_extensions(const json& j, CompletionRequest* r) {
  SamplingParams& s = r->sampling;
  Status st;
  if (!(st = boolean(j, "ignore_eos", &s.ignore_eos)).ok()) return st;
  if (const json* sp = member(j, "speculative")) {
    if (!sp->is_boolean()) return bad("speculative", "must be a boolean");
    r->speculative = sp->get<bool>();
  }
  if (const json* p = member(j, "prediction")) {
    if (!(st = prediction(*p, &r->prediction)).ok()) return st;
  }
  std::int64_t v = s.min_tokens;
  if (!(st = integer(j, "min_tokens", 0, kMaxTokensField, &v)).ok()) return st;
  s.min_tokens = static_cast<std::int32_t>(v);
  if (!(st = number(j, "repetition_penalty", 0.0, 10.0, &s.repeat_penalty)).ok()) return st;
  if (s.repeat_penalty == 0.0f) return bad("repetition_penalty", "must be greater than 0");
  if (const json* ids = member(j, "stop_token_ids")) {
    if (ids->is_array() && ids->size() > kMaxStopTokenIds) return bad("stop_token_ids", "must be an array of at most 64 token ids");
    if (!json_token_ids(*ids, &s.stop_token_ids)) return bad("stop_token_ids", "must be an array of token ids");
  }
  if (const json* b = member(j, "logit_bias")) {
    if (Status st2 = logit_bias(*b, &s); !st2.ok()) return st2;
  }
  return Status::Ok();
}

// llama-server's: n_predict, n_probs, response_fields, verbose, return_progress.
Status read_llama_server_fields(const json& j, CompletionRequest* r) {
  if (const json* np = member(j, "n_predict"); np != nullptr && !member(j, "max_tokens")) {
    // llama-server's max_tokens: -1 is "until the context ends" (not asked).
    if (!np->is_number_integer() || np->get<std::int64_t>() < -1 || np->get<std::int64_t>() > kMaxTokensField) {
      return bad("n_predict", "must be -1 or a positive integer");
    }
    if (np->get<std::int64_t>() > 0) r->max_tokens = static_cast<std::int32_t>(np->get<std::int64_t>());
  }
  if (const json* np = member(j, "n_probs"); np != nullptr && r->logprobs < 0) {
    if (!np->is_number_integer() || np->get<std::int64_t>() < 0 || np->get<std::int64_t>() > kMaxTopLogprobs) {
      return bad("n_probs", "must be an integer from 0 to 20");
    }
    if (np->get<std::int64_t>() > 0) r->logprobs = static_cast<std::int32_t>(np->get<std::int64_t>());
  }
  if (const json* rf = member(j, "response_fields")) {
    constexpr std::size_t kMaxResponseFields = 64;
    if (!rf->is_array() || rf->size() > kMaxResponseFields) return bad("response_fields", "must be an array of at most 64 field paths");
    for (const json& f : *rf) {
      if (!f.is_string() || f.get_ref<const std::string&>().size() > 256) return bad("response_fields", "must hold strings of at most 256 bytes");
      r->response_fields.push_back(f.get<std::string>());
    }
  }
  if (const json* v = member(j, "verbose")) {
    if (!v->is_boolean()) return bad("verbose", "must be a boolean");
    r->verbose = v->get<bool>();
  }
  if (const json* p = member(j, "return_progress")) {
    if (!p->is_boolean()) return bad("return_progress", "must be a boolean");
    r->return_progress = p->get<bool>();
  }
  return Status::Ok();
}

// A top-level GBNF grammar or JSON schema (one of them at most).
Status read_grammar_fields(const json& j, CompletionRequest* r) {
  if (const json* g = member(j, "grammar")) {
    if (!g->is_string()) return bad("grammar", "must be a GBNF grammar (a string)");
    if (g->get_ref<const std::string&>().find('\0') != std::string::npos) return bad("grammar", "must not contain NUL");
    r->grammar = g->get<std::string>();
  }
  if (const json* js = member(j, "json_schema")) {
    if (!js->is_object()) return bad("json_schema", "must be a JSON schema object");
    if (!r->json_schema.empty()) return bad("json_schema", "cannot be combined with response_format");
    r->json_schema = to_json_text(*js);
  }
  if (!r->grammar.empty() && !r->json_schema.empty()) return bad("grammar", "cannot be combined with a JSON schema");
  return Status::Ok();
}

// chat_template_kwargs, add_generation_prompt, continue_final_message, reasoning_effort.
Status read_template_switches(const json& j, CompletionRequest* r) {
  if (const json* kw = member(j, "chat_template_kwargs")) {
    if (!kw->is_object()) return bad("chat_template_kwargs", "must be an object");
    for (const auto& [key, value] : kw->items()) {
      if (key == "enable_thinking") {
        if (!value.is_boolean()) return bad("chat_template_kwargs.enable_thinking", "must be a boolean");
        r->enable_thinking = value.get<bool>();
      }
      r->template_kwargs[key] = to_json_text(value);
    }
  }
  const json* generation = member(j, "add_generation_prompt");
  const json* cont = member(j, "continue_final_message");
  if (generation != nullptr) {
    if (!generation->is_boolean()) return bad("add_generation_prompt", "must be a boolean");
    r->add_generation_prompt = generation->get<bool>();
  }
  if (cont != nullptr) {
    if (cont->is_boolean()) {
      r->continuation = cont->get<bool>() ? ChatContinuation::kAuto : ChatContinuation::kNone;
    } else if (cont->is_string() && (*cont == "content" || *cont == "reasoning_content")) {
      r->continuation = *cont == "content" ? ChatContinuation::kContent : ChatContinuation::kReasoning;
    } else {
      return bad("continue_final_message", "must be a boolean, \"content\" or \"reasoning_content\"");
    }
  }
  const bool ends_with_assistant = !r->messages.empty() && r->messages.back().role == "assistant";
  if (cont == nullptr && generation == nullptr && ends_with_assistant) {
    // llama-server's prefill: a last assistant message is continued, not answered
    if (r->messages.size() >= 2 && r->messages[r->messages.size() - 2].role == "assistant") {
      return bad("messages", "two assistant messages at the end: which one to continue?");
    }
    r->continuation = ChatContinuation::kAuto;
  }
  if (r->continuation != ChatContinuation::kNone) {
    if (generation != nullptr && r->add_generation_prompt) {
      return bad("continue_final_message", "cannot be combined with add_generation_prompt true");
    }
    if (!ends_with_assistant) return bad("continue_final_message", "needs an assistant message last");
    r->add_generation_prompt = false;
  }
  if (const json* effort = member(j, "reasoning_effort")) {
    const std::string e = effort->is_string() ? effort->get<std::string>() : std::string();
    if (e != "none" && e != "minimal" && e != "low" && e != "medium" && e != "high") {
      return bad("reasoning_effort", "must be none, minimal, low, medium or high");
    }
    // "none" turns a thinking template's thinking off; the others leave it on, and templates that
    // read the effort (gpt-oss's) get it.
    if (!r->enable_thinking.has_value()) r->enable_thinking = e != "none";
    if (!r->template_kwargs.contains("reasoning_effort")) r->template_kwargs["reasoning_effort"] = "\"" + e + "\"";
  }
  return Status::Ok();
}

}  // namespace

Status read_extensions(const json& j, bool chat, CompletionRequest* r) {
  Status st;
  if (!(st = read_sampling_extensions(j, r)).ok() || !(st = read_llama_server_fields(j, r)).ok()) return st;
  if (!(st = read_grammar_fields(j, r)).ok()) return st;
  return chat ? read_template_switches(j, r) : Status::Ok();
}

}  // namespace uma::openai::detail
