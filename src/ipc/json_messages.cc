#include "ipc/json_messages.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <limits>

#include "common/json_fields.h"
#include "common/json_text.h"
#include "ipc/wire.h"

namespace uma {

// Requests are read in their own key order: a JSON schema's property order is the output's.
using json = nlohmann::ordered_json;
using ojson = nlohmann::ordered_json;

namespace {

Status bad(std::string_view field, std::string_view what) {
  return Status(ErrorCode::kBadRequest, "field '" + std::string(field) + "' " + std::string(what), std::string(field));
}

const json* find(const json& obj, std::string_view key) {
  auto it = obj.find(key);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

Status get_number(const json& obj, std::string_view key, double lo, double hi, float* out) {
  const json* v = find(obj, key);
  if (v == nullptr) return Status::Ok();
  if (!v->is_number()) return bad(key, "must be a number");
  const double d = v->get<double>();
  if (!std::isfinite(d) || d < lo || d > hi) {
    return bad(key, "must be between " + to_json_text(json(lo)) + " and " + to_json_text(json(hi)));
  }
  *out = static_cast<float>(d);
  return Status::Ok();
}

Status get_int(const json& obj, std::string_view key, std::int64_t lo, std::int64_t hi, std::int64_t* out, bool* present) {
  const json* v = find(obj, key);
  if (present) *present = v != nullptr;
  if (v == nullptr) return Status::Ok();
  if (!v->is_number_integer()) return bad(key, "must be an integer");
  if (!json_integer(*v, lo, hi, out)) return bad(key, "must be between " + std::to_string(lo) + " and " + std::to_string(hi));
  return Status::Ok();
}

Status get_bool(const json& obj, std::string_view key, bool* out) {
  const json* v = find(obj, key);
  if (v == nullptr) return Status::Ok();
  if (!v->is_boolean()) return bad(key, "must be true or false");
  *out = v->get<bool>();
  return Status::Ok();
}

// The sampling fields, each within its range.
Status parse_sampling(const json& j, WireRequest* r) {
  std::int64_t i = 0;
  bool present = false;
  Status st;
  SamplingParams& s = r->sampling;
  if (!(st = get_number(j, wire::kTemperature, 0.0, 100.0, &s.temperature)).ok()) return st;
  if (!(st = get_number(j, wire::kTopP, 0.0, 1.0, &s.top_p)).ok()) return st;
  if (!(st = get_number(j, wire::kMinP, 0.0, 1.0, &s.min_p)).ok()) return st;
  if (!(st = get_number(j, wire::kRepeatPenalty, 0.0, 10.0, &s.repeat_penalty)).ok()) return st;
  if (!(st = get_number(j, wire::kFrequencyPenalty, -2.0, 2.0, &s.frequency_penalty)).ok()) return st;
  if (!(st = get_number(j, wire::kPresencePenalty, -2.0, 2.0, &s.presence_penalty)).ok()) return st;
  if (s.repeat_penalty == 0.0f) return bad(wire::kRepeatPenalty, "must be greater than 0");
  i = s.top_k;
  if (!(st = get_int(j, wire::kTopK, 0, 1 << 20, &i, nullptr)).ok()) return st;
  s.top_k = static_cast<std::int32_t>(i);
  if (!(st = get_bool(j, wire::kIgnoreEos, &s.ignore_eos)).ok()) return st;
  i = s.min_tokens;
  if (!(st = get_int(j, wire::kMinTokens, 0, kMaxTokensField, &i, nullptr)).ok()) return st;
  s.min_tokens = static_cast<std::int32_t>(i);
  i = s.seed;
  if (!(st = get_int(j, wire::kSeed, 0, std::numeric_limits<std::uint32_t>::max(), &i, nullptr)).ok()) return st;
  s.seed = static_cast<std::uint32_t>(i);
  if (!(st = get_int(j, wire::kLogprobs, 0, kMaxTopLogprobs, &i, &present)).ok()) return st;
  if (present) s.logprobs = static_cast<std::int32_t>(i);
  return Status::Ok();
}

// What constrains the output: a grammar or a JSON schema (not both), stop strings.
Status parse_constraints(const json& j, WireRequest* r) {
  SamplingParams& s = r->sampling;
  if (const json* g = find(j, wire::kGrammar)) {
    if (!g->is_string() || g->get_ref<const std::string&>().empty() ||
        g->get_ref<const std::string&>().size() > wire::kMaxGrammarBytes) {
      return bad(wire::kGrammar, "must be a non-empty GBNF string of at most 64 KiB");
    }
    s.grammar = g->get<std::string>();
  }
  if (const json* schema = find(j, wire::kJsonSchema)) {
    if (!schema->is_object()) return bad(wire::kJsonSchema, "must be a JSON schema object");
    if (!s.grammar.empty()) return bad(wire::kJsonSchema, "and grammar exclude each other");
    r->json_schema = to_json_text(*schema);
  }
  if (const json* stop = find(j, wire::kStop)) {
    if (!stop->is_array()) return bad(wire::kStop, "must be an array of strings");
    if (stop->size() > wire::kMaxStopStrings) return bad(wire::kStop, "has more than 16 strings");
    for (const json& e : *stop) {
      if (!e.is_string() || e.get_ref<const std::string&>().empty()) return bad(wire::kStop, "must hold non-empty strings");
      if (e.get_ref<const std::string&>().size() > wire::kMaxStopBytes) return bad(wire::kStop, "strings must be at most 256 bytes");
      r->stop.push_back(e.get<std::string>());
    }
  }
  return Status::Ok();
}

// How the scheduler treats it: targets, speculation, priority, the tenant.
Status parse_scheduling(const json& j, WireRequest* r) {
  if (const json* slo = find(j, wire::kSlo)) {
    if (!slo->is_object()) return bad(wire::kSlo, "must be an object");
    float ttft = 0, tbt = 0;
    if (!get_number(*slo, wire::kTargetTtftMs, 1.0, 1e7, &ttft).ok()) return bad("slo.target_ttft_ms", "must be a number of ms >= 1");
    if (!get_number(*slo, wire::kTargetTbtMs, 1.0, 1e7, &tbt).ok()) return bad("slo.target_tbt_ms", "must be a number of ms >= 1");
    r->slo_ttft_ms = ttft;
    r->slo_tbt_ms = tbt;
  }
  if (const json* sp = find(j, wire::kSpeculative)) {
    if (!sp->is_boolean()) return bad(wire::kSpeculative, "must be a boolean");
    r->speculative = sp->get<bool>();
  }
  if (const json* p = find(j, wire::kPrediction)) {
    if (!p->is_string() || p->get_ref<const std::string&>().size() > wire::kMaxPredictionBytes) {
      return bad(wire::kPrediction, "must be a string of at most 256 KiB");
    }
    r->prediction = p->get<std::string>();
  }
  if (const json* prio = find(j, wire::kPriority)) {
    const bool known = prio->is_string() && (*prio == wire::kPriorityInteractive || *prio == wire::kPriorityBackground);
    if (!known) return bad(wire::kPriority, "must be \"interactive\" or \"background\"");
    r->background = *prio == wire::kPriorityBackground;
  }
  if (const json* meta = find(j, wire::kMetadata)) {
    if (!meta->is_object()) return bad(wire::kMetadata, "must be an object");
    if (const json* tenant = find(*meta, wire::kTenant)) {
      if (!tenant->is_string() || tenant->get_ref<const std::string&>().size() > wire::kMaxTenantBytes) {
        return bad("metadata.tenant", "must be a string of at most 256 bytes");
      }
      r->tenant = tenant->get<std::string>();
    }
    r->metadata_json = to_json_text(*meta);
  }
  return Status::Ok();
}

Status parse_request(const json& j, const RequestLimits& limits, WireRequest* r) {
  const json* prompt = find(j, wire::kPrompt);
  if (prompt == nullptr) return bad(wire::kPrompt, "is required");
  if (!prompt->is_string()) return bad(wire::kPrompt, "must be a string");
  r->prompt = prompt->get<std::string>();
  if (r->prompt.size() > limits.max_prompt_bytes) {
    return Status(ErrorCode::kPromptTooLarge, "prompt of " + std::to_string(r->prompt.size()) +
                                                  " bytes is over the limit of " + std::to_string(limits.max_prompt_bytes));
  }
  if (r->prompt.empty()) return bad(wire::kPrompt, "must not be empty");
  if (r->prompt.find('\0') != std::string::npos) return bad(wire::kPrompt, "must not contain NUL");
  std::int64_t i = 0;
  bool present = false;
  Status st;
  if (!(st = get_int(j, wire::kMaxTokens, 1, kMaxTokensField, &i, &present)).ok()) return st;
  if (present) r->max_tokens = static_cast<std::int32_t>(i);
  if (!(st = parse_sampling(j, r)).ok()) return st;
  if (!(st = get_bool(j, wire::kStream, &r->stream)).ok()) return st;
  if (!(st = get_bool(j, wire::kKeepAlive, &r->keep_alive)).ok()) return st;
  if (!(st = parse_constraints(j, r)).ok()) return st;
  return parse_scheduling(j, r);
}

}  // namespace

Status parse_client_message(std::string_view payload, const RequestLimits& limits, ClientMessage* out, std::string* id) {
  id->clear();
  if (json_deeper_than(payload, wire::kMaxJsonDepth)) {
    return Status(ErrorCode::kBadRequest, "a request must not nest deeper than " + std::to_string(wire::kMaxJsonDepth) + " levels");
  }
  const json j = json::parse(payload, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Status(ErrorCode::kInvalidJson, "the frame is not valid JSON");
  if (!j.is_object()) return Status(ErrorCode::kBadRequest, "a request must be a JSON object");
  if (const json* v = find(j, wire::kId); v != nullptr && v->is_string()) *id = v->get<std::string>();

  if (const json* type = find(j, wire::kType)) {
    if (type->is_string() && type->get_ref<const std::string&>() == wire::kTypeMetrics) {
      WireMetricsRequest m;
      if (const json* fmt = find(j, wire::kFormat)) {
        if (!fmt->is_string() || (*fmt != "json" && *fmt != "prometheus")) {
          return bad(wire::kFormat, "must be \"json\" or \"prometheus\"");
        }
        m.prometheus = *fmt == "prometheus";
      }
      *out = m;
      return Status::Ok();
    }
    return bad(wire::kType, "must be \"metrics\" when present");
  }
  const json* idv = find(j, wire::kId);
  if (idv == nullptr) return bad(wire::kId, "is required");
  if (!idv->is_string()) return bad(wire::kId, "must be a string");
  if (const json* ev = find(j, wire::kEvent)) {
    if (ev->is_string() && ev->get_ref<const std::string&>() == wire::kEventCancel) {
      *out = WireCancel{*id};
      return Status::Ok();
    }
    return bad(wire::kEvent, "must be \"cancel\" when present");
  }
  WireRequest r;
  r.id = *id;
  if (Status st = parse_request(j, limits, &r); !st.ok()) return st;
  *out = std::move(r);
  return Status::Ok();
}

namespace {

// Reads of a server event, type-checked: a field of the wrong type reads as absent.
std::string str_or(const json& obj, std::string_view key, std::string fallback = {}) {
  const json* v = obj.is_object() ? find(obj, key) : nullptr;
  return v != nullptr && v->is_string() ? v->get<std::string>() : fallback;
}

template <typename T>
T num_or(const json& obj, std::string_view key, T fallback) {
  const json* v = obj.is_object() ? find(obj, key) : nullptr;
  return v != nullptr && v->is_number() ? v->get<T>() : fallback;
}

ojson logprob_json(const TokenLogprob& t) {
  return {{"token_id", t.token}, {"text", t.text}, {"bytes", byte_array<ojson>(t.text)}, {"logprob", t.logprob}};
}

ojson logprobs_json(std::span<const LogprobEntry> entries) {
  return logprob_entries<ojson>(entries, "top", logprob_json);
}

TokenLogprob read_logprob(const json& x) {
  TokenLogprob t;
  t.token = num_or<std::int32_t>(x, "token_id", -1);
  t.logprob = num_or<float>(x, "logprob", 0.0f);
  if (const json* b = x.is_object() ? find(x, "bytes") : nullptr; b != nullptr && b->is_array()) {
    for (const json& ch : *b) t.text += static_cast<char>(ch.is_number_unsigned() ? ch.get<unsigned>() : 0u);
  }
  return t;
}

std::vector<LogprobEntry> read_logprobs(const json& j) {
  std::vector<LogprobEntry> out;
  const json* all = find(j, wire::kLogprobs);
  if (all == nullptr || !all->is_array()) return out;
  for (const json& x : *all) {
    LogprobEntry e{read_logprob(x), {}};
    if (const json* top = x.is_object() ? find(x, "top") : nullptr; top != nullptr && top->is_array()) {
      for (const json& t : *top) e.top.push_back(read_logprob(t));
    }
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace

Status parse_event(std::string_view payload, WireEvent* e) {
  const json j = json::parse(payload, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return Status(ErrorCode::kInvalidJson, "event is not a JSON object");
  *e = WireEvent{};
  e->raw.assign(payload);
  const std::string ev = str_or(j, wire::kEvent);
  e->id = str_or(j, wire::kId);
  if (ev == wire::kEventToken) {
    e->kind = WireEvent::Kind::kToken;
    e->text = str_or(j, "text");
    e->token_id = num_or<std::int32_t>(j, "token_id", -1);
    e->logprobs = read_logprobs(j);
  } else if (ev == wire::kEventEos) {
    e->kind = WireEvent::Kind::kEos;
    e->reason = str_or(j, "reason");
    e->text = str_or(j, "text");
    if (const json* usage = find(j, "usage")) {
      e->prompt_tokens = num_or<std::int32_t>(*usage, "prompt_tokens", 0);
      e->completion_tokens = num_or<std::int32_t>(*usage, "completion_tokens", 0);
      e->accepted_prediction_tokens = num_or<std::int32_t>(*usage, "accepted_prediction_tokens", -1);
      e->rejected_prediction_tokens = num_or<std::int32_t>(*usage, "rejected_prediction_tokens", -1);
    }
    if (const json* t = find(j, "timings")) {
      e->queue_ms = num_or<double>(*t, "queue_ms", 0.0);
      e->ttft_ms = num_or<double>(*t, "ttft_ms", -1.0);
      e->total_ms = num_or<double>(*t, "total_ms", 0.0);
      e->bytes_per_token = num_or<double>(*t, "bytes_per_token", 0.0);
    }
    if (const json* meta = find(j, "metadata")) e->metadata_json = to_json_text(*meta);
    e->logprobs = read_logprobs(j);
  } else if (ev == wire::kEventError) {
    e->kind = WireEvent::Kind::kError;
    e->code = str_or(j, "code");
    e->message = str_or(j, "message");
    e->param = str_or(j, "param");
  } else if (ev == wire::kEventMetrics) {
    e->kind = WireEvent::Kind::kMetrics;
    e->text = str_or(j, "text");
  }
  return Status::Ok();
}

std::string encode_request(const WireRequest& r) {
  ojson j;
  j["id"] = r.id;
  j["prompt"] = r.prompt;
  if (r.max_tokens) j["max_tokens"] = *r.max_tokens;
  const SamplingParams d;
  const SamplingParams& s = r.sampling;
  if (s.temperature != d.temperature) j["temperature"] = s.temperature;
  if (s.top_p != d.top_p) j["top_p"] = s.top_p;
  if (s.top_k != d.top_k) j["top_k"] = s.top_k;
  if (s.min_p != d.min_p) j["min_p"] = s.min_p;
  if (s.repeat_penalty != d.repeat_penalty) j["repeat_penalty"] = s.repeat_penalty;
  if (s.frequency_penalty != d.frequency_penalty) j["frequency_penalty"] = s.frequency_penalty;
  if (s.presence_penalty != d.presence_penalty) j["presence_penalty"] = s.presence_penalty;
  if (s.seed != d.seed) j["seed"] = s.seed;
  if (s.ignore_eos) j["ignore_eos"] = true;
  if (s.min_tokens > 0) j["min_tokens"] = s.min_tokens;
  if (s.logprobs >= 0) j["logprobs"] = s.logprobs;
  if (!s.grammar.empty()) j["grammar"] = s.grammar;
  if (!r.json_schema.empty()) {
    // Text that is not JSON goes as a string: the server names the field rather than the frame.
    ojson schema = ojson::parse(r.json_schema, nullptr, false);
    j["json_schema"] = schema.is_discarded() ? ojson(r.json_schema) : std::move(schema);
  }
  if (!r.stop.empty()) j["stop"] = r.stop;
  if (!r.stream) j["stream"] = false;
  if (r.keep_alive) j["keep_alive"] = true;
  if (r.slo_ttft_ms > 0 || r.slo_tbt_ms > 0) {
    ojson slo = ojson::object();
    if (r.slo_ttft_ms > 0) slo["target_ttft_ms"] = r.slo_ttft_ms;
    if (r.slo_tbt_ms > 0) slo["target_tbt_ms"] = r.slo_tbt_ms;
    j["slo"] = slo;
  }
  if (r.background) j["priority"] = wire::kPriorityBackground;
  if (r.speculative) j["speculative"] = *r.speculative;
  if (!r.prediction.empty()) j["prediction"] = r.prediction;
  if (!r.metadata_json.empty()) j["metadata"] = ojson::parse(r.metadata_json, nullptr, false);
  if (!r.tenant.empty()) j["metadata"]["tenant"] = r.tenant;
  return to_json_text(j);
}

std::string encode_cancel(std::string_view id) {
  return to_json_text(ojson{{"event", wire::kEventCancel}, {"id", id}});
}

std::string encode_metrics_request(bool prometheus) {
  ojson j{{"type", wire::kTypeMetrics}};
  if (prometheus) j["format"] = "prometheus";
  return to_json_text(j);
}

std::string encode_metrics_text_event(std::string_view text) {
  return to_json_text(ojson{{"event", wire::kEventMetrics}, {"format", "prometheus"}, {"text", text}});
}

std::string encode_token_event(std::string_view id, std::string_view text, std::int32_t token_id,
                               std::span<const LogprobEntry> logprobs) {
  ojson j;
  j["id"] = id;
  j["event"] = wire::kEventToken;
  j["text"] = text;
  j["token_id"] = token_id;
  if (!logprobs.empty()) j["logprobs"] = logprobs_json(logprobs);
  return to_json_text(j);
}

std::string encode_eos_event(std::string_view id, const EosFields& f) {
  ojson j;
  j["id"] = id;
  j["event"] = wire::kEventEos;
  j["reason"] = f.reason;
  if (f.full_text != nullptr) j["text"] = *f.full_text;
  j["usage"] = {{"prompt_tokens", f.prompt_tokens}, {"completion_tokens", f.completion_tokens}};
  if (f.prediction) {
    j["usage"]["accepted_prediction_tokens"] = f.accepted_prediction_tokens;
    j["usage"]["rejected_prediction_tokens"] = f.rejected_prediction_tokens;
  }
  j["timings"] = {{"queue_ms", f.queue_ms}, {"ttft_ms", f.ttft_ms}, {"total_ms", f.total_ms}, {"bytes_per_token", f.bytes_per_token}};
  if (!f.metadata_json.empty()) j["metadata"] = ojson::parse(f.metadata_json, nullptr, false);
  if (f.with_logprobs) j["logprobs"] = logprobs_json(f.logprobs);
  return to_json_text(j);
}

std::string encode_error_event(std::string_view id, ErrorCode code, std::string_view message, std::string_view param) {
  ojson j;
  j["id"] = id;
  j["event"] = wire::kEventError;
  j["code"] = wire::error_code(code);
  j["message"] = message;
  if (!param.empty()) j["param"] = param;
  return to_json_text(j);
}

std::string encode_metrics_event(std::string_view snapshot_json) {
  ojson j;
  j["event"] = wire::kEventMetrics;
  ojson snap = ojson::parse(snapshot_json, nullptr, false);
  if (snap.is_object()) {
    for (auto& [k, v] : snap.items()) j[k] = v;
  }
  return to_json_text(j);
}

namespace wire {

std::string_view error_code(ErrorCode code) {
  switch (code) {
    case ErrorCode::kFrameTooLarge: return "E_PROTO_FRAME_TOO_LARGE";
    case ErrorCode::kInvalidJson: return "E_PROTO_INVALID_JSON";
    case ErrorCode::kBadRequest:
    case ErrorCode::kInvalidArgument:
    case ErrorCode::kInvalidUtf8:
    case ErrorCode::kContainsNul:
    case ErrorCode::kEmptyPrompt: return "E_PROTO_BAD_REQUEST";
    case ErrorCode::kPromptTooLarge: return "E_LIMIT_PROMPT_TOO_LARGE";
    case ErrorCode::kTooManySessions: return "E_LIMIT_SESSIONS";
    case ErrorCode::kContextExceeded: return "E_LIMIT_CONTEXT";
    case ErrorCode::kBusy: return "E_BUSY";
    case ErrorCode::kOverloaded: return "E_OVERLOADED";
    case ErrorCode::kNotFound: return "E_NOT_FOUND";
    case ErrorCode::kUnauthorized: return "E_UNAUTHORIZED";
    case ErrorCode::kNotSupported: return "E_NOT_SUPPORTED";
    case ErrorCode::kDecodeFailed:
    case ErrorCode::kKvExhausted:
    case ErrorCode::kKvPending: return "E_RUNTIME_DECODE";
    case ErrorCode::kShuttingDown:
    case ErrorCode::kUnavailable: return "E_SHUTTING_DOWN";
    case ErrorCode::kOk:
    case ErrorCode::kIo:
    case ErrorCode::kModelLoad:
    case ErrorCode::kInternal: break;
  }
  return "E_INTERNAL";
}

}  // namespace wire
}  // namespace uma
