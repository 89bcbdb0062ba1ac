// Helpers the OpenAI request readers share (openai.cc, openai_fields.cc): every read of a client's
// JSON is type-checked here, so nothing reaches a throwing accessor. Internal to http/.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

#include "common/status.h"
#include "http/openai.h"

namespace uma::openai::detail {

// Requests are read in their own key order: a JSON schema's property order is the output's.
using json = nlohmann::ordered_json;

inline Status bad(std::string_view field, std::string_view what) {
  return Status(ErrorCode::kBadRequest, "'" + std::string(field) + "' " + std::string(what), std::string(field));
}

// Null when absent, null-valued or `o` is no object.
inline const json* member(const json& o, const char* key) {
  if (!o.is_object()) return nullptr;
  const auto it = o.find(key);
  return it == o.end() || it->is_null() ? nullptr : &*it;
}

template <typename T>
Status number(const json& j, const char* key, double lo, double hi, T* out) {
  const json* v = member(j, key);
  if (v == nullptr) return Status::Ok();
  if (!v->is_number()) return bad(key, "must be a number");
  const double d = v->get<double>();
  if (d < lo || d > hi) return bad(key, "is out of range");
  *out = static_cast<T>(d);
  return Status::Ok();
}

// An integer field within [lo, hi]; absent or null leaves *out as it is.
inline Status integer(const json& j, const char* key, std::int64_t lo, std::int64_t hi, std::int64_t* out) {
  const json* v = member(j, key);
  if (v == nullptr) return Status::Ok();
  if (!v->is_number_integer() || v->get<std::int64_t>() < lo || v->get<std::int64_t>() > hi) {
    return bad(key, "must be an integer from " + std::to_string(lo) + " to " + std::to_string(hi));
  }
  *out = v->get<std::int64_t>();
  return Status::Ok();
}

inline Status boolean(const json& j, const char* key, bool* out) {
  const json* v = member(j, key);
  if (v == nullptr) return Status::Ok();
  if (!v->is_boolean()) return bad(key, "must be a boolean");
  *out = v->get<bool>();
  return Status::Ok();
}

// openai_fields.cc: the field policy (which fields exist on which endpoint, and what umad does with
// each; unknown ones are listed in *ignored, or a 400 when `strict`), and the extensions vLLM and
// llama-server define (ignore_eos, min_tokens, logit_bias, grammar, chat_template_kwargs, ...),
// read into *r after the OpenAI fields.
Status check_fields(const json& j, bool chat, bool strict, std::vector<std::string>* ignored);
Status read_extensions(const json& j, bool chat, CompletionRequest* r);

}  // namespace uma::openai::detail
