// JSON at the protocol edge, turned into typed structs at once (and back). Used by the daemon
// (parse requests, encode events) and by clients: uma-cli, the tests, the benchmark (encode
// requests, parse events). Nothing outside ipc/, cli/ and tools sees JSON.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "common/status.h"
#include "serve/sampling.h"

namespace uma {

struct WireRequest {
  std::string id;
  std::string prompt;
  std::optional<std::int32_t> max_tokens;
  SamplingParams sampling;
  std::vector<std::string> stop;
  bool stream = true;
  bool keep_alive = false;
  double slo_ttft_ms = 0.0;   // 0: server default
  double slo_tbt_ms = 0.0;
  bool background = false;    // "priority": "background" (default "interactive")
  std::string tenant;         // metadata.tenant when it is a string
  std::string metadata_json;  // the request's `metadata` object, serialized; empty when absent
  std::string json_schema;    // `json_schema` serialized; empty when absent (a grammar is in sampling.grammar)
  std::optional<bool> speculative;  // speculative decoding; absent: the server's default
  std::string prediction;           // the expected output (OpenAI's predicted outputs); empty: none
};
struct WireCancel {
  std::string id;
};
struct WireMetricsRequest {
  bool prometheus = false;  // "format": "prometheus" (text exposition) instead of JSON fields
};
using ClientMessage = std::variant<WireRequest, WireCancel, WireMetricsRequest>;

struct RequestLimits {
  std::size_t max_prompt_bytes = 64 * 1024;
};
// max_tokens above this is refused at once; below it, the context decides (the scheduler).
inline constexpr std::int64_t kMaxTokensField = std::int64_t{1} << 30;

// Parses one frame's payload. On error returns the code (kInvalidJson, kBadRequest naming the
// field, kPromptTooLarge) and sets *id to the request's id when it could be read.
Status parse_client_message(std::string_view payload, const RequestLimits& limits, ClientMessage* out,
                            std::string* id);

// A server event as a client sees it.
struct WireEvent {
  enum class Kind { kToken, kEos, kError, kMetrics, kUnknown };
  Kind kind = Kind::kUnknown;
  std::string id;
  std::string text;            // token: the piece; eos: the whole text when stream was false
  std::int32_t token_id = -1;
  std::string reason;          // eos
  std::int32_t prompt_tokens = 0;
  std::int32_t completion_tokens = 0;
  std::int32_t accepted_prediction_tokens = -1, rejected_prediction_tokens = -1;  // -1: not in usage
  double queue_ms = 0.0, ttft_ms = -1.0, total_ms = 0.0, bytes_per_token = 0.0;
  std::string code, message;   // error
  std::string param;           // error: the request field at fault (empty: none)
  std::string metadata_json;   // eos: echoed metadata
  std::vector<LogprobEntry> logprobs;  // token / eos: the entries it carries (request's logprobs)
  std::string raw;             // the payload as received
};
Status parse_event(std::string_view payload, WireEvent* out);

// Encoders (each returns one JSON payload, unframed).
std::string encode_request(const WireRequest& r);
std::string encode_cancel(std::string_view id);
std::string encode_metrics_request(bool prometheus = false);
std::string encode_token_event(std::string_view id, std::string_view text, std::int32_t token_id,
                               std::span<const LogprobEntry> logprobs = {});
struct EosFields {
  std::string_view reason;
  std::int32_t prompt_tokens = 0, completion_tokens = 0;
  double queue_ms = 0.0, ttft_ms = -1.0, total_ms = 0.0;
  const std::string* full_text = nullptr;  // stream:false
  std::string_view metadata_json;
  // The entries of tokens it releases (stream:false: every token's); only when the request asked.
  std::span<const LogprobEntry> logprobs = {};
  bool with_logprobs = false;
  double bytes_per_token = 0.0;  // its share of the ticks' predicted bytes (sched/tick_cost.h)
  // A request with a prediction: usage says its draft tokens accepted and rejected.
  bool prediction = false;
  std::int32_t accepted_prediction_tokens = 0, rejected_prediction_tokens = 0;
};
std::string encode_eos_event(std::string_view id, const EosFields& f);
std::string encode_error_event(std::string_view id, ErrorCode code, std::string_view message, std::string_view param = {});
// Wraps a metrics snapshot (a JSON object) as {"event":"metrics", ...its fields}.
std::string encode_metrics_event(std::string_view snapshot_json);
// Prometheus text as {"event":"metrics","format":"prometheus","text":...}.
std::string encode_metrics_text_event(std::string_view text);

}  // namespace uma
